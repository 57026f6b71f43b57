package engine

import (
	"time"

	"github.com/sluice-rl/sluice/protocol/window"
)

// ParseWindow parses a limit's window (window.Parse): a word such as
// minute or whole numbers with units such as 250ms or 1h30m. It does not
// allocate. Range checks are the caller's (NewLimit takes 1ms to 3650d).
func ParseWindow(b []byte) (time.Duration, bool) { return window.Parse(b) }

// FormatWindow writes a window so that ParseWindow reads it back
// (window.Format).
func FormatWindow(d time.Duration) string { return window.Format(d) }
