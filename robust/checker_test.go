package robust

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Hand-made histories: the checker must accept what is legal and catch a
// stale read, a lost write and a bounced write.

func w(path string, v, call, ret int64, st opStatus) op {
	o := op{Kind: opWrite, Path: path, Value: v, Call: call, Return: ret, Status: st, Client: int(v)}
	if st == stFailed {
		o.Err = "TRYAGAIN no leader"
	}
	return o
}

func r(kind opKind, path string, v, call, ret int64) op {
	return op{Kind: kind, Path: path, Value: v, Call: call, Return: ret, Client: 1000 + int(call)}
}

func TestCheckerLinearizable(t *testing.T) {
	cases := []struct {
		name string
		ops  []op
		want porcupine.CheckResult
	}{
		{"sequential", []op{
			w("a", 1, 0, 10, stOK), r(opReadLin, "a", 1, 20, 30),
			w("a", 2, 40, 50, stOK), r(opReadLin, "a", 2, 60, 70),
		}, porcupine.Ok},
		{"initial value before any write", []op{
			r(opReadLin, "a", 0, 0, 5), w("a", 1, 10, 20, stOK), r(opReadFinal, "a", 1, 30, 40),
		}, porcupine.Ok},
		{"concurrent read may see either", []op{
			w("a", 1, 0, 10, stOK), w("a", 2, 20, 50, stOK), r(opReadLin, "a", 1, 25, 30), r(opReadLin, "a", 2, 31, 35),
		}, porcupine.Ok},
		{"stale read after an acknowledged write", []op{
			w("a", 1, 0, 10, stOK), w("a", 2, 20, 30, stOK), r(opReadLin, "a", 1, 40, 50),
		}, porcupine.Illegal},
		{"read goes back in time", []op{
			w("a", 1, 0, 10, stOK), w("a", 2, 20, 100, stOK), r(opReadLin, "a", 2, 30, 40), r(opReadLin, "a", 1, 50, 60),
		}, porcupine.Illegal},
		{"unknown write may apply late", []op{
			w("a", 1, 0, 10, stOK), w("a", 2, 20, 30, stUnknown), r(opReadLin, "a", 1, 40, 50), r(opReadFinal, "a", 2, 60, 70),
		}, porcupine.Ok},
		{"failed write may have applied", []op{
			w("a", 1, 0, 10, stOK), w("a", 2, 20, 30, stFailed), r(opReadFinal, "a", 2, 60, 70),
		}, porcupine.Ok},
		{"lost write seen by the final read", []op{
			w("a", 1, 0, 10, stOK), w("a", 2, 20, 30, stOK), r(opReadFinal, "a", 1, 40, 50),
		}, porcupine.Illegal},
		{"plain reads are not checked", []op{
			w("a", 1, 0, 10, stOK), w("a", 2, 20, 30, stOK), r(opReadPlain, "a", 1, 40, 50),
		}, porcupine.Ok},
		{"registers are independent", []op{
			w("a", 1, 0, 10, stOK), w("b", 2, 20, 30, stOK), r(opReadLin, "a", 1, 40, 50), r(opReadLin, "b", 2, 40, 50),
		}, porcupine.Ok},
		{"a value from another register", []op{
			w("a", 1, 0, 10, stOK), w("b", 2, 20, 30, stOK), r(opReadLin, "a", 2, 40, 50),
		}, porcupine.Illegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, viz, err := checkLinearizable(tc.ops, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if viz != "" {
				if _, err := os.Stat(viz); err != nil {
					t.Errorf("visualization %s: %v", viz, err)
				}
				os.RemoveAll(viz[:len(viz)-len("/linearizability.html")])
			}
			if res != tc.want {
				t.Fatalf("porcupine says %s, want %s", res, tc.want)
			}
			if res == porcupine.Illegal && viz == "" {
				t.Fatal("no visualization written for an illegal history")
			}
		})
	}
}

func TestCheckerDurability(t *testing.T) {
	ops := []op{
		w("a", 1, 0, 10, stOK),
		w("a", 2, 20, 30, stOK),
		w("a", 3, 25, 35, stUnknown),
		w("b", 4, 0, 10, stOK),
		w("c", 5, 0, 10, stOK),
		w("c", 6, 5, 15, stOK), // concurrent with 5: either may be last
		w("d", 7, 0, 10, stOK),
	}
	lost, corrupt := durability(ops, map[string]int64{"a": 1, "b": 4, "c": 5, "d": 0, "e": 99})
	// a=1 loses 2 (acked after 1 returned); d=0 loses 7; e=99 was never written.
	if len(lost) != 2 || lost[0].Value != 7 || lost[1].Value != 2 {
		t.Errorf("lost = %v, want writes 7 and 2", lost)
	}
	if len(corrupt) != 1 {
		t.Errorf("corrupt = %v, want e", corrupt)
	}
	// An unknown write overwriting the acknowledged ones is no loss.
	if lost, corrupt := durability(ops, map[string]int64{"a": 3, "b": 4, "c": 6, "d": 7}); len(lost)+len(corrupt) != 0 {
		t.Errorf("lost %v corrupt %v, want none", lost, corrupt)
	}
}

func TestCheckerStaleReads(t *testing.T) {
	ops := []op{
		w("a", 1, 0, 10, stOK),
		w("a", 2, 20, 30, stOK),
		r(opReadPlain, "a", 0, 5, 6),   // before any ack: fine
		r(opReadPlain, "a", 0, 12, 13), // after 1 acked: stale
		r(opReadPlain, "a", 1, 25, 26), // 2 not acked yet: fine
		r(opReadPlain, "a", 1, 40, 41), // 2 acked before: stale
		r(opReadPlain, "a", 2, 40, 41),
		r(opReadPlain, "a", 9, 40, 41), // never written
		r(opReadLin, "a", 1, 40, 41),   // not a plain read
	}
	stale, total, unknown := staleReads(ops)
	if stale != 2 || total != 6 || unknown != 1 {
		t.Errorf("stale %d total %d unknown %d, want 2 6 1", stale, total, unknown)
	}
}

func TestCheckerWriteErrors(t *testing.T) {
	at := func(node int, o op) op { o.Node = node; return o }
	faults := []fault{
		{Kind: "kill", Node: 0, Start: 100, End: 200},
		{Kind: "stop", Node: 1, Start: 300, End: 400},
		{Kind: "partition", Node: 2, Start: 390, End: 500},
	}
	ops := []op{
		at(0, w("a", 1, 150, 160, stFailed)),  // its node was killed: allowed
		at(1, w("a", 2, 150, 160, stFailed)),  // n1 killed, n2+n3 a quorum: violation
		at(1, w("a", 3, 50, 99, stFailed)),    // no fault: violation
		at(0, w("a", 4, 350, 395, stFailed)),  // n2 and n3 both faulted during the call: allowed
		at(0, w("a", 5, 350, 360, stUnknown)), // no reply, n1 and n3 a quorum: violation
		at(0, w("a", 6, 350, 360, stOK)),
		at(2, w("a", 7, 600, 610, stNotSent)), // never sent: not a write error
	}
	got := writeErrorsDuringQuorum(ops, faults, nil)
	if len(got) != 3 || got[0].Value != 2 || got[1].Value != 3 || got[2].Value != 5 {
		t.Errorf("got %v, want writes 2, 3 and 5", got)
	}

	// No leader known from 10 s to 16 s (a slow election), then none from
	// 30 s to 31 s; each write below was sent to a node under no fault.
	const s = int64(time.Second)
	leaderless := []fault{{Kind: "leaderless", Node: -1, Start: 10 * s, End: 16 * s}, {Kind: "leaderless", Node: -1, Start: 30 * s, End: 31 * s}}
	ops = []op{
		w("b", 1, 11*s, 16*s, stFailed),     // gave up while no leader was known: excused
		w("b", 2, 12*s, 17*s-s/2, stFailed), // gave up half a second after one was: excused (slack)
		w("b", 3, 30*s, 35*s, stFailed),     // a leader was known 4 s before it gave up: counted
		w("b", 4, 11*s, 16*s, stUnknown),    // no reply at all: counted
		w("b", 5, 20*s, 25*s, stFailed),     // no election near it: counted
		func() op { o := w("b", 6, 11*s, 16*s, stFailed); o.Err = "ERR bad"; return o }(), // not a retry reply: counted
	}
	got = writeErrorsDuringQuorum(ops, nil, leaderless)
	var vals []int64
	for _, o := range got {
		vals = append(vals, o.Value)
	}
	if fmt.Sprint(vals) != "[3 4 5 6]" {
		t.Errorf("counted writes %v, want [3 4 5 6]", vals)
	}
}
