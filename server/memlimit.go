package server

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The Go runtime collects garbage once its heap has grown by as much as
// was live after the last collection (GOGC=100). With the client buffers
// at --max-client-buffers, that lets as much again pile up as garbage
// (read buffers and queues left behind as they grew) before a collection:
// resident memory reached twice the bound above the rest (2.1 GB for
// 1 GiB). GovernMemory keeps the runtime's soft memory limit at what the
// rest of the process takes, with the runtime's usual room for its
// garbage, plus the buffers' share of the bound (ClientBufferShare, seven
// eighths) and a sixteenth of the bound: client buffers are counted once,
// and what the collector lags behind (it gives up collecting past half
// the CPU) has the last sixteenth. While they are far from the bound the
// limit is above the runtime's own goal and changes nothing.

// governEvery is how often the limit follows what the process holds.
const governEvery = 100 * time.Millisecond

// memoryLimit is the soft memory limit for a process whose runtime holds
// nonHeap bytes outside heap objects and free heap spans, whose heap had
// live bytes live after the last collection, other of them outside the
// client buffers, under --max-client-buffers bound. Never below what is
// live plus a sixteenth of the bound, so that a stale figure cannot make
// the runtime collect without end.
func memoryLimit(nonHeap, live, other, bound int64) int64 {
	room := bound / 16
	return nonHeap + max(2*other+ClientBufferShare(bound), live) + room
}

// otherEstimate follows what the heap holds outside the client buffers,
// est being its last value and live−buffers the new sample: down at
// once, up by a 64th of the difference a step (a half-life of 4.4 s).
// A collection that runs while buffers are allocated counts them live
// (and buffers dropped since as well), so that one sample can be far
// above the truth; a rise that lasts is followed within seconds, and
// meanwhile the limit never falls below what is live (memoryLimit).
func otherEstimate(est, sample int64) int64 {
	sample = max(sample, 0)
	if est < 0 || sample <= est {
		return sample
	}
	return est + (sample-est+63)/64
}

var memSamples = []string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/gc/heap/live:bytes",
}

// GovernMemory sets the runtime's soft memory limit from bound
// (--max-client-buffers) and buffers (the bytes of client buffers held
// now) every governEvery until stop is closed, then lifts it. With
// GOMEMLIMIT set, the operator's limit stands and nothing is done.
func GovernMemory(bound int64, buffers func() int64, getenv func(string) string, stop <-chan struct{}) {
	if getenv("GOMEMLIMIT") != "" {
		return
	}
	defer debug.SetMemoryLimit(math.MaxInt64)
	s := make([]metrics.Sample, len(memSamples))
	for i, name := range memSamples {
		s[i].Name = name
	}
	t := time.NewTicker(governEvery)
	defer t.Stop()
	other := int64(-1)
	for {
		metrics.Read(s)
		v := func(i int) int64 {
			if s[i].Value.Kind() != metrics.KindUint64 {
				return 0
			}
			return int64(s[i].Value.Uint64())
		}
		total, released, objects, free, live := v(0), v(1), v(2), v(3), v(4)
		nonHeap := max(total-released-objects-free, 0)
		other = otherEstimate(other, live-buffers())
		debug.SetMemoryLimit(memoryLimit(nonHeap, live, other, bound))
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// ClientBuffers is the bytes of client read buffers and queued
// transactions held now (sluice_client_buffers_bytes).
func (s *Server) ClientBuffers() int64 { return s.buffers.Load() }
