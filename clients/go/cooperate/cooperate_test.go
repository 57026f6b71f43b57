package cooperate

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/protocol/ratehdr"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParse(t *testing.T) {
	now := time.Unix(1e9, 0)
	// What sluice sends (package ratehdr, as httplimit and the HTTP API do).
	sl := http.Header{}
	ratehdr.Each(10, 7, false, 300*time.Millisecond, time.Second, sl.Set)
	for _, c := range []struct {
		name string
		h    http.Header
		want []State
	}{
		{"sluice", sl, []State{{Policy: "burst", Limit: 10, Window: time.Second, Remaining: 7, Reset: time.Second}}},
		{"two policies", header("RateLimit-Policy", `"sec";q=10;w=1, "day";q=1000;w=86400`, "RateLimit", `"day";r=5;t=3600, "sec";r=9;t=1`),
			[]State{{Policy: "day", Limit: 1000, Window: 24 * time.Hour, Remaining: 5, Reset: time.Hour},
				{Policy: "sec", Limit: 10, Window: time.Second, Remaining: 9, Reset: time.Second}}},
		{"older draft", header("RateLimit-Policy", "100;w=60", "RateLimit", "limit=100, remaining=50, reset=30"),
			[]State{{Limit: 100, Window: time.Minute, Remaining: 50, Reset: 30 * time.Second}}},
		{"older draft fields", header("RateLimit-Limit", "100", "RateLimit-Remaining", "3", "RateLimit-Reset", "20"),
			[]State{{Limit: 100, Remaining: 3, Reset: 20 * time.Second}}},
		{"x-ratelimit, unix reset", header("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Reset", "1000000600"),
			[]State{{Limit: 5000, Remaining: 4999, Reset: 10 * time.Minute}}},
		{"nothing readable", header("RateLimit", `"x";r=oops`, "X-RateLimit-Remaining", "-3"), []State{{Policy: "x", Remaining: -1}}},
	} {
		if got := Parse(c.h, now); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
	if d, ok := RetryAfter(header("Retry-After", "3"), now); !ok || d != 3*time.Second {
		t.Errorf("Retry-After 3: %v %v", d, ok)
	}
	if d, ok := RetryAfter(header("Retry-After", now.Add(90*time.Second).UTC().Format(http.TimeFormat)), now); !ok || d != 90*time.Second {
		t.Errorf("Retry-After date: %v %v", d, ok)
	}
	if _, ok := RetryAfter(header("Retry-After", "soon"), now); ok {
		t.Error("Retry-After soon read")
	}
}

// limited is a test server that admits rate requests a second (token
// bucket, burst burst) and sends the headers sluice sends.
type limited struct {
	mu              sync.Mutex
	tokens, rate    float64
	burst           int64
	at              time.Time
	admitted, shown int
	refused         int
}

func (l *limited) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.at.IsZero() {
		l.at, l.tokens = now, float64(l.burst)
	}
	l.tokens = min(float64(l.burst), l.tokens+now.Sub(l.at).Seconds()*l.rate)
	l.at = now
	ok := l.tokens >= 1
	if ok {
		l.tokens--
		l.admitted++
	} else {
		l.refused++
	}
	reset := time.Duration((float64(l.burst) - l.tokens) / l.rate * float64(time.Second))
	ratehdr.Each(l.burst, int64(l.tokens), false, reset, time.Second, w.Header().Set)
	if !ok {
		retry := time.Duration((1 - l.tokens) / l.rate * float64(time.Second))
		v, _ := ratehdr.RetryAfter(retry)
		w.Header().Set("Retry-After", v)
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

func TestPacingIsNeverRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 2 s")
	}
	srv := &limited{rate: 50, burst: 50}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	hc := &http.Client{Transport: &Transport{MaxWait: time.Second}}
	end := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				resp, err := hc.Get(ts.URL)
				if err != nil {
					var le *LimitedError
					if !errors.As(err, &le) {
						t.Error(err)
						return
					}
					continue
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.refused != 0 {
		t.Fatalf("%d refused, %d admitted", srv.refused, srv.admitted)
	}
	// 50 + 2 s × 50/s may be admitted; a loaded machine loses some.
	if srv.admitted < 100 {
		t.Fatalf("%d admitted of up to 150", srv.admitted)
	}
}

func TestFailFastAndRetryAfter(t *testing.T) {
	var status int
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(status)
	}))
	defer ts.Close()
	now := time.Unix(1e9, 0)
	tr := &Transport{Now: func() time.Time { return now }, MaxWait: time.Minute}
	hc := &http.Client{Transport: tr}
	status = http.StatusTooManyRequests
	resp, err := hc.Get(ts.URL)
	if err != nil || resp.StatusCode != 429 {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	// Held for 30 s plus up to 1 s of jitter: beyond a 10 s deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL, nil)
	_, err = hc.Do(req)
	var le *LimitedError
	if !errors.As(err, &le) || le.Wait < 30*time.Second || le.Wait > 31*time.Second {
		t.Fatalf("after a 429: %v", err)
	}
	tr.MaxWait = 0
	now = now.Add(29 * time.Second)
	if _, err = hc.Get(ts.URL); !errors.As(err, &le) {
		t.Fatalf("MaxWait 0 fails fast: %v", err)
	}
	now = now.Add(2 * time.Second)
	status = http.StatusOK
	if resp, err = hc.Get(ts.URL); err != nil {
		t.Fatalf("after the Retry-After: %v", err)
	}
	resp.Body.Close()
}

func TestWindowModelSpreadsTheRest(t *testing.T) {
	now := time.Unix(1e9, 0)
	b := &bucket{}
	b.update(State{Limit: 100, Remaining: 4, Reset: 10 * time.Second}, 0, now)
	if w := b.need(now); w != 0 {
		t.Fatalf("first: %v", w)
	}
	b.take(now)
	// 3 left for 10 s: one every 2.5 s.
	if w := b.need(now); w != 2500*time.Millisecond {
		t.Fatalf("spread: %v", w)
	}
	b.update(State{Limit: 100, Remaining: 0, Reset: 10 * time.Second}, 0, now)
	if w := b.need(now); w != 10*time.Second {
		t.Fatalf("none left: %v", w)
	}
	if w := b.need(now.Add(10 * time.Second)); w != 0 {
		t.Fatalf("after the reset: %v", w)
	}
}
