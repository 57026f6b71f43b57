// Package robust runs robustness tests against a real three-process sluice
// cluster, in the manner of etcd's tests/robustness and Jepsen: random
// writes and reads through every node while a nemesis kills, stops and
// cuts off nodes, a recorded history, and checks over it (porcupine for
// linearizability, no lost acknowledged write, no bounced write while a
// quorum was reachable). See README.md; make chaos runs it at length.
package robust

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// settings are the suite's knobs, read from the environment.
type settings struct {
	duration   time.Duration
	seed       uint64
	partitions string // auto, on, off
	faults     map[string]bool
}

// faultKinds are the nemesis's faults: kill -9 and restart; SIGSTOP for
// 1–4 s; a node cut off the bridge for 2–6 s; the leader frozen (SIGSTOP)
// or cut off for twice --apply-timeout, longer than every timeout; a
// Raft-only partition (iptables on the Raft port, RESP open) for more than
// --apply-timeout; and crash-then-call: kill -9, restart, and quota calls
// on the node as soon as it answers PING, while it replays.
var faultKinds = []string{"kill", "stop", "partition", "freeze", "cutleader", "raftcut", "crashcall"}

// netKinds need network namespaces (raftcut also iptables).
var netKinds = map[string]bool{"partition": true, "cutleader": true, "raftcut": true}

func readSettings(t *testing.T) settings {
	s := settings{duration: 60 * time.Second, partitions: "auto", faults: map[string]bool{}}
	if v := os.Getenv("SLUICE_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SLUICE_CHAOS_DURATION=%q: want a positive duration such as 60s or 3m", v)
		}
		s.duration = d
	}
	s.seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("SLUICE_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_CHAOS_SEED=%q: want an unsigned integer", v)
		}
		s.seed = n
	}
	if v := os.Getenv("SLUICE_CHAOS_PARTITIONS"); v != "" {
		if v != "auto" && v != "on" && v != "off" {
			t.Fatalf("SLUICE_CHAOS_PARTITIONS=%q: want auto, on or off", v)
		}
		s.partitions = v
	}
	v := os.Getenv("SLUICE_CHAOS_FAULTS")
	switch v {
	case "", "all":
		for _, k := range faultKinds {
			s.faults[k] = true
		}
	case "off", "none":
	default:
		for _, k := range strings.Split(v, ",") {
			if !strings.Contains(" "+strings.Join(faultKinds, " ")+" ", " "+k+" ") {
				t.Fatalf("SLUICE_CHAOS_FAULTS=%q: want all, off, or a list of %s", v, strings.Join(faultKinds, ", "))
			}
			s.faults[k] = true
		}
	}
	return s
}

var chaosPaths = []string{"chaos/p0", "chaos/p1", "chaos/p2", "chaos/p3", "chaos/p4"}

// TestRobustness runs random writes and reads against a three-process
// cluster while a nemesis kills, stops and partitions nodes, then checks
// the recorded history: convergence, linearizability, durability of
// acknowledged writes, and no TRYAGAIN while a quorum was reachable.
func TestRobustness(t *testing.T) {
	if testing.Short() {
		t.Skip("robustness suite: starts a 3-process cluster for a minute (SLUICE_CHAOS_DURATION); skipped under -short")
	}
	cfg := readSettings(t)
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5eed))
	t.Logf("seed %d (SLUICE_CHAOS_SEED=%d repeats the choices), duration %v", cfg.seed, cfg.seed, cfg.duration)

	var lab *netLab
	partNote := ""
	wantLab := false
	for k := range netKinds {
		wantLab = wantLab || cfg.faults[k]
	}
	if wantLab {
		ok, why := false, "SLUICE_CHAOS_PARTITIONS=off"
		if cfg.partitions != "off" {
			ok, why = probeNetns()
		}
		if ok {
			var err error
			if lab, err = newNetLab(t, rng); err != nil {
				t.Fatalf("building network namespaces: %v", err)
			}
			partNote = fmt.Sprintf("enabled (each node in its own network namespace, %s.0/24)", lab.subnet)
		} else {
			if cfg.partitions == "on" {
				t.Fatalf("SLUICE_CHAOS_PARTITIONS=on but network namespaces are not usable: %s", why)
			}
			for k := range netKinds {
				delete(cfg.faults, k)
			}
			partNote = "DISABLED (" + why + "); no partition, cutleader or raftcut faults were injected"
		}
	} else {
		partNote = "not requested (SLUICE_CHAOS_FAULTS)"
	}
	if lab != nil && cfg.faults["raftcut"] {
		if ok, why := probeIPTables(lab); !ok {
			if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
				t.Fatalf("raftcut faults: %s", why)
			}
			delete(cfg.faults, "raftcut")
			partNote += "; raftcut DISABLED (" + why + ")"
		}
	}
	t.Logf("partitions: %s", partNote)

	c := newCluster(t, lab)
	c.startAll()
	termBefore := maxTerm(c)

	h := newHistory()
	ctx, stopTraffic := context.WithTimeout(context.Background(), cfg.duration)
	defer stopTraffic()
	var clientIDs atomic.Int64
	var nextValue atomic.Int64
	var wg sync.WaitGroup
	linErrs := newErrCount()
	plainErrs := newErrCount()
	for w := 0; w < 4; w++ {
		r := rand.New(rand.NewPCG(cfg.seed, uint64(100+w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			writer(ctx, c, h, r, &clientIDs, &nextValue)
		}()
	}
	for w := 0; w < 2; w++ {
		r := rand.New(rand.NewPCG(cfg.seed, uint64(200+w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			reader(ctx, c, h, r, &clientIDs, true, linErrs)
		}()
	}
	qt := newQuotaTraffic(h)
	for w := 0; w < 2; w++ {
		r := rand.New(rand.NewPCG(cfg.seed, uint64(400+w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			qt.drive(ctx, c, r, false)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		qt.drive(ctx, c, rand.New(rand.NewPCG(cfg.seed, 500)), true)
	}()
	for w := 0; w < 2; w++ {
		r := rand.New(rand.NewPCG(cfg.seed, uint64(300+w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			reader(ctx, c, h, r, &clientIDs, false, plainErrs)
		}()
	}
	nem := &nemesis{c: c, h: h, rng: rand.New(rand.NewPCG(cfg.seed, 1)), lab: lab, qt: qt}
	for _, k := range faultKinds {
		if cfg.faults[k] {
			nem.kinds = append(nem.kinds, k)
		}
	}
	elections := &termWatch{c: c, h: h}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		elections.run(ctx)
	}()
	nemDone := make(chan struct{})
	go func() {
		defer close(nemDone)
		nem.run(ctx, t)
	}()
	<-ctx.Done()
	<-nemDone
	wg.Wait()
	<-watchDone
	trafficEnd := h.now()

	// (1) Heal everything and wait for every node to agree.
	nem.healAll(t)
	applied, convErr := c.converged(120*time.Second, chaosPaths)
	if convErr != nil {
		t.Errorf("cluster did not converge after healing: %v", convErr)
	}
	final := map[string]int64{}
	if convErr == nil {
		l, _ := c.leader(10 * time.Second)
		for _, p := range chaosPaths {
			call := h.now()
			v, ver, err := readPath(context.Background(), l.client, p, false)
			o := op{Kind: opReadFinal, Client: int(clientIDs.Add(1)), Node: l.idx, Path: p, Value: v, Version: ver, Call: call, Return: h.now()}
			if err != nil {
				t.Errorf("final read of %s: %v", p, err)
				continue
			}
			h.add(o)
			final[p] = v
		}
	}
	termAfter := maxTerm(c)

	ops := h.all()
	faults := nem.windows()
	writeHistory(t, filepath.Join(c.dir, "history.jsonl"), ops, faults)

	// (2) Linearizability of writes, CONSISTENT reads and final reads.
	res, viz, vizErr := checkLinearizable(ops, 3*time.Minute)
	// (3) Durability.
	lost, corrupt := durability(ops, final)
	// (4) Write errors while a quorum was reachable.
	leaderless := elections.leaderlessWindows()
	bounced := writeErrorsDuringQuorum(ops, faults, leaderless)
	excused := len(writeErrorsDuringQuorum(ops, faults, nil)) - len(bounced)
	// (5) Quotas: never more admitted than the quota; limiting calls
	// answered by every node not under a fault.
	over := qt.overAdmitted()
	acqErrs := qt.errorsOutsideFaults(faults)
	stale, plainOK, plainUnknown := staleReads(ops)

	sum := summarize(ops, append(faults, elections.windows()...))
	var b strings.Builder
	line := func(k, f string, a ...any) { fmt.Fprintf(&b, "%-24s %s\n", k+":", fmt.Sprintf(f, a...)) }
	b.WriteString("---- sluice robustness summary ----\n")
	line("binary", "%s (--apply-timeout %v: %s)", c.bin, c.apply, yesNo(c.applyTimeout))
	line("duration", "%v of traffic (history %.1fs, to the last repair), seed %d", cfg.duration, float64(trafficEnd)/1e9, cfg.seed)
	line("cluster", "3 processes, --bootstrap-peers; partitions %s", partNote)
	line("writes", "%d: %d acked, %d failed (error reply), %d unknown (no reply), %d not sent (dial failed)",
		sum.writes, sum.acked, sum.failed, sum.unknown, sum.notSent)
	line("consistent reads", "%d ok, %d failed%s", sum.reads[opReadLin], linErrs.total(), linErrs.top())
	line("plain reads", "%d ok, %d failed%s", plainOK, plainErrs.total(), plainErrs.top())
	line("faults", "%s; Raft term %d -> %d, %d elections seen during traffic", nem.counts(), termBefore, termAfter, len(elections.windows()))
	line("converged", "%s", convergedNote(applied, convErr))
	line("acknowledged writes", "%d", sum.acked)
	line("lost writes", "%d%s", len(lost), listNote(len(corrupt), "final values never written"))
	line("linearizability", "%s (porcupine, %d registers; %d writes, %d consistent + %d final reads)%s",
		res, len(chaosPaths), sum.writes-sum.notSent, sum.reads[opReadLin], len(final), vizNote(viz, vizErr))
	line("stale follower reads", "%d of %d plain reads (not a violation)%s", stale, plainOK, listNote(plainUnknown, "of values never written"))
	line("errors during quorum", "%d writes failed or got no reply while their node and a quorum were reachable (%d answered TRYAGAIN/CLUSTERDOWN in all; %d excused: no leader known until they gave up, %d leaderless windows, longest %v)",
		len(bounced), sum.bounced, excused, len(leaderless), longest(leaderless))
	line("quota", "%s", qt.summary())
	line("quota over-admission", "%d of %d quota periods admitted more than %d", len(over), qt.keys(), chaosQuota)
	line("acquire errors", "%d RL.ACQUIRE calls failed on a node under no fault (%d failed in all)", len(acqErrs), qt.failed())
	line("write latency (acked)", "p99 %v, max %v; max overlapping a fault or election %v", sum.p99, sum.max, sum.maxFault)
	b.WriteString("-----------------------------------\n")
	fmt.Print(b.String())

	if res == porcupine.Illegal {
		t.Errorf("history is not linearizable; visualization: %s", viz)
	} else if res != porcupine.Ok {
		t.Logf("linearizability check inconclusive (%s): porcupine timed out", res)
	}
	reportFirst(t, lost, "lost acknowledged write")
	for _, s := range corrupt {
		t.Errorf("final value inconsistent with the history: %s", s)
	}
	reportFirst(t, bounced, "write failed while a quorum was reachable")
	for _, s := range over {
		t.Errorf("quota over-admitted: %s", s)
	}
	reportFirst(t, acqErrs, "RL.ACQUIRE failed on a node under no fault")
}

// reportFirst fails the test with the first ten items, then their count.
func reportFirst[T any](t *testing.T, items []T, what string) {
	t.Helper()
	for i, x := range items {
		if i == 10 {
			t.Errorf("... %d in all: %s", len(items), what)
			return
		}
		t.Errorf("%s: %v", what, x)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no, the binary lacks the flag; its default applies"
}

func convergedNote(applied uint64, err error) string {
	if err != nil {
		return "NO: " + err.Error()
	}
	return fmt.Sprintf("yes, all 3 nodes at applied index %d with equal values for %d paths", applied, len(chaosPaths))
}

func listNote(n int, what string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (+%d %s)", n, what)
}

func vizNote(path string, err error) string {
	switch {
	case err != nil:
		return "; visualization failed: " + err.Error()
	case path != "":
		return "; visualization: " + path
	}
	return ""
}

// writeHistory saves the ops and fault windows, one JSON object a line,
// beside the node logs (kept when the test fails).
func writeHistory(t *testing.T, file string, ops []op, faults []fault) {
	f, err := os.Create(file)
	if err != nil {
		t.Log(err)
		return
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, x := range faults {
		enc.Encode(x)
	}
	for _, o := range ops {
		enc.Encode(o)
	}
}

// maxTerm is the highest Raft term any node reports.
func maxTerm(c *cluster) uint64 {
	var m uint64
	for _, n := range c.nodes {
		if inf := n.info(); inf != nil {
			v, _ := strconv.ParseUint(inf["term"], 10, 64)
			m = max(m, v)
		}
	}
	return m
}

// writer sends RL.BUDGET SET <path> RATE <unique n> through random nodes.
func writer(ctx context.Context, c *cluster, h *history, r *rand.Rand, ids, values *atomic.Int64) {
	client := int(ids.Add(1))
	for ctx.Err() == nil {
		n := c.nodes[r.IntN(len(c.nodes))]
		path := chaosPaths[r.IntN(len(chaosPaths))]
		v := values.Add(1)
		octx, cancel := context.WithTimeout(context.Background(), opTimeout)
		call := h.now()
		err := n.client.Do(octx, "RL.BUDGET", "SET", path, "RATE", v).Err()
		ret := h.now()
		cancel()
		o := op{Kind: opWrite, Client: client, Node: n.idx, Path: path, Value: v, Call: call, Return: ret, Status: classify(err)}
		if err != nil {
			o.Err = err.Error()
			// The op stays open for ever in the checker: later ops of
			// this goroutine get a new client id, as in etcd.
			client = int(ids.Add(1))
		}
		h.add(o)
		if err != nil {
			pause(ctx, 20*time.Millisecond)
		}
	}
}

// reader sends RL.BUDGET GET <path> [CONSISTENT] to random nodes.
func reader(ctx context.Context, c *cluster, h *history, r *rand.Rand, ids *atomic.Int64, consistent bool, errs *errCount) {
	client := int(ids.Add(1))
	kind := opReadPlain
	if consistent {
		kind = opReadLin
	}
	for ctx.Err() == nil {
		n := c.nodes[r.IntN(len(c.nodes))]
		path := chaosPaths[r.IntN(len(chaosPaths))]
		octx, cancel := context.WithTimeout(context.Background(), opTimeout)
		call := h.now()
		v, ver, err := readPath(octx, n.client, path, consistent)
		ret := h.now()
		cancel()
		if err != nil {
			// A read that failed says nothing: dropped, only counted. The
			// pause keeps a reader that is refused at once (a binary
			// without CONSISTENT) from spinning on a 2-core machine.
			errs.add(err)
			pause(ctx, 20*time.Millisecond)
			continue
		}
		h.add(op{Kind: kind, Client: client, Node: n.idx, Path: path, Value: v, Version: ver, Call: call, Return: ret})
		// Reads are cheap; a short pause leaves CPU to the nodes.
		pause(ctx, time.Duration(r.IntN(4))*time.Millisecond)
	}
}

// pause waits for d or until ctx ends: pacing, not a wait for a condition.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// errCount counts errors by their first words.
type errCount struct {
	mu sync.Mutex
	by map[string]int
}

func newErrCount() *errCount { return &errCount{by: map[string]int{}} }

func (e *errCount) add(err error) {
	k := err.Error()
	if f := strings.Fields(k); len(f) > 4 {
		k = strings.Join(f[:4], " ") + " …"
	}
	e.mu.Lock()
	e.by[k]++
	e.mu.Unlock()
}

func (e *errCount) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, v := range e.by {
		n += v
	}
	return n
}

// top names the most frequent error.
func (e *errCount) top() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	best, n := "", 0
	for k, v := range e.by {
		if v > n || (v == n && k < best) {
			best, n = k, v
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (most: %d× %q)", n, best)
}

// summary holds the op counts and latencies for the report.
type summary struct {
	writes, acked, failed, notSent, unknown, bounced int
	reads                                            [numOpKinds]int
	p99, max, maxFault                               time.Duration
}

func summarize(ops []op, faults []fault) summary {
	var s summary
	var lat []time.Duration
	for _, o := range ops {
		if o.Kind != opWrite {
			if o.Status == stOK {
				s.reads[o.Kind]++
			}
			continue
		}
		s.writes++
		switch o.Status {
		case stOK:
			s.acked++
			d := time.Duration(o.Return - o.Call)
			lat = append(lat, d)
			if overlapsFault(o, faults, false) {
				s.maxFault = max(s.maxFault, d)
			}
		case stFailed:
			s.failed++
			if strings.HasPrefix(o.Err, "TRYAGAIN") || strings.HasPrefix(o.Err, "CLUSTERDOWN") {
				s.bounced++
			}
		case stNotSent:
			s.notSent++
		default:
			s.unknown++
		}
	}
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		s.max = lat[len(lat)-1].Round(time.Millisecond)
		s.p99 = lat[len(lat)*99/100].Round(time.Millisecond)
		s.maxFault = s.maxFault.Round(time.Millisecond)
	}
	return s
}

// termWatch polls the nodes' Raft terms and leaders. A rise of the term
// between two polls is an election, and the span between them its window
// (for the latency of writes that overlapped one, whether or not the
// nemesis caused it). A leaderless window runs from the last poll at which
// a leader was known (two nodes name it and it says it leads) to the first
// poll at which one is known again, or at which another one is: how long
// the cluster could not commit, by the clock of this test.
type termWatch struct {
	c          *cluster
	h          *history
	mu         sync.Mutex
	ws         []fault
	leaderless []fault
}

func (tw *termWatch) run(ctx context.Context) {
	var term uint64
	prev := tw.h.now()
	known, lastKnown, gap := "", prev, false
	for ctx.Err() == nil {
		infos := make([]map[string]string, len(tw.c.nodes))
		var wg sync.WaitGroup
		for i, n := range tw.c.nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				octx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				defer cancel()
				infos[i], _ = clusterInfo(octx, n.client)
			}()
		}
		wg.Wait()
		now := tw.h.now()
		var m uint64
		named := map[string]int{}
		leads := map[string]bool{}
		for _, inf := range infos {
			if inf == nil {
				continue
			}
			v, _ := strconv.ParseUint(inf["term"], 10, 64)
			m = max(m, v)
			if id := inf["leader_id"]; id != "" {
				named[id]++
			}
			if inf["role"] == "leader" {
				leads[inf["node_id"]] = true
			}
		}
		leader := ""
		for id, k := range named {
			if k >= 2 && leads[id] {
				leader = id
			}
		}
		tw.mu.Lock()
		if term != 0 && m > term {
			tw.ws = append(tw.ws, fault{Kind: "election", Node: -1, Start: prev, End: now})
		}
		switch {
		case leader == "":
			gap = true
		case gap || (known != "" && leader != known):
			tw.leaderless = append(tw.leaderless, fault{Kind: "leaderless", Node: -1, Start: lastKnown, End: now})
			gap = false
		}
		if leader != "" {
			known, lastKnown = leader, now
		}
		tw.mu.Unlock()
		term, prev = max(term, m), now
		pause(ctx, 100*time.Millisecond)
	}
	if gap {
		tw.mu.Lock()
		tw.leaderless = append(tw.leaderless, fault{Kind: "leaderless", Node: -1, Start: lastKnown, End: never})
		tw.mu.Unlock()
	}
}

// longest returns the longest of the windows that ended.
func longest(ws []fault) time.Duration {
	var d int64
	for _, w := range ws {
		if w.End != never {
			d = max(d, w.End-w.Start)
		}
	}
	return time.Duration(d).Round(time.Millisecond)
}

// leaderlessWindows returns the windows during which no leader was known.
func (tw *termWatch) leaderlessWindows() []fault {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return append([]fault(nil), tw.leaderless...)
}

func (tw *termWatch) windows() []fault {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return append([]fault(nil), tw.ws...)
}

// nemesis injects one fault at a time, 1–3 s apart, and records each
// fault's window.
type nemesis struct {
	c     *cluster
	h     *history
	rng   *rand.Rand
	lab   *netLab
	qt    *quotaTraffic
	kinds []string

	mu     sync.Mutex
	faults []fault
}

func (nm *nemesis) begin(kind string, n *node) int {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	nm.faults = append(nm.faults, fault{Kind: kind, Node: n.idx, Start: nm.h.now(), End: never})
	return len(nm.faults) - 1
}

// end closes fault i's window once its node is back in the cluster: it
// names a leader and has applied what the others had committed when it
// was repaired. Until then it cannot count towards a quorum: a node whose
// packets were dropped is reached again only when TCP next retransmits,
// seconds after the repair, and a restarted node replays and catches up.
func (nm *nemesis) end(t *testing.T, i int) {
	nm.mu.Lock()
	n := nm.c.nodes[nm.faults[i].Node]
	nm.mu.Unlock()
	repaired := nm.h.now()
	var target uint64
	err := eventually(60*time.Second, func() error {
		if target == 0 {
			for _, o := range nm.c.nodes {
				if inf := o.info(); o != n && inf != nil {
					ci, _ := strconv.ParseUint(inf["commit_index"], 10, 64)
					target = max(target, ci)
				}
			}
			if target == 0 {
				return fmt.Errorf("no commit index from the other nodes")
			}
		}
		inf := n.info()
		if inf == nil || inf["leader_id"] == "" {
			return fmt.Errorf("%s knows no leader", n.id)
		}
		if a, _ := strconv.ParseUint(inf["applied_index"], 10, 64); a < target {
			return fmt.Errorf("%s applied %d of %d", n.id, a, target)
		}
		return nil
	})
	nm.mu.Lock()
	nm.faults[i].End = nm.h.now()
	f := nm.faults[i]
	nm.mu.Unlock()
	note := ""
	if err != nil {
		note = "; not back: " + err.Error()
	}
	t.Logf("fault %-9s n%d [%.3fs, %.3fs], repaired at %.3fs, back %.3fs later%s", f.Kind, f.Node+1,
		float64(f.Start)/1e9, float64(f.End)/1e9, float64(repaired)/1e9, float64(f.End-repaired)/1e9, note)
}

func (nm *nemesis) windows() []fault {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return append([]fault(nil), nm.faults...)
}

func (nm *nemesis) kindOn(k string) bool {
	for _, x := range nm.kinds {
		if x == k {
			return true
		}
	}
	return false
}

func (nm *nemesis) counts() string {
	by := map[string]int{}
	for _, f := range nm.windows() {
		by[f.Kind]++
	}
	if len(nm.kinds) == 0 {
		return "none (SLUICE_CHAOS_FAULTS=off)"
	}
	var parts []string
	total := 0
	for _, k := range faultKinds {
		if strings.Contains(strings.Join(nm.kinds, " "), k) {
			parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
			total += by[k]
		}
	}
	return fmt.Sprintf("%s (%d in all)", strings.Join(parts, ", "), total)
}

// between returns a random duration in [lo, hi).
func (nm *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(nm.rng.Int64N(int64(hi-lo)))
}

func (nm *nemesis) run(ctx context.Context, t *testing.T) {
	if len(nm.kinds) == 0 {
		return
	}
	// Kinds are dealt from a shuffled deck, so a short run still sees each.
	var deck []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(nm.between(time.Second, 3*time.Second)):
		}
		if len(deck) == 0 {
			deck = append(deck, nm.kinds...)
			nm.rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		kind := deck[0]
		deck = deck[1:]
		n := nm.c.nodes[nm.rng.IntN(len(nm.c.nodes))]
		// The fault runs to its end even when the traffic has stopped, so
		// that every window is closed by its own repair.
		switch kind {
		case "kill":
			pause := nm.between(time.Second, 3*time.Second)
			w := nm.begin(kind, n)
			n.kill()
			time.Sleep(pause)
			if err := n.start(t, nm.c.bin); err != nil {
				t.Errorf("restarting %s after kill -9: %v", n.id, err)
			}
			nm.end(t, w)
		case "stop":
			d := nm.between(time.Second, 4*time.Second)
			w := nm.begin(kind, n)
			if err := n.signal(syscall.SIGSTOP); err != nil {
				t.Errorf("SIGSTOP %s: %v", n.id, err)
			}
			time.Sleep(d)
			if err := n.signal(syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %s: %v", n.id, err)
			}
			nm.end(t, w)
		case "partition":
			nm.cut(t, kind, n, nm.between(2*time.Second, 6*time.Second))
		case "freeze", "cutleader":
			// The leader, for longer than every timeout: a write
			// forwarded to it must be given up on, and sent to the next.
			if l, err := nm.c.leader(10 * time.Second); err == nil {
				n = l
			}
			if kind == "cutleader" {
				nm.cut(t, kind, n, 2*nm.c.apply)
				break
			}
			w := nm.begin(kind, n)
			if err := n.signal(syscall.SIGSTOP); err != nil {
				t.Errorf("SIGSTOP %s: %v", n.id, err)
			}
			time.Sleep(2 * nm.c.apply)
			if err := n.signal(syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %s: %v", n.id, err)
			}
			nm.end(t, w)
		case "raftcut":
			d := nm.between(nm.c.apply+time.Second, 2*nm.c.apply)
			w := nm.begin(kind, n)
			if err := nm.lab.raftCut(n, true); err != nil {
				t.Errorf("cutting %s's Raft traffic: %v", n.id, err)
			}
			time.Sleep(d)
			if err := nm.lab.raftCut(n, false); err != nil {
				t.Errorf("restoring %s's Raft traffic: %v", n.id, err)
			}
			nm.end(t, w)
		case "crashcall":
			w := nm.begin(kind, n)
			n.kill()
			if err := n.start(t, nm.c.bin); err != nil {
				t.Errorf("restarting %s after kill -9: %v", n.id, err)
			}
			// At once, while it replays its log: quota calls.
			for i := 0; i < 30; i++ {
				nm.qt.call(n, false)
			}
			nm.end(t, w)
		}
	}
}

// cut takes n off the bridge for d.
func (nm *nemesis) cut(t *testing.T, kind string, n *node, d time.Duration) {
	w := nm.begin(kind, n)
	if err := nm.lab.cut(n.idx+1, true); err != nil {
		t.Errorf("cutting off %s: %v", n.id, err)
	}
	time.Sleep(d)
	if err := nm.lab.cut(n.idx+1, false); err != nil {
		t.Errorf("reconnecting %s: %v", n.id, err)
	}
	nm.end(t, w)
}

// healAll makes sure every node runs, is continued and connected.
func (nm *nemesis) healAll(t *testing.T) {
	for _, n := range nm.c.nodes {
		if nm.lab != nil {
			if err := nm.lab.cut(n.idx+1, false); err != nil {
				t.Errorf("reconnecting %s: %v", n.id, err)
			}
			if nm.kindOn("raftcut") {
				if err := nm.lab.raftCut(n, false); err != nil {
					t.Errorf("restoring %s's Raft traffic: %v", n.id, err)
				}
			}
		}
		if !n.running() {
			if err := n.start(t, nm.c.bin); err != nil {
				t.Errorf("starting %s: %v", n.id, err)
			}
			continue
		}
		n.signal(syscall.SIGCONT)
	}
}
