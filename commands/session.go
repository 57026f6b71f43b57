package commands

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/access"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/quota"
)

// Session is one client connection's state.
type Session struct {
	ID        int64
	Addr      string
	LocalAddr string
	Created   time.Time

	lastActive atomic.Int64 // unix ns
	lastCmd    atomic.Pointer[Command]
	kill       func()

	mu      sync.Mutex
	name    string
	libName string
	libVer  string
	user    string
	// role is read by every command (Allowed) without the lock; written
	// under it with the fields above.
	role   atomic.Uint32
	peer   string // the node this session authenticated as (peer.go)
	noLoop bool   // CLIENT TRACKING … NOLOOP

	// resp3 is true after HELLO 3 (reply.go); read by CLIENT LIST from
	// other connections, hence atomic.
	resp3 atomic.Bool
	hdr   []byte // RESP3 headers and verbatim strings are built here

	// FD is the connection's file descriptor (-1 if unknown), and
	// ReadBuf/ReadPeak the size of its read buffer now and at its
	// largest, for CLIENT INFO/LIST.
	FD                int
	ReadBuf, ReadPeak atomic.Int64

	// Stats are the connection's command counts (Metrics.Connect); nil
	// for a call without a connection.
	Stats *ConnStats

	tx tx // MULTI … EXEC (multi.go)
	// Client-side caching (CLIENT TRACKING, multi.go): tracking is on, in
	// OPTIN mode, with invalidations redirected to redirect (0: none);
	// caching is set by CLIENT CACHING YES for the next command.
	tracking atomic.Bool
	redirect atomic.Int64
	caching  bool

	ctx     Ctx
	scratch limiter.Scratch
	// The limits of the call in progress: the service call points to them,
	// so they live here rather than on the stack.
	lim  engine.Limit
	spec quota.Spec
	// qkey and qname hold an inline quota's counter key and limited_by.
	qkey, qname []byte

	// The last command name and inline limit this connection sent: clients
	// repeat them, and recognising the same bytes is cheaper than looking
	// the name up and parsing and validating the limit again.
	lastName []byte
	nameCmd  *Command
	memo     limitMemo
}

// limitMemo remembers the parsed options of the last inline RL.ACQUIRE.
type limitMemo struct {
	opts []byte // the option arguments, each preceded by its length
	la   limitArgs
	lim  engine.Limit
	ok   bool
}

// matches reports whether args are the remembered option arguments.
func (m *limitMemo) matches(args [][]byte) bool {
	if !m.ok {
		return false
	}
	b := m.opts
	for _, a := range args {
		if len(b) < 1 || int(b[0]) != len(a) || len(b) < 1+len(a) || string(b[1:1+len(a)]) != string(a) {
			return false
		}
		b = b[1+len(a):]
	}
	return len(b) == 0
}

// remember stores args (if short enough to be worth it) with their parse.
func (m *limitMemo) remember(args [][]byte, la *limitArgs, lim engine.Limit) {
	m.ok = false
	m.opts = m.opts[:0]
	for _, a := range args {
		if len(a) > 255 || len(m.opts) > 512 {
			return
		}
		m.opts = append(append(m.opts, byte(len(a))), a...)
	}
	m.la, m.lim, m.ok = *la, lim, true
}

// Name returns the name the client set with CLIENT SETNAME.
func (s *Session) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

// NewSession returns the state of a new connection. kill closes it from
// another goroutine (CLIENT KILL).
func NewSession(id int64, addr, local string, role access.Role, kill func()) *Session {
	s := &Session{ID: id, Addr: addr, LocalAddr: local, Created: time.Now(), kill: kill, user: "default", FD: -1}
	s.setRole(role)
	s.lastActive.Store(s.Created.UnixNano())
	s.tx.queued.Store(-1)
	return s
}

// Role returns the session's role.
func (s *Session) Role() access.Role { return access.Role(s.role.Load()) }

func (s *Session) setRole(r access.Role) { s.role.Store(uint32(r)) }

func (s *Session) setAuth(user string, role access.Role) {
	s.mu.Lock()
	s.user, s.peer = user, ""
	s.setRole(role)
	s.mu.Unlock()
}

// Allowed reports whether the session may run c, and the error to send if not.
func (s *Session) Allowed(c *Command) (bool, string) {
	role := s.Role()
	switch {
	case c.Flags&FlagNoAuth != 0:
		return true, ""
	case role == access.RoleNone:
		return false, errNoAuth
	case c.Flags&FlagAdmin != 0 && role != access.RoleAdmin:
		return false, "NOPERM User " + s.user + " has no permissions to run the '" + lower(c.Name) + "' command"
	}
	return true, ""
}

// Clients tracks live sessions for CLIENT LIST, CLIENT KILL and INFO.
type Clients struct {
	mu     sync.Mutex
	byID   map[int64]*Session
	nextID atomic.Int64
}

// NewClients returns an empty client table.
func NewClients() *Clients { return &Clients{byID: map[int64]*Session{}} }

// NextID returns a fresh client id.
func (cs *Clients) NextID() int64 { return cs.nextID.Add(1) }

// Add registers a session.
func (cs *Clients) Add(s *Session) {
	cs.mu.Lock()
	cs.byID[s.ID] = s
	cs.mu.Unlock()
}

// Remove forgets a session.
func (cs *Clients) Remove(s *Session) {
	cs.mu.Lock()
	delete(cs.byID, s.ID)
	cs.mu.Unlock()
}

// Get returns the session with id, or nil.
func (cs *Clients) Get(id int64) *Session {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.byID[id]
}

// Len returns the number of connected clients.
func (cs *Clients) Len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.byID)
}

// Snapshot returns the sessions ordered by id.
func (cs *Clients) Snapshot() []*Session {
	cs.mu.Lock()
	out := make([]*Session, 0, len(cs.byID))
	for _, s := range cs.byID {
		out = append(out, s)
	}
	cs.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Line renders a session as a CLIENT LIST line, with Redis's fields in
// Redis's order, so that client libraries that parse them (redis-py's
// client_info, go-redis's ClientInfo) find every field they expect.
// Memory fields are sluice's own measures: arguments are parsed in place
// in the read buffer (argv-mem 0, rbs the buffer), and replies are
// written once per pipeline (no output list between passes).
func (s *Session) Line(now time.Time) string {
	s.mu.Lock()
	name, lib, ver, user := s.name, s.libName, s.libVer, s.user
	s.mu.Unlock()
	cmd := "NULL"
	if c := s.lastCmd.Load(); c != nil {
		cmd = lower(c.Name)
	}
	idle := now.Sub(time.Unix(0, s.lastActive.Load())) / time.Second
	multi, multiMem := s.tx.queued.Load(), s.tx.mem.Load()
	flags := ""
	if multi >= 0 {
		flags += "x"
	}
	if s.tracking.Load() {
		flags += "t"
	}
	if flags == "" {
		flags = "N"
	}
	redir := s.redirect.Load()
	if redir == 0 {
		redir = -1
	}
	rbs := s.ReadBuf.Load()
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	var b strings.Builder
	b.WriteString("id=" + i(s.ID) + " addr=" + s.Addr + " laddr=" + s.LocalAddr + " fd=" + i(int64(s.FD)))
	b.WriteString(" name=" + name)
	b.WriteString(" age=" + i(int64(now.Sub(s.Created)/time.Second)) + " idle=" + i(int64(idle)))
	b.WriteString(" flags=" + flags + " db=0 sub=0 psub=0 ssub=0 multi=" + i(int64(multi)) + " watch=0")
	b.WriteString(" qbuf=0 qbuf-free=" + i(rbs) + " argv-mem=0 multi-mem=" + i(multiMem))
	b.WriteString(" rbs=" + i(rbs) + " rbp=" + i(s.ReadPeak.Load()) + " obl=0 oll=0 omem=0 tot-mem=" + i(rbs+multiMem))
	b.WriteString(" events=r cmd=" + cmd + " user=" + user + " redir=" + i(redir) + " resp=" + i(int64(s.Proto())))
	b.WriteString(" lib-name=" + lib + " lib-ver=" + ver)
	return b.String()
}

// Env is what the RESP handlers share: the service they call and the
// cluster they report on, the client table, credentials, metrics and the
// settings they show. The node's wiring (server) fills it; the engine is
// reached only through the service.
type Env struct {
	// Now, if set, is the clock commands decide at (tests fix it); else
	// each command reads the clock once as it starts.
	Now      func() int64
	Clients  *Clients
	Auth     *access.Auth
	PeerAuth *access.PeerAuth // the credentials nodes present to each other
	Metrics  *Metrics
	Registry *Registry
	Version  string
	Started  time.Time
	// MaxKeyLen bounds keys and budget paths, in bytes.
	MaxKeyLen int
	// Settings lists the server's settings for CONFIG GET and INFO.
	Settings func() []Setting
	// Info adds server-wide INFO sections (raft, …) the commands package
	// does not own; it may be nil.
	Info func(section string) []InfoField
	// Cluster replicates the budget tree; every node has one (a single
	// node is a one-member cluster).
	Cluster Cluster
	// SyncInterval is --sync-interval, reported by RL.CLUSTER INFO.
	SyncInterval time.Duration
	// Peers, if set, answers what another node sends on a connection
	// authenticated as that node (from) and is no command (peer.Server):
	// it reports whether args named one of its operations.
	Peers func(c Writer, from string, args [][]byte) bool
	// Service is the limiter every limiting and peer command calls; the
	// node's wiring builds it.
	Service *limiter.Service
	// ClientMemory, if set, takes n more bytes of the bound on every
	// client's buffers together (--max-client-buffers), or gives -n back;
	// it refuses growth past the bound. Queued transactions count in it.
	ClientMemory func(n int64) bool
}

// Setting is one configuration value as CONFIG GET shows it.
type Setting struct {
	Name  string
	Value string
}

// InfoField is one "name:value" line of INFO.
type InfoField struct {
	Name  string
	Value string
}

// Ctx returns the session's reusable invocation context, filled for one
// command: commands on a connection run one at a time, so one suffices and
// dispatch allocates nothing.
func (s *Session) Ctx(c Writer, args [][]byte, env *Env, cmd *Command) *Ctx {
	s.ctx = Ctx{Conn: c, Args: args, S: s, Env: env, Cmd: cmd}
	return &s.ctx
}
