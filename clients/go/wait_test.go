package client

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// deadlineDoer records the deadline each command was given.
type deadlineDoer struct{ left []time.Duration }

func (d *deadlineDoer) Do(ctx context.Context, args ...any) *redis.Cmd {
	dl, _ := ctx.Deadline()
	d.left = append(d.left, time.Until(dl))
	cmd := redis.NewCmd(ctx, args...)
	if args[0] == "RL.RESERVE" {
		cmd.SetVal([]any{int64(1), int64(0), int64(1), int64(0), int64(1000), "k", "id"})
	} else {
		cmd.SetVal([]any{int64(1), int64(0), int64(1), int64(0), int64(1000), "k"})
	}
	return cmd
}

func (d *deadlineDoer) contextTimeouts() bool { return true }

// A call the server may hold (Wait) has the client's Timeout on top of the
// wait, so that a held reply is not cut at 50 ms.
func TestWaitLengthensTheDeadline(t *testing.T) {
	d := &deadlineDoer{}
	c := New(d, Timeout(50*time.Millisecond))
	c.AcquireInline(bg, "k", Limit{Rate: 1})
	c.AcquireInline(bg, "k", Limit{Rate: 1}, Wait(2*time.Second))
	c.ReserveInline(bg, "k", &Limit{Rate: 1}, 1, Wait(time.Second))
	c.AcquireInline(bg, "k", Limit{Rate: 1}, Wait(2*time.Second), DryRun()) // answered at once
	want := []time.Duration{50 * time.Millisecond, 2050 * time.Millisecond, 1050 * time.Millisecond, 50 * time.Millisecond}
	for i, w := range want {
		if got := d.left[i]; got > w || got < w-45*time.Millisecond {
			t.Errorf("call %d: %v left, want %v", i, got, w)
		}
	}
}
