package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Pacing of the load. Every connection wakes each tick, works out how many
// calls its share of the load owes since its last batch, and writes them as
// one pipelined batch. A connection that falls behind (a slow reply) sends
// what it owes at once, but never more than maxOwed of its share at a time:
// the pattern's timing matters more than the count.
const (
	tick     = time.Millisecond
	maxOwed  = 50 * time.Millisecond
	maxBatch = 1024
)

// loadSpec is the load of one scenario run.
type loadSpec struct {
	addrs    []string // the nodes' RESP addresses
	conns    int      // connections per node
	pattern  pattern
	perSec   float64 // calls per second over the loaded nodes
	duration time.Duration
	command  []string
}

// loadResult is what one scenario run recorded.
type loadResult struct {
	start  time.Time // wall clock and monotonic reading at the start
	calls  []call    // decided calls, sorted by time
	errors int64     // error replies: no decision, left out of the ideal
	errMsg string    // the first error reply's text
}

// worker is one connection to one node, with what it recorded.
type worker struct {
	node   int
	c      *conn
	calls  []call
	errors int64
	errMsg string
}

// runLoad dials spec.conns connections to every node, drives them for
// spec.duration and returns every call they made.
func runLoad(ctx context.Context, spec loadSpec) (loadResult, error) {
	var ws []*worker
	defer func() {
		for _, w := range ws {
			w.c.Close()
		}
	}()
	for i, a := range spec.addrs {
		for j := 0; j < spec.conns; j++ {
			c, err := dial(a, cmdTimeout)
			if err != nil {
				return loadResult{}, fmt.Errorf("connecting to node %d (%s): %w", i+1, a, err)
			}
			ws = append(ws, &worker{node: i, c: c})
		}
	}
	req := appendCommand(nil, spec.command...)
	res := loadResult{start: time.Now()}
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.loop(ctx, &spec, req, res.start)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	n := 0
	for _, w := range ws {
		n += len(w.calls)
	}
	res.calls = make([]call, 0, n)
	for _, w := range ws {
		res.calls = append(res.calls, w.calls...)
		res.errors += w.errors
		if res.errMsg == "" {
			res.errMsg = w.errMsg
		}
	}
	sortCalls(res.calls)
	return res, ctx.Err()
}

// share returns the calls per second this connection owes at t: the load
// divided among the connections of the nodes the pattern loads, or 0 if
// it does not load this connection's node.
func share(spec *loadSpec, node int, t time.Duration) float64 {
	nodes := len(spec.addrs)
	if !spec.pattern(node, nodes, t) {
		return 0
	}
	return spec.perSec / float64(activeNodes(spec.pattern, nodes, t)*spec.conns)
}

// loop sends batches on the connection's schedule until the duration is
// over. It records every reply: a decision as a call, an error reply as an
// error. A broken connection ends the run.
func (w *worker) loop(ctx context.Context, spec *loadSpec, req []byte, start time.Time) error {
	var buf []byte
	var owed float64
	last := time.Duration(0)
	for {
		now := time.Since(start)
		if now >= spec.duration || ctx.Err() != nil {
			return nil
		}
		if r := share(spec, w.node, now); r > 0 {
			owed = min(owed+r*(now-last).Seconds(), r*maxOwed.Seconds())
		} else {
			owed = 0
		}
		last = now
		n := min(int(owed), maxBatch)
		if n > 0 {
			owed -= float64(n)
			buf = buf[:0]
			for range n {
				buf = append(buf, req...)
			}
			if err := w.batch(buf, n, start); err != nil {
				return fmt.Errorf("node %d (%s): %w", w.node+1, w.c.addr, err)
			}
		}
		if d := tick - (time.Since(start) - now); d > 0 {
			time.Sleep(d)
		}
	}
}

// batch writes n calls at once and reads their replies.
func (w *worker) batch(buf []byte, n int, start time.Time) error {
	w.c.c.SetDeadline(time.Now().Add(cmdTimeout))
	sent := int64(time.Since(start))
	if _, err := w.c.c.Write(buf); err != nil {
		return err
	}
	for range n {
		allowed, text, err := w.c.decision()
		if err != nil {
			return err
		}
		recv := int64(time.Since(start))
		if text != "" {
			w.errors++
			if w.errMsg == "" {
				w.errMsg = strings.TrimSpace(text)
			}
			continue
		}
		w.calls = append(w.calls, call{sent: sent, recv: recv, ok: allowed == 1})
	}
	return nil
}
