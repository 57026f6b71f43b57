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
	// chunks hold the queued commands' argument bytes. A full chunk is
	// followed by a new one rather than copied into a larger one: growing
	// by copying left the old copy behind as garbage, as much again as
	// the queue, which resident memory showed above --max-client-buffers.
	chunks   [][]byte
	cur      int      // the chunk being filled
	fillCap  int      // the capacity of the last chunk made to be filled
	chunkCap int      // the chunks' capacity together
	used     int      // the queued argument bytes
	spans    [][]byte // each argument, in a chunk
	cmds     []queued
	args     [][]byte // reused to run each queued command
	argc     int      // the most arguments of a queued command (args' size at EXEC)
	queued   atomic.Int32
	mem      atomic.Int64
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
		for _, a := range t.spans[q.first : q.first+q.argc] {
			args = append(args, a)
			pending += len(a)
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
		t.drop()
		t.giveBack()
	}
	for i := range t.chunks {
		t.chunks[i] = t.chunks[i][:0]
	}
	t.cur, t.used = 0, 0
	clear(t.spans)
	t.spans, t.cmds = t.spans[:0], t.cmds[:0]
	clear(t.args)
	t.queued.Store(-1)
	t.mem.Store(0)
}

// keepQueue is the largest queue a connection keeps for its next
// transaction (it still counts in the client memory bound).
const keepQueue = 64 << 10

// drop forgets the queue's memory.
func (t *tx) drop() {
	t.chunks, t.spans, t.cmds, t.args = nil, nil, nil, nil
	t.cur, t.fillCap, t.chunkCap, t.used, t.argc = 0, 0, 0, 0, 0
}

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
	s.tx.drop()
	s.tx.giveBack()
}

// flagTx marks the open transaction, if any, as failed: a command was
// refused while queueing.
func (s *Session) flagTx() {
	if s.tx.on {
		s.tx.dirty = true
	}
}

// BufferDonor is a Writer whose read buffer a transaction's queue can
// take (the server's connections): DonateBuffer gives up the buffer the
// command just parsed lies in, still counted in Env.ClientMemory, when it
// was grown for that command, and reads on with a new first buffer; nil
// when it keeps it. The queue then keeps the arguments where they are: a
// large command costs no copy, and the buffer no garbage.
type BufferDonor interface{ DonateBuffer() []byte }

// donateAbove is the smallest command whose read buffer a queue takes.
const donateAbove = 256 << 10

// queue copies a command into the transaction (its arguments alias the
// connection's read buffer), or takes the read buffer whole for a large
// command, and answers +QUEUED.
func (env *Env) queue(c Writer, s *Session, cm *Command, args [][]byte) {
	t := &s.tx
	size := 0
	for _, a := range args {
		size += len(a) + 16
	}
	if t.used+16*len(t.spans)+size > MaxQueuedBytes {
		t.dirty = true
		c.WriteError("ERR transaction too large: at most " + strconv.Itoa(MaxQueuedBytes) + " bytes of queued commands; EXEC will be refused")
		return
	}
	// The queue's memory counts in the bound on all clients' buffers
	// (Env.ClientMemory): the arena grows here, by doubling, once the
	// bound has room for it, so that many connections each queuing less
	// than MaxQueuedBytes cannot hold any amount together.
	d, donor := c.(BufferDonor)
	donor = donor && size >= donateAbove
	bytes := size - 16*len(args)
	if donor {
		bytes = -1 // room for the donated buffer's header, no bytes
	}
	if !t.reserve(env, bytes, len(t.spans)+len(args), len(t.cmds)+1, len(args)) {
		t.dirty = true
		c.WriteError("ERR client buffers are full: queued transactions and read buffers together reached --max-client-buffers; EXEC will be refused")
		return
	}
	q := queued{cmd: cm, first: len(t.spans), argc: len(args)}
	if donor {
		if buf := d.DonateBuffer(); buf != nil {
			// Counted by the connection until now, by the queue from now.
			t.chunks = append(t.chunks, buf[:cap(buf)])
			t.chunkCap += cap(buf)
			t.held += int64(cap(buf))
			for _, a := range args {
				t.spans = append(t.spans, a[:len(a):len(a)])
				t.used += len(a)
			}
			t.cmds = append(t.cmds, q)
			t.queued.Store(int32(len(t.cmds)))
			t.mem.Store(t.footprint())
			c.WriteString("QUEUED")
			return
		}
		if !t.reserve(env, size-16*len(args), len(t.spans)+len(args), len(t.cmds)+1, len(args)) {
			t.dirty = true
			c.WriteError("ERR client buffers are full: queued transactions and read buffers together reached --max-client-buffers; EXEC will be refused")
			return
		}
	}
	for _, a := range args {
		ch := t.chunks[t.cur]
		start := len(ch)
		ch = append(ch, a...)
		t.chunks[t.cur] = ch
		t.spans = append(t.spans, ch[start:len(ch):len(ch)])
		t.used += len(a)
	}
	t.cmds = append(t.cmds, q)
	t.queued.Store(int32(len(t.cmds)))
	t.mem.Store(t.footprint())
	c.WriteString("QUEUED")
}

// Bytes per element of the queue's slices, as the bound counts them: a
// chunk, a span and an argument of the slice EXEC reuses are slice
// headers, a queued command a pointer and two ints.
const (
	sliceBytes  = int64(unsafe.Sizeof([]byte(nil)))
	queuedBytes = int64(unsafe.Sizeof(queued{}))
)

// Chunk sizes: the first holds firstChunk bytes, each next one twice its
// predecessor up to maxChunk, or a command's arguments together if more.
// Unfilled, the last chunk wastes less than maxChunk.
const (
	firstChunk = 4 << 10
	maxChunk   = 1 << 20
)

// queueBytes is the memory of a queue with these capacities: its chunks'
// bytes and headers, its arguments' spans, its commands, and the argument
// slice EXEC fills, as long as the longest command.
func queueBytes(chunkCap, chunks, spans, cmds, argc int) int64 {
	return int64(chunkCap) + sliceBytes*int64(chunks+spans+argc) + queuedBytes*int64(cmds)
}

// footprint is what the queue holds now, counted in the bound.
func (t *tx) footprint() int64 {
	return queueBytes(t.chunkCap, cap(t.chunks), cap(t.spans), cap(t.cmds), max(cap(t.args), t.argc))
}

// reserve grows the queue to take a command of size argument bytes,
// spans arguments and cmds commands of up to argc arguments, if the
// client memory bound has room for the growth: every slice the queue
// grows counts, not only its bytes. A size of -1 makes room for one more
// chunk's header, not for bytes (a donated read buffer).
func (t *tx) reserve(env *Env, size, spans, cmds, argc int) bool {
	// The first chunk from the current one on with room for the command;
	// none: a new one, after the last.
	newChunk, header := 0, size < 0
	if size >= 0 {
		for t.cur < len(t.chunks) && cap(t.chunks[t.cur])-len(t.chunks[t.cur]) < size {
			t.cur++
		}
		if t.cur == len(t.chunks) {
			newChunk = firstChunk
			if t.fillCap > 0 {
				newChunk = min(2*t.fillCap, maxChunk)
			}
			newChunk = max(newChunk, size)
			header = true
		}
	}
	nk, ns, nc := cap(t.chunks), cap(t.spans), cap(t.cmds)
	argc = max(argc, t.argc, cap(t.args))
	if header && len(t.chunks) == nk {
		nk = max(2*nk, 4)
	}
	if spans > ns {
		ns = max(spans, 2*ns)
	}
	if cmds > nc {
		nc = max(cmds, 2*nc, 4)
	}
	if newChunk == 0 && nk == cap(t.chunks) && ns == cap(t.spans) && nc == cap(t.cmds) && argc == max(t.argc, cap(t.args)) {
		return true
	}
	mem := queueBytes(t.chunkCap+newChunk, nk, ns, nc, argc)
	if env.ClientMemory != nil {
		if !env.ClientMemory(mem - t.held) {
			return false
		}
		t.release, t.held = env.ClientMemory, mem
	}
	if nk > cap(t.chunks) {
		t.chunks = append(make([][]byte, 0, nk), t.chunks...)
	}
	if newChunk > 0 {
		t.chunks = append(t.chunks, make([]byte, 0, newChunk))
		t.chunkCap += newChunk
		t.fillCap = newChunk
	}
	if ns > cap(t.spans) {
		t.spans = append(make([][]byte, 0, ns), t.spans...)
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
