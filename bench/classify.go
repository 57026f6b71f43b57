package main

import (
	"bytes"
	"fmt"
)

// outcome is what one reply says about its request.
type outcome uint8

const (
	outAdmitted outcome = iota // RL.ACQUIRE allowed=1, CL.THROTTLE limited=0
	outDenied                  // RL.ACQUIRE allowed=0, CL.THROTTLE limited=1
	outDegraded                // RL.ACQUIRE allowed=2: admitted over a degrade limit
	outOK                      // not a limiting decision: +OK of a write, INCR's integer
	outError                   // an error reply, or a reply of the wrong shape
	numOutcomes
)

// classify reads rp as the reply to a command of kind k. For outError it
// also returns the text to count: the server's error text (valid until the
// next read), or a description of the unexpected reply.
func classify(k kind, rp *reply) (outcome, []byte) {
	if rp.typ == '-' {
		return outError, rp.text
	}
	switch k {
	case kindAcquire, kindBudget, kindEvalSHA:
		// [allowed, remaining, limit, retry_after_ms, reset_after_ms, limited_by]
		if rp.typ == '*' && rp.n == 6 && rp.firstTyp == ':' {
			switch rp.first {
			case 1:
				return outAdmitted, nil
			case 0:
				return outDenied, nil
			case 2:
				return outDegraded, nil
			}
		}
	case kindThrottle:
		// [limited, limit, remaining, retry_after_s, reset_after_s]
		if rp.typ == '*' && rp.n == 5 && rp.firstTyp == ':' {
			switch rp.first {
			case 0:
				return outAdmitted, nil
			case 1:
				return outDenied, nil
			}
		}
	case kindBudgetWrite:
		if rp.typ == '+' { // OK, or OK WARN overcommitted …
			return outOK, nil
		}
	case kindIncr:
		if rp.typ == ':' {
			return outOK, nil
		}
	}
	return outError, []byte(unexpected(k, rp))
}

// unexpected describes a reply of the wrong shape for kind k; it runs only
// on that rare path, so it may allocate.
func unexpected(k kind, rp *reply) string {
	var got string
	switch rp.typ {
	case '+':
		got = fmt.Sprintf("status %q", rp.text)
	case ':':
		got = fmt.Sprintf("integer %d", rp.n)
	case '$':
		got = fmt.Sprintf("bulk string of %d bytes", rp.n)
	case '*':
		got = fmt.Sprintf("array of %d", rp.n)
		if rp.n > 0 {
			if rp.firstTyp == ':' {
				got += fmt.Sprintf(" starting with %d", rp.first)
			} else {
				got += fmt.Sprintf(" starting with a %q value", rp.firstTyp)
			}
		}
	}
	want := map[kind]string{
		kindAcquire: "a six-element array starting with 0, 1 or 2", kindBudget: "a six-element array starting with 0, 1 or 2",
		kindEvalSHA: "a six-element array starting with 0, 1 or 2", kindThrottle: "a five-element array starting with 0 or 1",
		kindBudgetWrite: "+OK", kindIncr: "an integer",
	}[k]
	return fmt.Sprintf("unexpected reply to %s: %s (want %s)", k, got, want)
}

// maxErrorTexts bounds the distinct error texts (and codes) one
// connection keeps; later ones are counted under otherErrors. Texts often
// carry a key or path, so without a bound they could grow with the run.
const (
	maxErrorTexts = 64
	otherErrors   = "(other error texts)"
)

// tally counts distinct byte strings, at most max of them; the rest are
// counted under otherErrors. Counting a string already seen allocates
// nothing.
type tally struct {
	m   map[string]*int64
	max int
}

func newTally(max int) tally { return tally{m: make(map[string]*int64), max: max} }

func (t tally) add(b []byte) {
	if p, ok := t.m[string(b)]; ok {
		*p++
		return
	}
	key := otherErrors
	if len(t.m) < t.max-1 {
		key = string(b)
	}
	if p, ok := t.m[key]; ok {
		*p++
		return
	}
	one := int64(1)
	t.m[key] = &one
}

// argsSuffix starts the part of Redis's "unknown command" error that
// quotes the arguments; cut off, the texts of one unknown command agree
// whatever the key.
var argsSuffix = []byte(", with args beginning with:")

// groupText returns the part of an error text that is counted as distinct.
func groupText(text []byte) []byte {
	if i := bytes.Index(text, argsSuffix); i >= 0 {
		return text[:i]
	}
	return text
}

// errorCode is the first word of an error text: ERR, NOBUDGET, WRONGPASS…
func errorCode(text []byte) []byte {
	if i := bytes.IndexByte(text, ' '); i >= 0 {
		return text[:i]
	}
	return text
}
