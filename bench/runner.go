package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// runState is what the connections of one run share.
type runState struct {
	cfg      Config
	start    time.Time
	deadline time.Time // end of a -d run

	claimed atomic.Int64 // requests handed out, for a -n run
	stopped atomic.Bool
	stopCh  chan struct{}
	once    sync.Once

	workers []*worker

	mu          sync.Mutex
	failure     string // first reason the run ended early, "" if none
	interrupted bool
}

// halt stops every connection: loops end before their next batch and
// blocked reads return at once.
func (r *runState) halt() {
	r.once.Do(func() {
		r.stopped.Store(true)
		close(r.stopCh)
		for _, w := range r.workers {
			w.conn.SetDeadline(time.Now())
		}
	})
}

// fail records why the run stops early (the first reason wins) and halts it.
func (r *runState) fail(reason string) {
	r.mu.Lock()
	if r.failure == "" && !r.stopped.Load() {
		r.failure = reason
	}
	r.mu.Unlock()
	r.halt()
}

// worker is one connection: its generators, buffers and private tallies,
// merged once the run is over.
type worker struct {
	id    int
	addr  string
	conn  net.Conn
	rd    *replyReader
	enc   *encoder
	rng   *rand.Rand
	keys  *keyGen
	pick  picker
	wbuf  []byte
	kinds []kind
	rp    reply

	hist   *hdrhistogram.Histogram
	counts [numOutcomes]int64
	errs   tally // error texts
	codes  tally // their first words

	// Written and answered requests, read by the stall watchdog.
	sent, done atomic.Int64
}

func newWorker(id int, addr string, conn net.Conn, c *Config) *worker {
	rng := newRand(c.Seed, id)
	return &worker{
		id: id, addr: addr, conn: conn,
		rd:    newReplyReader(conn, 64<<10),
		enc:   newEncoder(c),
		rng:   rng,
		keys:  newKeyGen(c.Dist, c.ZipfS, c.KeySpace, rng),
		pick:  newPicker(c.Mix),
		wbuf:  make([]byte, 0, 128*c.Pipeline),
		kinds: make([]kind, c.Pipeline),
		hist:  newHist(),
		errs:  newTally(maxErrorTexts),
		codes: newTally(maxErrorTexts),
	}
}

// loop sends batches until the requests, the time or the run is over.
// With --rate-limit each connection sends its share on a fixed schedule,
// staggered against the others; a connection behind schedule sends at
// once, so the average rate holds while the server keeps up.
func (w *worker) loop(r *runState) {
	c := &r.cfg
	var next time.Time
	var interval time.Duration
	if c.RateLimit > 0 {
		interval = time.Duration(float64(time.Second) * float64(c.Pipeline) * float64(c.Conns) / float64(c.RateLimit))
		next = r.start.Add(interval * time.Duration(w.id) / time.Duration(c.Conns))
	}
	for !r.stopped.Load() {
		n := c.Pipeline
		if c.Requests > 0 {
			end := r.claimed.Add(int64(n))
			if end-int64(n) >= c.Requests {
				return
			}
			if end > c.Requests {
				n -= int(end - c.Requests)
			}
		}
		if interval > 0 {
			if c.Duration > 0 && !next.Before(r.deadline) {
				return
			}
			if d := time.Until(next); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-r.stopCh:
					t.Stop()
					return
				}
			}
			next = next.Add(interval)
		}
		w.wbuf = w.wbuf[:0]
		for j := 0; j < n; j++ {
			k := w.pick.pick(w.rng)
			w.kinds[j] = k
			w.wbuf = w.enc.append(w.wbuf, k, w.keys.next())
		}
		t0 := time.Now()
		if c.Duration > 0 && !t0.Before(r.deadline) {
			return
		}
		w.sent.Add(int64(n))
		if _, err := w.conn.Write(w.wbuf); err != nil {
			w.broken(r, err)
			return
		}
		for j := 0; j < n; j++ {
			if err := w.rd.read(&w.rp); err != nil {
				w.broken(r, err)
				return
			}
			out, text := classify(w.kinds[j], &w.rp)
			w.counts[out]++
			if out == outError {
				w.errs.add(groupText(text))
				w.codes.add(errorCode(text))
			}
			// The read that completed this reply, less the batch's write:
			// every reply of a pipeline waits for the whole batch's write.
			record(w.hist, w.rd.at.Sub(t0))
		}
		w.done.Add(int64(n))
	}
}

// broken ends the run because this connection failed, unless the run was
// already stopping (then the error is the halt's doing).
func (w *worker) broken(r *runState, err error) {
	if r.stopped.Load() {
		return
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("server closed the connection")
	}
	r.fail(fmt.Sprintf("connection %d to %s: %v", w.id, w.addr, err))
}

// dial opens one connection and authenticates it when a password is set.
func dial(c *Config, addr string) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", addr, c.Timeout)
	if err != nil {
		return nil, err
	}
	if c.Password != "" {
		args := []string{"AUTH", c.Password}
		if c.User != "" {
			args = []string{"AUTH", c.User, c.Password}
		}
		if err := expectOK(conn, c.Timeout, args...); err != nil {
			conn.Close()
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return conn, nil
}

// expectOK sends one command and wants a status reply (+OK or +OK …).
func expectOK(conn net.Conn, timeout time.Duration, args ...string) error {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	if _, err := conn.Write(appendCommand(nil, args...)); err != nil {
		return err
	}
	var rp reply
	if err := newReplyReader(conn, 4096).read(&rp); err != nil {
		return err
	}
	switch rp.typ {
	case '+':
		return nil
	case '-':
		return replyError(rp.text)
	}
	return fmt.Errorf("unexpected reply of type %q", rp.typ)
}

// replyError is an error reply of the server.
type replyError string

func (e replyError) Error() string { return string(e) }

// importRetry is the pause between imports refused with TRYAGAIN.
const importRetry = 100 * time.Millisecond

// loadTree replaces the server's budget tree with the generated one, over
// a connection of its own. TRYAGAIN (no leader yet, as just after a start)
// is retried for up to c.Timeout. Another error reply is a warning: the
// run goes on and counts the budget errors. Failing to talk to the server
// at all is fatal.
func loadTree(c *Config) (warning string, err error) {
	doc, err := treeJSON(c.Partners, c.Tenants)
	if err != nil {
		return "", err
	}
	conn, err := dial(c, c.Targets[0])
	if err != nil {
		return "", fmt.Errorf("loading the budget tree: %s: %w", c.Targets[0], err)
	}
	defer conn.Close()
	nodes := 1 + c.Partners*(1+c.Tenants)
	var re replyError
	for deadline := time.Now().Add(c.Timeout); ; time.Sleep(importRetry) {
		err = expectOK(conn, c.Timeout, "RL.BUDGET", "IMPORT", string(doc), "REPLACE")
		if !errors.As(err, &re) || !strings.HasPrefix(string(re), "TRYAGAIN") || time.Now().After(deadline) {
			break
		}
	}
	if errors.As(err, &re) {
		return fmt.Sprintf("RL.BUDGET IMPORT of the generated tree (%d nodes) was refused: %s; budget requests will likely fail", nodes, strings.TrimSpace(string(re))), nil
	}
	if err != nil {
		return "", fmt.Errorf("loading the budget tree: %s: %w", c.Targets[0], err)
	}
	return "", nil
}

// execute runs the benchmark described by c until it is done, fails or
// ctx is cancelled (then the partial result is returned, marked
// interrupted). Setup problems (cannot connect, AUTH refused) are errors;
// problems during the run are in Result.Failure.
func execute(ctx context.Context, c Config, warn io.Writer) (*Result, error) {
	if c.GRPC {
		return executeGRPC(ctx, c)
	}
	res := newResult(&c)
	if c.Mix.HasBudget() {
		w, err := loadTree(&c)
		if err != nil {
			return nil, err
		}
		if w != "" {
			fmt.Fprintln(warn, "bench: warning:", w)
			res.Warnings = append(res.Warnings, w)
		}
	}
	r := &runState{cfg: c, stopCh: make(chan struct{})}
	defer func() {
		for _, w := range r.workers {
			w.conn.Close()
		}
	}()
	for i := 0; i < c.Conns; i++ {
		addr := c.Targets[i%len(c.Targets)]
		conn, err := dial(&c, addr)
		if err != nil {
			return nil, fmt.Errorf("connection %d to %s: %w", i, addr, err)
		}
		r.workers = append(r.workers, newWorker(i, addr, conn, &c))
	}

	r.start = time.Now()
	r.deadline = r.start.Add(c.Duration)
	var wg sync.WaitGroup
	for _, w := range r.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(r)
		}()
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	watch(ctx, r, finished)
	end := time.Now()

	r.mu.Lock()
	res.Failure, res.Interrupted = r.failure, r.interrupted
	r.mu.Unlock()
	res.add(r.workers, end.Sub(r.start))
	return res, nil
}

// watch waits for the run to finish, halting it on ctx's cancellation or
// when a connection with requests in flight has had no reply for
// c.Timeout.
func watch(ctx context.Context, r *runState, finished <-chan struct{}) {
	tick := r.cfg.Timeout / 4
	if tick > 250*time.Millisecond {
		tick = 250 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	lastDone := make([]int64, len(r.workers))
	lastMove := make([]time.Time, len(r.workers))
	for i := range lastMove {
		lastMove[i] = r.start
	}
	for {
		select {
		case <-finished:
			return
		case <-ctx.Done():
			r.mu.Lock()
			r.interrupted = !r.stopped.Load()
			r.mu.Unlock()
			r.halt()
			<-finished
			return
		case now := <-t.C:
			for i, w := range r.workers {
				done := w.done.Load()
				if done != lastDone[i] || w.sent.Load() == done {
					lastDone[i], lastMove[i] = done, now
				} else if now.Sub(lastMove[i]) >= r.cfg.Timeout {
					r.fail(fmt.Sprintf("connection %d to %s: no reply for %v", w.id, w.addr, r.cfg.Timeout))
				}
			}
		}
	}
}

// add merges the tallies of every worker into res.
func (res *Result) add(workers []*worker, elapsed time.Duration) {
	h := newHist()
	errs := map[string]int64{}
	var counts [numOutcomes]int64
	for _, w := range workers {
		h.Merge(w.hist)
		for o, n := range w.counts {
			counts[o] += n
		}
		for t, n := range w.errs.m {
			errs[t] += *n
		}
		for t, n := range w.codes.m {
			res.ErrorCodes[t] += *n
		}
	}
	res.Admitted, res.Denied, res.Degraded = counts[outAdmitted], counts[outDenied], counts[outDegraded]
	res.OK, res.Errors = counts[outOK], counts[outError]
	for _, n := range counts {
		res.Requests += n
	}
	res.DurationS = elapsed.Seconds()
	if elapsed > 0 {
		res.Throughput = float64(res.Requests) / elapsed.Seconds()
	}
	res.Latency = summarize(h)
	for t, n := range errs {
		res.ErrorTexts = append(res.ErrorTexts, ErrorText{Text: t, Count: n})
	}
	sort.Slice(res.ErrorTexts, func(i, j int) bool {
		a, b := res.ErrorTexts[i], res.ErrorTexts[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Text < b.Text
	})
}
