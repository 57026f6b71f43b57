package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// kind is one sort of command the generator sends.
type kind uint8

const (
	kindAcquire     kind = iota // RL.ACQUIRE key:<n> RATE r BURST b [PER p] [ALGO a]
	kindThrottle                // CL.THROTTLE key:<n> burst rate period
	kindBudget                  // RL.ACQUIRE system/p<i>/t<j> KEY u<n>
	kindBudgetWrite             // RL.BUDGET SET system/p<i>/t<j> RATE n SCOPE user
	kindIncr                    // INCR counter:<n>, a baseline any Redis answers
	kindEvalSHA                 // EVALSHA sha 1 key:<n> rate burst, a scripted baseline
	numKinds
)

var kindNameList = [numKinds]string{"acquire", "throttle", "budget", "budget-write", "incr", "evalsha"}

func (k kind) String() string {
	if k < numKinds {
		return kindNameList[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

func kindNames() []string { return kindNameList[:] }

// maxWeight bounds one weight so that the sum of all fits an int easily.
const maxWeight = 1_000_000

// Mix is the relative weight of each kind in the generated traffic.
type Mix [numKinds]int

// Has reports whether k has a positive weight.
func (m Mix) Has(k kind) bool { return m[k] > 0 }

// HasBudget reports whether the run needs the budget tree loaded.
func (m Mix) HasBudget() bool { return m.Has(kindBudget) || m.Has(kindBudgetWrite) }

// String renders the mix in the form parseMix reads, kinds with weight 0
// left out.
func (m Mix) String() string {
	var parts []string
	for k := kind(0); k < numKinds; k++ {
		if m[k] > 0 {
			parts = append(parts, k.String()+"="+strconv.Itoa(m[k]))
		}
	}
	return strings.Join(parts, ",")
}

// parseMix reads "kind=weight,…" such as "acquire=90,throttle=5,budget=5".
// Weights are relative; a kind may appear once; at least one weight must
// be positive.
func parseMix(s string) (Mix, error) {
	var m Mix
	var seen [numKinds]bool
	total := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, w, ok := strings.Cut(part, "=")
		if !ok {
			return m, fmt.Errorf("--mix: %q is not kind=weight (kinds: %s)", part, strings.Join(kindNames(), ", "))
		}
		k, found := kind(0), false
		for i, n := range kindNameList {
			if n == strings.TrimSpace(name) {
				k, found = kind(i), true
			}
		}
		if !found {
			return m, fmt.Errorf("--mix: unknown kind %q (kinds: %s)", name, strings.Join(kindNames(), ", "))
		}
		if seen[k] {
			return m, fmt.Errorf("--mix: %s appears twice", k)
		}
		seen[k] = true
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 0 || n > maxWeight {
			return m, fmt.Errorf("--mix: weight of %s must be an integer between 0 and %d (got %q)", k, maxWeight, w)
		}
		m[k] = n
		total += n
	}
	if total == 0 {
		return m, fmt.Errorf("--mix: every weight is 0 (%q); give at least one kind a positive weight", s)
	}
	return m, nil
}

// picker draws kinds in proportion to a Mix.
type picker struct {
	kinds  []kind // kinds with a positive weight
	cum    []int  // cumulative weights, parallel to kinds
	total  int
	single bool // one kind only: no draw needed
}

func newPicker(m Mix) picker {
	var p picker
	for k := kind(0); k < numKinds; k++ {
		if m[k] > 0 {
			p.total += m[k]
			p.kinds = append(p.kinds, k)
			p.cum = append(p.cum, p.total)
		}
	}
	p.single = len(p.kinds) == 1
	return p
}

// pick returns the next kind, drawing from rng.
func (p *picker) pick(rng *rand.Rand) kind {
	if p.single {
		return p.kinds[0]
	}
	x := rng.IntN(p.total)
	for i, c := range p.cum {
		if x < c {
			return p.kinds[i]
		}
	}
	return p.kinds[len(p.kinds)-1]
}
