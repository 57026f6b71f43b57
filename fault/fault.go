// Package fault is the one error type of sluice's service core: a reply
// code (the first word of a Redis error: ERR, NOBUDGET, BUDGET, TRYAGAIN,
// CLUSTERDOWN, …) and a message. Every package below the protocol fronts
// returns these; the fronts decide how a code travels (a RESP error, an
// HTTP status, a gRPC code).
package fault

import (
	"errors"
	"fmt"
)

// Error is a refusal with a reply code. Retry marks one that a client (or
// a node forwarding a write) may repeat as it is.
type Error struct {
	Code, Msg string
	Retry     bool
}

func (e *Error) Error() string { return e.Code + " " + e.Msg }

// New returns an error with code and a formatted message.
func New(code, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// Code returns err's reply code: its own for an *Error, else "ERR".
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return "ERR"
}

// Retryable reports whether err may be repeated as it is.
func Retryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retry
}

// Printable keeps a client's bytes on one line of an error message, and
// short: at most 64 bytes, control characters and quotes as '?'.
func Printable(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	out := []byte(string(b))
	for i, c := range out {
		if c < 0x20 || c == 0x7f || c == '\'' {
			out[i] = '?'
		}
	}
	return string(out)
}
