package robust

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
)

// opTimeout bounds every client call of the traffic.
const opTimeout = 8 * time.Second

// never is the return time of a write whose outcome is unknown: it may take
// effect at any point after its call, as in etcd's robustness tests.
const never = int64(math.MaxInt64)

type opKind uint8

const (
	opWrite     opKind = iota // RL.BUDGET SET path RATE value
	opReadLin                 // RL.BUDGET GET path CONSISTENT
	opReadPlain               // RL.BUDGET GET path, local replica
	opReadFinal               // after healing and convergence
	numOpKinds
)

func (k opKind) String() string {
	return [...]string{"write", "consistent read", "plain read", "final read"}[k]
}

type opStatus uint8

const (
	stOK      opStatus = iota
	stFailed           // the server answered an error
	stUnknown          // no answer: timeout or connection error
	stNotSent          // no connection: the dial failed, nothing was sent
)

// op is one client call. Times are nanoseconds on the monotonic clock since
// the history began. Value is the written value, or the value read (0: the
// path has never been set).
type op struct {
	Kind         opKind
	Client       int
	Node         int
	Path         string
	Value        int64
	Version      uint64
	Call, Return int64
	Status       opStatus
	Err          string
}

func (o op) String() string {
	s := fmt.Sprintf("%s n%d %s", o.Kind, o.Node+1, o.Path)
	if o.Kind == opWrite {
		s += fmt.Sprintf(" := %d", o.Value)
	} else if o.Status == stOK {
		s += fmt.Sprintf(" -> %d", o.Value)
	}
	s += fmt.Sprintf(" [%.3fs, %.3fs]", float64(o.Call)/1e9, float64(o.Return)/1e9)
	if o.Err != "" {
		s += " " + o.Err
	}
	return s
}

// history records operations from many goroutines.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []op
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(o op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

func (h *history) all() []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]op(nil), h.ops...)
}

// classify maps a client error to an op status.
func classify(err error) opStatus {
	var rerr redis.Error
	var nerr *net.OpError
	switch {
	case err == nil:
		return stOK
	case errors.As(err, &rerr):
		return stFailed
	case errors.As(err, &nerr) && nerr.Op == "dial":
		return stNotSent
	default:
		return stUnknown
	}
}

// readPath reads a path's sustained rate and version; a path never set
// reads as 0.
func readPath(ctx context.Context, c *redis.Client, path string, consistent bool) (int64, uint64, error) {
	args := []any{"RL.BUDGET", "GET", path}
	if consistent {
		args = append(args, "CONSISTENT")
	}
	s, err := c.Do(ctx, args...).Text()
	if err == redis.Nil {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	var reply struct {
		Config struct {
			Sustained struct {
				Rate int64 `json:"rate"`
			} `json:"sustained"`
		} `json:"config"`
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal([]byte(s), &reply); err != nil {
		return 0, 0, fmt.Errorf("GET %s: bad reply %q: %v", path, s, err)
	}
	return reply.Config.Sustained.Rate, reply.Version, nil
}

// ---- linearizability (porcupine) ----

type regInput struct {
	Path  string
	Write bool
	Value int64
}

// registerModel is one register per path holding the last written rate.
var registerModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range h {
			p := o.Input.(regInput).Path
			if _, ok := by[p]; !ok {
				keys = append(keys, p)
			}
			by[p] = append(by[p], o)
		}
		sort.Strings(keys)
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.Write {
			return true, in.Value
		}
		return output.(int64) == state.(int64), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if in.Write {
			return fmt.Sprintf("set(%s, %d)", in.Path, in.Value)
		}
		return fmt.Sprintf("get(%s) -> %d", in.Path, output.(int64))
	},
	DescribeState: func(state any) string { return fmt.Sprint(state.(int64)) },
}

// porcupineHistory keeps every write that reached a node (those without an
// OK as possibly applied at any time after their call) and the successful linearizable
// and final reads. Plain reads are not linearizable on followers and are
// left out; failed reads say nothing.
func porcupineHistory(ops []op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range ops {
		switch {
		case o.Kind == opWrite && o.Status != stNotSent:
			ret := o.Return
			if o.Status != stOK {
				ret = never
			}
			out = append(out, porcupine.Operation{ClientId: o.Client, Input: regInput{o.Path, true, o.Value}, Call: o.Call, Return: ret, Output: int64(0)})
		case (o.Kind == opReadLin || o.Kind == opReadFinal) && o.Status == stOK:
			out = append(out, porcupine.Operation{ClientId: o.Client, Input: regInput{o.Path, false, 0}, Call: o.Call, Return: o.Return, Output: o.Value})
		}
	}
	return out
}

// checkLinearizable runs porcupine; on a verdict other than Ok it writes the
// visualization and returns its path.
func checkLinearizable(ops []op, timeout time.Duration) (porcupine.CheckResult, string, error) {
	h := porcupineHistory(ops)
	res, info := porcupine.CheckOperationsVerbose(registerModel, h, timeout)
	if res == porcupine.Ok {
		return res, "", nil
	}
	dir, err := os.MkdirTemp("", "sluice-robust-porcupine-")
	if err != nil {
		return res, "", err
	}
	file := filepath.Join(dir, "linearizability.html")
	return res, file, porcupine.VisualizePath(registerModel, info, file)
}

// ---- durability, staleness, TRYAGAIN ----

// writers indexes writes by path and value (values are unique).
func writers(ops []op) map[string]map[int64]op {
	w := map[string]map[int64]op{}
	for _, o := range ops {
		if o.Kind != opWrite || o.Status == stNotSent {
			continue
		}
		if w[o.Path] == nil {
			w[o.Path] = map[int64]op{}
		}
		if o.Status != stOK {
			o.Return = never
		}
		w[o.Path][o.Value] = o
	}
	return w
}

// durability checks the final value of every path against the history. A
// final value nobody wrote is corrupt. An acknowledged write w is lost when
// the final value is the initial one, or was written by a write that
// completed before w was called (so it cannot have overwritten w); a write
// with an unknown outcome may have taken effect at any time after its call.
func durability(ops []op, final map[string]int64) (lost []op, corrupt []string) {
	ws := writers(ops)
	for path, v := range final {
		var fw op
		if v != 0 {
			var ok bool
			fw, ok = ws[path][v]
			if !ok {
				corrupt = append(corrupt, fmt.Sprintf("%s = %d, a value never written", path, v))
				continue
			}
		}
		for _, w := range ws[path] {
			if w.Return == never || w.Value == v {
				continue
			}
			if v == 0 || fw.Return < w.Call {
				lost = append(lost, w)
			}
		}
	}
	sort.Strings(corrupt)
	sort.Slice(lost, func(i, j int) bool { return lost[i].Call < lost[j].Call })
	return lost, corrupt
}

// staleReads counts plain reads that returned a value older than the last
// write acknowledged before the read began: its writer completed before
// that write was called, or the path read as never set. unknown counts reads
// of values nobody wrote.
func staleReads(ops []op) (stale, total, unknown int) {
	ws := writers(ops)
	acked := map[string][]op{} // by return time
	for _, o := range ops {
		if o.Kind == opWrite && o.Status == stOK {
			acked[o.Path] = append(acked[o.Path], o)
		}
	}
	for _, a := range acked {
		sort.Slice(a, func(i, j int) bool { return a[i].Return < a[j].Return })
	}
	for _, r := range ops {
		if r.Kind != opReadPlain || r.Status != stOK {
			continue
		}
		total++
		a := acked[r.Path]
		i := sort.Search(len(a), func(i int) bool { return a[i].Return >= r.Call })
		if r.Value != 0 {
			if _, ok := ws[r.Path][r.Value]; !ok {
				unknown++
				continue
			}
		}
		if i == 0 {
			continue
		}
		last := a[i-1]
		if r.Value == 0 || ws[r.Path][r.Value].Return < last.Call {
			stale++
		}
	}
	return stale, total, unknown
}

// fault is a window during which a node was killed, stopped or cut off: from
// just before the fault began until its repair was complete (the restarted
// process answers PING, SIGCONT was sent, the link is up).
type fault struct {
	Kind       string
	Node       int
	Start, End int64
}

func overlaps(f fault, call, ret int64) bool { return f.Start <= ret && call <= f.End }

// writeErrorsDuringQuorum returns the writes that failed (an error reply)
// or got no reply although, for the whole call, the node they were sent to
// was under no fault, and at most one node was (so it and another node made
// a quorum). A write answered TRYAGAIN or CLUSTERDOWN is excused when no
// leader was known until less than a second before the answer: the node
// waits for a leader for --apply-timeout, and an election on a loaded
// machine may take longer (the frozen-leader test bounds elections on
// their own); a write that still failed a second after a leader was known
// is counted.
func writeErrorsDuringQuorum(ops []op, faults, leaderless []fault) []op {
	var out []op
	for _, o := range ops {
		if o.Kind != opWrite || (o.Status != stFailed && o.Status != stUnknown) {
			continue
		}
		if overlapsFault(o, faults, true) {
			continue
		}
		if o.Status == stFailed && (strings.HasPrefix(o.Err, "TRYAGAIN") || strings.HasPrefix(o.Err, "CLUSTERDOWN")) &&
			leaderlessUntil(o, leaderless, int64(time.Second)) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// leaderlessUntil reports whether a leaderless window overlapped the op and
// lasted until within slack of its return.
func leaderlessUntil(o op, leaderless []fault, slack int64) bool {
	for _, w := range leaderless {
		if overlaps(w, o.Call, o.Return) && w.End+slack >= o.Return {
			return true
		}
	}
	return false
}

// overlapsFault reports whether an op overlapped a fault; with quorum, only
// faults that could have cost its node a quorum count (its own, or faults
// of two different nodes).
func overlapsFault(o op, faults []fault, quorum bool) bool {
	hit := map[int]bool{}
	for _, f := range faults {
		if overlaps(f, o.Call, o.Return) {
			hit[f.Node] = true
		}
	}
	if !quorum {
		return len(hit) > 0
	}
	return hit[o.Node] || len(hit) >= 2
}
