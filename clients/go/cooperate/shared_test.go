package cooperate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	client "github.com/sluice-rl/sluice/clients/go"
)

// sluiceFake answers RL.RESERVE with the reply its reserve function
// gives (admitted, with id "r1", by default), and records every command.
type sluiceFake struct {
	mu      sync.Mutex
	cmds    [][]any
	reserve func(args []any) (any, error)
}

func (f *sluiceFake) Do(ctx context.Context, args ...any) *redis.Cmd {
	f.mu.Lock()
	f.cmds = append(f.cmds, args)
	f.mu.Unlock()
	cmd := redis.NewCmd(ctx, args...)
	switch args[0] {
	case "RL.RESERVE":
		if f.reserve != nil {
			v, err := f.reserve(args)
			if err != nil {
				cmd.SetErr(err)
			} else {
				cmd.SetVal(v)
			}
			return cmd
		}
		cmd.SetVal([]any{int64(1), int64(3), int64(5), int64(0), int64(200), args[1], "r1"})
	case "RL.SETTLE":
		cmd.SetVal([]any{int64(1), int64(0), int64(5), int64(0), int64(500), "k"})
	case "RL.RELEASE":
		cmd.SetVal(int64(1))
	default:
		cmd.SetErr(fmt.Errorf("unexpected %v", args))
	}
	return cmd
}

func (f *sluiceFake) sent() [][]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]any(nil), f.cmds...)
}

func TestSharedReservesAndSettles(t *testing.T) {
	var status int
	var retry string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if retry != "" {
			w.Header().Set("Retry-After", retry)
		}
		w.WriteHeader(status)
	}))
	defer upstream.Close()
	host := upstream.Listener.Addr().String()
	key := "cooperate:" + host
	for _, c := range []struct {
		name   string
		status int
		retry  string
		want   []any // the settle
	}{
		{"ok", 200, "", []any{"RL.SETTLE", "r1", "ACTUAL", int64(1)}},
		// 3 left, and 3 s at 10/s: 1 + 3 + 30.
		{"429 with Retry-After", 429, "3", []any{"RL.SETTLE", "r1", "ACTUAL", int64(34)}},
		{"503 with Retry-After", 503, "1", []any{"RL.SETTLE", "r1", "ACTUAL", int64(14)}},
		{"429 without", 429, "", []any{"RL.SETTLE", "r1", "ACTUAL", int64(1)}},
	} {
		f := &sluiceFake{}
		sh := &Shared{Client: client.New(f), Limit: client.Limit{Rate: 10, Burst: 5}, MaxWait: 2 * time.Second}
		status, retry = c.status, c.retry
		resp, err := (&http.Client{Transport: sh}).Get(upstream.URL)
		if err != nil || resp.StatusCode != c.status {
			t.Fatalf("%s: %v %v", c.name, resp, err)
		}
		resp.Body.Close()
		sh.wg.Wait()
		want := [][]any{{"RL.RESERVE", key, "RATE", int64(10), "BURST", int64(5), "COST", int64(1), "WAIT", int64(2000)}, c.want}
		if got := f.sent(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", c.name, got, want)
		}
	}
}

func TestSharedRefusedIsNotSent(t *testing.T) {
	sent := 0
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent++ }))
	defer upstream.Close()
	f := &sluiceFake{reserve: func(args []any) (any, error) {
		return []any{int64(0), int64(0), int64(5), int64(2500), int64(3000), args[1], ""}, nil
	}}
	sh := &Shared{Client: client.New(f), Limit: client.Limit{Rate: 10}, Key: func(*http.Request) string { return "partner-api" }}
	_, err := (&http.Client{Transport: sh}).Get(upstream.URL)
	var le *LimitedError
	if !errors.As(err, &le) || le.Wait != 2500*time.Millisecond || le.Policy != "partner-api" || sent != 0 {
		t.Fatalf("%v (%d sent)", err, sent)
	}
	// MaxWait 0 sends no WAIT.
	if got := f.sent()[0]; len(got) != 6 || got[1] != "partner-api" {
		t.Fatalf("%v", got)
	}
}

func TestSharedReleasesWhatWasNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	f := &sluiceFake{}
	sh := &Shared{Client: client.New(f), Limit: client.Limit{Rate: 10}}
	if _, err := (&http.Client{Transport: sh}).Get(url); err == nil {
		t.Fatal("sent to a closed port")
	}
	sh.wg.Wait()
	if got := f.sent(); len(got) != 2 || !reflect.DeepEqual(got[1], []any{"RL.RELEASE", "r1"}) {
		t.Fatalf("%v", got)
	}
}

func TestSharedWithoutSluice(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	f := &sluiceFake{reserve: func([]any) (any, error) { return nil, context.DeadlineExceeded }}
	sh := &Shared{Client: client.New(f), Limit: client.Limit{Rate: 10}}
	hc := &http.Client{Transport: sh}
	if _, err := hc.Get(upstream.URL); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("fail closed: %v", err)
	}
	sh.FailOpen = true
	resp, err := hc.Get(upstream.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("fail open: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestBackoffFromHeaders(t *testing.T) {
	now := time.Unix(1e9, 0)
	for _, c := range []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{header("Retry-After", "7"), 7 * time.Second, true},
		{header("RateLimit-Policy", `"burst";q=10;w=1`, "RateLimit", `"burst";r=0;t=2`), 2 * time.Second, true},
		{header("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "4"), 4 * time.Second, true},
		{header("X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "4"), 0, false},
		{header(), 0, false},
	} {
		if got, ok := backoff(c.h, now); got != c.want || ok != c.ok {
			t.Errorf("%v: %v %v, want %v %v", c.h, got, ok, c.want, c.ok)
		}
	}
}

// A request's deadline leaves it half its time: WAIT is at most the other
// half.
func TestSharedWaitWithinTheDeadline(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	f := &sluiceFake{}
	sh := &Shared{Client: client.New(f), Limit: client.Limit{Rate: 10}, MaxWait: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", upstream.URL, nil)
	resp, err := (&http.Client{Transport: sh}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sh.wg.Wait()
	got := f.sent()[0]
	if w, ok := got[len(got)-1].(int64); got[len(got)-2] != "WAIT" || !ok || w > 5000 || w < 4000 {
		t.Fatalf("%v", got)
	}
}
