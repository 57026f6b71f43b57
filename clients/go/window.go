package client

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/protocol/window"
)

// FormatWindow writes a window the way sluice reads it: the word second,
// minute, hour or day when d is exactly one of those, else each non-zero
// part of d largest first, without fractions: 250ms, 1h30m, 1s500ms, 2d,
// 1d12h. A d of zero or less is written as Go writes it ("0s"), which
// sluice refuses.
func FormatWindow(d time.Duration) string { return window.Format(d) }

// ParseWindow reads a window as sluice writes or reads one: a word
// (second, minute, hour, day, week) or a sequence such as 250ms, 1h30m, 7d
// or 2w.
func ParseWindow(s string) (time.Duration, error) {
	if d, ok := window.Parse([]byte(s)); ok && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("client: window %q is not second, minute, hour, day, week or a duration such as 250ms, 1h30m, 7d", s)
}
