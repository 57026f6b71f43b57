// Package commands holds every command sluice answers: a registry of name,
// arity, flags and handler, and one file per family (limit.go for the
// limiting commands, conn.go for connection commands, server.go for server
// commands). Handlers write their replies through a Writer (redcon's Writer shape) and never
// block except where a command's contract says so (RL.ACQUIRE … WAIT).
package commands

import (
	"strings"
	"time"
)

// Flag describes what a command may do, for ACL checks and COMMAND INFO.
type Flag uint16

const (
	// FlagNoAuth commands run before AUTH (AUTH, HELLO, QUIT, RESET).
	FlagNoAuth Flag = 1 << iota
	// FlagAdmin commands need the admin role.
	FlagAdmin
	// FlagWrite commands change replicated state.
	FlagWrite
	// FlagReadOnly commands change nothing.
	FlagReadOnly
	// FlagFast commands answer in constant time.
	FlagFast
	// FlagTx commands control a transaction (MULTI, EXEC, DISCARD, WATCH):
	// they run at once inside MULTI rather than being queued.
	FlagTx
)

// Command is one entry of the registry.
type Command struct {
	Name  string // upper case, as COMMAND reports it
	Arity int    // Redis convention: n exact, −n at least n (name included)
	Flags Flag
	// FirstKey is the position of the first key argument (0 if none), for
	// COMMAND INFO and redis-cli's cluster hints.
	FirstKey int
	Summary  string
	Syntax   string
	Handler  func(*Ctx)

	id int // index into per-command metrics
}

// Ctx is one command invocation.
type Ctx struct {
	Conn Writer
	Args [][]byte
	S    *Session
	Env  *Env
	Cmd  *Command
	now  int64 // wall clock when the command started
}

// Now returns the time the command is decided at: the clock Env.Now when
// one is set (tests fix it), else the command's start time, so that the
// hot path reads the clock once.
func (ctx *Ctx) Now() int64 {
	if ctx.Env.Now != nil {
		return ctx.Env.Now()
	}
	return ctx.now
}

// Clock returns the current time in Unix ns: Env.Now if set, else the
// hot path's clock.
func (env *Env) Clock() int64 {
	if env.Now != nil {
		return env.Now()
	}
	return monoNow()
}

// Registry maps command names to commands.
type Registry struct {
	byName map[string]*Command
	list   []*Command
}

// NewRegistry returns a registry holding every sluice command.
func NewRegistry() *Registry {
	r := &Registry{byName: map[string]*Command{}}
	for _, group := range [][]*Command{connCommands(), multiCommands(), serverCommands(), keyCommands(), aclCommands(), limitCommands(), reserveCommands(), budgetCommands(), clusterCommands(), quotaCommands(), usageCommands(), dataCommands(), scriptCommands()} {
		for _, c := range group {
			r.add(c)
		}
	}
	return r
}

func (r *Registry) add(c *Command) {
	c.id = len(r.list)
	r.list = append(r.list, c)
	r.byName[strings.ToLower(c.Name)] = c
}

// Commands returns every command in registration order. The operations
// nodes send each other are not among them (package peer answers those:
// Env.Peers).
func (r *Registry) Commands() []*Command { return r.list }

// Lookup finds a command by name, case-insensitively, without allocating.
func (r *Registry) Lookup(name []byte) *Command {
	var buf [32]byte
	if len(name) > len(buf) {
		return nil
	}
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return r.byName[string(buf[:len(name)])]
}

// ArityOK reports whether n arguments (name included) suit the command.
func (c *Command) ArityOK(n int) bool {
	if c.Arity >= 0 {
		return n == c.Arity
	}
	return n >= -c.Arity
}

// ID is the command's index in the registry.
func (c *Command) ID() int { return c.id }

// Exec runs one command for session s: lookup, arity, permission, handler,
// metrics. Every reply goes to c. Inside MULTI, a command is checked the
// same way and queued instead (multi.go).
func (env *Env) Exec(c Writer, s *Session, args [][]byte) {
	start := monoNow()
	cm := s.nameCmd
	if cm == nil || string(args[0]) != string(s.lastName) {
		if cm = env.Registry.Lookup(args[0]); cm != nil {
			s.lastName, s.nameCmd = append(s.lastName[:0], args[0]...), cm
		}
	}
	if cm == nil && env.Peers != nil && s.Peer() != "" && env.Peers(c, s.Peer(), args) {
		return // node-to-node traffic, on a node's connection
	}
	if cm == nil {
		env.Metrics.Unknown()
		s.flagTx()
		c.WriteError(UnknownCommand(args[0], args[1:]))
		return
	}
	if !cm.ArityOK(len(args)) {
		s.flagTx()
		c.WriteError(WrongArity(cm.Name))
		return
	}
	if ok, e := s.Allowed(cm); !ok {
		s.flagTx()
		c.WriteError(e)
		return
	}
	if (s.tx.on || s.caching) && env.intercept(c, s, cm, args) {
		return
	}
	env.run(c, s, cm, args, start)
}

// run executes a checked command: handler, metrics, the session's record.
func (env *Env) run(c Writer, s *Session, cm *Command, args [][]byte, start int64) {
	ctx := s.Ctx(c, args, env, cm)
	ctx.now = start
	s.lastCmd.Store(cm) // CLIENT INFO's cmd: the command running, as in Redis
	cm.Handler(ctx)
	env.Metrics.Command(cm, s.Stats, monoNow()-start)
	s.lastActive.Store(start)
}

// The hot path's clock: the wall clock at process start plus the monotonic
// time since, read with one vDSO call (time.Now reads two, and a duration
// then a third). It never steps back when the wall clock is adjusted, which
// suits a limiter; it drifts from the wall clock only by the adjustments
// made since start.
var (
	processStart = time.Now()
	wallAtStart  = processStart.UnixNano()
)

func monoNow() int64 { return wallAtStart + int64(time.Since(processStart)) }
