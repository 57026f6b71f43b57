package commands

import (
	"strconv"
	"sync/atomic"
	"unsafe"
)

// Transactions, as Redis has them: MULTI starts queueing, each command is
// checked (name, arity, permission) and answered +QUEUED, and EXEC runs
// the queue and answers an array with one reply per command; DISCARD
// drops it. A command refused while queueing marks the transaction, and
// EXEC then answers EXECABORT and runs nothing.
//
// Atomicity: the commands of one EXEC run back to back, in order, on this
// connection, with nothing of this connection's in between; they are not
// isolated from other connections, whose commands the engine may serve
// between two of them, and each keeps its own outcome (an RL.ACQUIRE
// admitted early in the transaction stays admitted if a later one is
// denied). Each command is atomic on its own: one RL.ACQUIRE charges all
// its levels or none. Isolation would need a lock that every command
// takes, on a path that now takes none.

// MaxQueuedBytes bounds what one transaction may queue: arguments are
// copied out of the read buffer, so the queue's memory grows with what the
// client sent, up to this.
const MaxQueuedBytes = 64 << 20

// tx is a connection's transaction state. Only the connection's goroutine
// touches it, except queued and mem, which CLIENT LIST reads.
type tx struct {
	on, dirty bool
	arena     []byte   // the queued commands' argument bytes
	spans     [][2]int // each argument: start and end in arena
	cmds      []queued
	args      [][]byte // reused to run each queued command
	argc      int      // the most arguments of a queued command (args' size at EXEC)
	queued    atomic.Int32
	mem       atomic.Int64
	// held is what the queue takes of Env.ClientMemory, given back with
	// it (endTx; Session.Close when the connection ends).
	held    int64
	release func(int64) bool
}

type queued struct {
	cmd         *Command
	first, argc int // spans[first : first+argc]
}

func multiCommands() []*Command {
	return []*Command{
		{Name: "MULTI", Arity: 1, Flags: FlagFast | FlagTx, Handler: multiCmd, Summary: "Start a transaction.", Syntax: ""},
		{Name: "EXEC", Arity: 1, Flags: FlagTx, Handler: execCmd, Summary: "Run the queued commands of a transaction.", Syntax: ""},
		{Name: "DISCARD", Arity: 1, Flags: FlagFast | FlagTx, Handler: discardCmd, Summary: "Drop the queued commands of a transaction.", Syntax: ""},
		{Name: "WATCH", Arity: -2, Flags: FlagFast | FlagTx, Handler: watchCmd,
			Summary: "Refused: sluice cannot tell a transaction that a bucket changed (every call and every moment changes it).",
			Syntax:  "key [key ...]", FirstKey: 1},
		{Name: "UNWATCH", Arity: 1, Flags: FlagFast, Handler: unwatchCmd, Summary: "Forget watched keys (there are none).", Syntax: ""},
	}
}

func multiCmd(ctx *Ctx) {
	t := &ctx.S.tx
	if t.on {
		ctx.Conn.WriteError("ERR MULTI calls can not be nested")
		return
	}
	t.on, t.dirty = true, false
	t.queued.Store(0)
	ctx.Conn.WriteString(okReply)
}

func discardCmd(ctx *Ctx) {
	if !ctx.S.tx.on {
		ctx.Conn.WriteError("ERR DISCARD without MULTI")
		return
	}
	ctx.S.endTx()
	ctx.Conn.WriteString(okReply)
}

func watchCmd(ctx *Ctx) {
	if ctx.S.tx.on {
		ctx.Conn.WriteError("ERR WATCH inside MULTI is not allowed")
		return
	}
	ctx.Conn.WriteError("ERR WATCH is not supported: a bucket changes with every call and as time passes, so a watched transaction could never run; use MULTI/EXEC without WATCH")
}

func unwatchCmd(ctx *Ctx) { ctx.Conn.WriteString(okReply) }

// execCmd runs the queue. Every queued command is run as if it had
// arrived on its own (permission checked again, metrics, its own reply);
// their replies form EXEC's array.
func execCmd(ctx *Ctx) {
	s, env, c := ctx.S, ctx.Env, ctx.Conn // ctx is reused by the queued commands
	t := &s.tx
	if !t.on {
		c.WriteError("ERR EXEC without MULTI")
		return
	}
	if t.dirty {
		s.endTx()
		c.WriteError("EXECABORT Transaction discarded because of previous errors.")
		return
	}
	t.on = false
	c.WriteArray(len(t.cmds))
	spill, _ := c.(Spiller)
	pending, replies := 0, 0
	for _, q := range t.cmds {
		args := t.args[:0]
		for _, sp := range t.spans[q.first : q.first+q.argc] {
			args = append(args, t.arena[sp[0]:sp[1]:sp[1]])
			pending += sp[1] - sp[0]
		}
		t.args = args
		if ok, e := s.Allowed(q.cmd); !ok { // AUTH or RESET earlier in the queue may have changed the role
			c.WriteError(e)
		} else {
			env.run(c, s, q.cmd, args, monoNow())
		}
		// The replies go out as they come rather than all at the end:
		// a transaction of millions of commands, or of large ECHOs,
		// would otherwise hold as many replies, which no bound counts.
		if replies++; spill != nil && (pending >= spillBytes || replies >= spillReplies) {
			spill.Spill()
			pending, replies = 0, 0
		}
	}
	s.endTx()
}

// Spiller is a Writer that can send the replies it holds before the
// command ends (the server's connections): EXEC spills every
// spillReplies replies, or once its commands' arguments reach spillBytes
// (an ECHO's reply is as large).
type Spiller interface{ Spill() }

const (
	spillReplies = 1024
	spillBytes   = 64 << 10
)

// endTx forgets the transaction, keeping the queue's memory unless it grew
// large.
func (s *Session) endTx() {
	t := &s.tx
	t.on, t.dirty, s.caching = false, false, false
	if t.footprint() > keepQueue {
		t.arena, t.spans, t.cmds, t.args, t.argc = nil, nil, nil, nil, 0
		t.giveBack()
	}
	t.arena, t.spans, t.cmds = t.arena[:0], t.spans[:0], t.cmds[:0]
	clear(t.args)
	t.queued.Store(-1)
	t.mem.Store(0)
}

// keepQueue is the largest queue a connection keeps for its next
// transaction (it still counts in the client memory bound).
const keepQueue = 64 << 10

// giveBack returns what the queue took of the client memory bound.
func (t *tx) giveBack() {
	if t.held != 0 && t.release != nil {
		t.release(-t.held)
	}
	t.held = 0
}

// Close gives back what the session holds of the client memory bound,
// when its connection ends.
func (s *Session) Close() {
	s.tx.on = false
	s.tx.arena, s.tx.spans, s.tx.cmds, s.tx.args, s.tx.argc = nil, nil, nil, nil, 0
	s.tx.giveBack()
}

// flagTx marks the open transaction, if any, as failed: a command was
// refused while queueing.
func (s *Session) flagTx() {
	if s.tx.on {
		s.tx.dirty = true
	}
}

// queue copies a command into the transaction (its arguments alias the
// connection's read buffer) and answers +QUEUED.
func (env *Env) queue(c Writer, s *Session, cm *Command, args [][]byte) {
	t := &s.tx
	size := 0
	for _, a := range args {
		size += len(a) + 16
	}
	if len(t.arena)+16*len(t.spans)+size > MaxQueuedBytes {
		t.dirty = true
		c.WriteError("ERR transaction too large: at most " + strconv.Itoa(MaxQueuedBytes) + " bytes of queued commands; EXEC will be refused")
		return
	}
	// The queue's memory counts in the bound on all clients' buffers
	// (Env.ClientMemory): the arena grows here, by doubling, once the
	// bound has room for it, so that many connections each queuing less
	// than MaxQueuedBytes cannot hold any amount together.
	if !t.reserve(env, len(t.arena)+size, len(t.spans)+len(args), len(t.cmds)+1, len(args)) {
		t.dirty = true
		c.WriteError("ERR client buffers are full: queued transactions and read buffers together reached their share of --max-client-buffers; EXEC will be refused")
		return
	}
	q := queued{cmd: cm, first: len(t.spans), argc: len(args)}
	for _, a := range args {
		start := len(t.arena)
		t.arena = append(t.arena, a...)
		t.spans = append(t.spans, [2]int{start, len(t.arena)})
	}
	t.cmds = append(t.cmds, q)
	t.queued.Store(int32(len(t.cmds)))
	t.mem.Store(t.footprint())
	c.WriteString("QUEUED")
}

// Bytes per element of the queue's slices, as the bound counts them: a
// span is two ints, a queued command a pointer and two ints, an argument
// of the slice EXEC reuses a slice header.
const (
	spanBytes   = int64(unsafe.Sizeof([2]int{}))
	queuedBytes = int64(unsafe.Sizeof(queued{}))
	argBytes    = int64(unsafe.Sizeof([]byte(nil)))
)

// queueBytes is the memory of a queue with these capacities: its
// arguments' bytes, their spans, its commands, and the argument slice
// EXEC fills, as long as the longest command.
func queueBytes(arena, spans, cmds, argc int) int64 {
	return int64(arena) + spanBytes*int64(spans) + queuedBytes*int64(cmds) + argBytes*int64(argc)
}

// footprint is what the queue holds now, counted in the bound.
func (t *tx) footprint() int64 {
	return queueBytes(cap(t.arena), cap(t.spans), cap(t.cmds), max(cap(t.args), t.argc))
}

// reserve grows the queue to hold arena bytes, spans arguments and cmds
// commands of up to argc arguments, if the client memory bound has room
// for the growth: every slice the queue grows counts, not only its bytes.
func (t *tx) reserve(env *Env, arena, spans, cmds, argc int) bool {
	na, ns, nc := cap(t.arena), cap(t.spans), cap(t.cmds)
	argc = max(argc, t.argc, cap(t.args))
	if arena > na {
		na = max(arena, min(2*na, MaxQueuedBytes))
	}
	if spans > ns {
		ns = max(spans, 2*ns)
	}
	if cmds > nc {
		nc = max(cmds, 2*nc, 4)
	}
	if na == cap(t.arena) && ns == cap(t.spans) && nc == cap(t.cmds) && argc == max(t.argc, cap(t.args)) {
		return true
	}
	mem := queueBytes(na, ns, nc, argc)
	if env.ClientMemory != nil {
		if !env.ClientMemory(mem - t.held) {
			return false
		}
		t.release, t.held = env.ClientMemory, mem
	}
	if na > cap(t.arena) {
		t.arena = append(make([]byte, 0, na), t.arena...)
	}
	if ns > cap(t.spans) {
		t.spans = append(make([][2]int, 0, ns), t.spans...)
	}
	if nc > cap(t.cmds) {
		t.cmds = append(make([]queued, 0, nc), t.cmds...)
	}
	t.argc = argc
	return true
}

// errCaching answers a command that would have its reply cached
// client-side (CLIENT CACHING YES before it).
const errCaching = "ERR sluice replies cannot be cached client-side: each describes limiter state that changes with every call and as time passes, " +
	"so no invalidation could ever be sent for it. Send the command without CLIENT CACHING YES (rueidis: Do, not DoCache)"

// intercept handles a command on a connection in a transaction or after
// CLIENT CACHING YES. It reports whether it answered the command itself.
func (env *Env) intercept(c Writer, s *Session, cm *Command, args [][]byte) bool {
	if s.caching && cm.FirstKey > 0 && cm.Flags&FlagTx == 0 {
		// A keyed command whose reply the client means to cache: refuse
		// it, so that nothing stale is ever cached. (rueidis sends CLIENT
		// CACHING YES, MULTI, PTTL key, the command, EXEC, and returns
		// this error when EXEC aborts.)
		if !s.tx.on {
			s.caching = false
		}
		s.flagTx()
		c.WriteError(errCaching)
		return true
	}
	if s.caching && !s.tx.on && cm.Name != "MULTI" {
		s.caching = false // it applies to the next command only
	}
	if s.tx.on && cm.Flags&FlagTx == 0 && cm.Name != "QUIT" && cm.Name != "RESET" {
		env.queue(c, s, cm, args)
		return true
	}
	return false
}
