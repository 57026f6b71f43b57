package main

import "strconv"

// encoder writes the generator's commands. Each kind is a fixed head
// (array header and leading arguments), a key (or budget path) derived from
// the drawn key number, and a fixed tail (then, for budget, the subject),
// so a command costs a few copies and no allocation.
type encoder struct {
	head, tail        [numKinds][]byte
	prefix            [numKinds]string // of the key argument
	partners, tenants int
	scratch           []byte // the budget path being built
}

// newEncoder prepares the fixed parts of every kind from c.
func newEncoder(c *Config) *encoder {
	e := &encoder{partners: c.Partners, tenants: c.Tenants}
	for k := range e.prefix {
		e.prefix[k] = "key:"
	}
	// As redis-benchmark's INCR: counters must not share names with the
	// hashes of a Lua limiter measured on the same Redis.
	e.prefix[kindIncr] = "counter:"
	e.prefix[kindBudget] = budgetUserLabel // the subject, after KEY
	rate, burst := strconv.FormatInt(c.Rate, 10), strconv.FormatInt(c.Burst, 10)

	acq := []string{"RATE", rate, "BURST", burst}
	if c.Per != "" {
		acq = append(acq, "PER", c.Per)
	}
	if c.Algo != "" {
		acq = append(acq, "ALGO", c.Algo)
	}
	e.set(kindAcquire, []string{"RL.ACQUIRE"}, acq, 0)
	// redis-cell's argument order: key max_burst count_per_period period.
	e.set(kindThrottle, []string{"CL.THROTTLE"}, []string{burst, rate, strconv.FormatInt(c.ThrottlePer, 10)}, 0)
	// The subject (u<n>) follows the tail; see append.
	e.set(kindBudget, []string{"RL.ACQUIRE"}, []string{"KEY"}, 1)
	// SCOPE user rewrites the tenant as imported, so that the tree stays the
	// same whether SET replaces a node's configuration or merges into it.
	e.set(kindBudgetWrite, []string{"RL.BUDGET", "SET"}, []string{"RATE", strconv.Itoa(tenantRate), "SCOPE", tenantScope}, 0)
	e.set(kindIncr, []string{"INCR"}, nil, 0)
	e.set(kindEvalSHA, []string{"EVALSHA", c.EvalSHA, "1"}, []string{rate, burst}, 0)
	return e
}

// set stores kind k's head (the array header counts the variable argument
// and extra trailing variable arguments) and tail.
func (e *encoder) set(k kind, lead, trail []string, extra int) {
	h := appendHeader(nil, '*', len(lead)+1+len(trail)+extra)
	for _, a := range lead {
		h = appendBulk(h, a)
	}
	var t []byte
	for _, a := range trail {
		t = appendBulk(t, a)
	}
	e.head[k], e.tail[k] = h, t
}

// append appends the command of kind k for key number n.
func (e *encoder) append(b []byte, k kind, n uint64) []byte {
	b = append(b, e.head[k]...)
	switch k {
	case kindBudget, kindBudgetWrite:
		p, t := budgetTarget(n, e.partners, e.tenants)
		s := append(e.scratch[:0], treeRoot+"/p"...)
		s = strconv.AppendInt(s, int64(p), 10)
		s = append(s, "/t"...)
		s = strconv.AppendInt(s, int64(t), 10)
		e.scratch = s
		b = appendHeader(b, '$', len(s))
		b = append(b, s...)
		b = append(b, '\r', '\n')
	default:
		b = appendBulkNum(b, e.prefix[k], n)
	}
	b = append(b, e.tail[k]...)
	if k == kindBudget {
		b = appendBulkNum(b, e.prefix[k], n)
	}
	return b
}
