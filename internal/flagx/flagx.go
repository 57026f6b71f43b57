// Package flagx holds the range-checked flag.Value types of sluice's
// command-line tools (the bench tool, the accuracy benchmark): each
// refuses a value outside its range with an error that names the range
// (the flag package adds the flag's name).
package flagx

import (
	"fmt"
	"strconv"
)

// Int is an integer flag with an inclusive range. Given, if not nil, is set
// when the flag appears.
type Int[T int | int64] struct {
	P      *T
	Lo, Hi int64
	Given  *bool
}

func (f Int[T]) String() string {
	if f.P == nil {
		return ""
	}
	return strconv.FormatInt(int64(*f.P), 10)
}

func (f Int[T]) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < f.Lo || n > f.Hi {
		return fmt.Errorf("must be an integer between %d and %d", f.Lo, f.Hi)
	}
	*f.P = T(n)
	if f.Given != nil {
		*f.Given = true
	}
	return nil
}

// Uint is an unsigned integer flag with an inclusive range.
type Uint struct {
	P      *uint64
	Lo, Hi uint64
}

func (f Uint) String() string {
	if f.P == nil {
		return ""
	}
	return strconv.FormatUint(*f.P, 10)
}

func (f Uint) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < f.Lo || n > f.Hi {
		return fmt.Errorf("must be an integer between %d and %d", f.Lo, f.Hi)
	}
	*f.P = n
	return nil
}

// Float is a number flag in (Lo, Hi].
type Float struct {
	P      *float64
	Lo, Hi float64
}

func (f Float) String() string {
	if f.P == nil {
		return ""
	}
	return strconv.FormatFloat(*f.P, 'g', -1, 64)
}

func (f Float) Set(s string) error {
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || !(n > f.Lo) || n > f.Hi {
		return fmt.Errorf("must be a number greater than %g and at most %g", f.Lo, f.Hi)
	}
	*f.P = n
	return nil
}
