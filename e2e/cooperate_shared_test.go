package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sl "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/clients/go/cooperate"
	"github.com/sluice-rl/sluice/protocol/ratehdr"
)

// The processes of TestSharedBudgetAcrossProcesses are this test binary
// run again with SLUICE_SHARED_CHILD set: init runs before TestMain (which
// would build sluice) and never returns.
func init() {
	if os.Getenv("SLUICE_SHARED_CHILD") == "1" {
		os.Exit(sharedChild())
	}
}

// sharedLimit is the budget every process reserves from: the upstream's
// rate exactly, and a burst of 1 of the upstream's 10, so that a request
// may reach the upstream's handler up to (10-1)/10 = 0.9 s after sluice
// released it and still find a token there (cooperate.Shared's
// documentation): a loaded machine that holds a process back that long
// does not turn into 429s. It costs 9 of the ~310 requests the upstream
// allows in 30 s.
var sharedLimit = sl.Limit{Rate: 10, Burst: 1}

// sharedReport is what a process prints when its time is up.
type sharedReport struct {
	OK, Refused, Limited, Errors int
	FirstError                   string
}

// sharedChild sends to SLUICE_SHARED_URL through cooperate.Shared, from
// SLUICE_SHARED_WORKERS goroutines, as fast as the budget at
// SLUICE_SHARED_NODES lets it, until SLUICE_SHARED_UNTIL (Unix
// nanoseconds), and prints a sharedReport.
func sharedChild() int {
	until, err := strconv.ParseInt(os.Getenv("SLUICE_SHARED_UNTIL"), 10, 64)
	workers, err2 := strconv.Atoi(os.Getenv("SLUICE_SHARED_WORKERS"))
	if err != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "bad SLUICE_SHARED_UNTIL or SLUICE_SHARED_WORKERS")
		return 2
	}
	nodes, err := sl.NewNodes(sl.NodesConfig{Addrs: strings.Split(os.Getenv("SLUICE_SHARED_NODES"), ",")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer nodes.Close()
	// A loaded machine must not turn into failures: a generous deadline
	// on top of the wait.
	sh := &cooperate.Shared{Client: sl.New(nodes, sl.Timeout(2*time.Second)), Limit: sharedLimit, MaxWait: 3 * time.Second,
		Base: stamped{http.DefaultTransport}}
	hc := &http.Client{Transport: sh}
	url := os.Getenv("SLUICE_SHARED_URL")
	var mu sync.Mutex
	var rep sharedReport
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().UnixNano() < until {
				resp, err := hc.Get(url)
				var le *cooperate.LimitedError
				mu.Lock()
				switch {
				case errors.As(err, &le):
					rep.Limited++
				case err != nil:
					rep.Errors++
					if rep.FirstError == "" {
						rep.FirstError = err.Error()
					}
				case resp.StatusCode == http.StatusTooManyRequests:
					rep.Refused++
				default:
					rep.OK++
				}
				mu.Unlock()
				if resp != nil {
					resp.Body.Close()
				}
				if le != nil {
					time.Sleep(le.Wait) // as told: sluice's own figure
				}
			}
		}()
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

// stamped sends each request with the time it was sent, X-Sent-At (Unix
// nanoseconds), for the upstream to report how late requests came.
type stamped struct{ http.RoundTripper }

func (s stamped) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Sent-At", strconv.FormatInt(time.Now().UnixNano(), 10))
	return s.RoundTripper.RoundTrip(r)
}

// tokenUpstream is the limited upstream: a token bucket of rate 10/s and
// burst 10, full at the start, refilled continuously (tokens = min(10,
// tokens + 10·elapsed)); a request that finds a whole token takes it and
// gets 200, any other gets 429 with Retry-After and the headers sluice
// sends. It records when the first and the last request came.
type tokenUpstream struct {
	mu                sync.Mutex
	tokens, rate      float64
	burst             int64
	at, first, last   time.Time
	admitted, refused int
	maxLate           time.Duration // the longest from X-Sent-At to the handler
	refusals          []string      // the first few, for the log
}

func (u *tokenUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	if u.first.IsZero() {
		u.first = now
	}
	u.last = now
	if sent, err := strconv.ParseInt(r.Header.Get("X-Sent-At"), 10, 64); err == nil {
		u.maxLate = max(u.maxLate, now.Sub(time.Unix(0, sent)))
	}
	u.tokens = min(float64(u.burst), u.tokens+now.Sub(u.at).Seconds()*u.rate)
	u.at = now
	ok := u.tokens >= 1
	if ok {
		u.tokens--
		u.admitted++
	} else {
		u.refused++
		if len(u.refusals) < 10 {
			sent, _ := strconv.ParseInt(r.Header.Get("X-Sent-At"), 10, 64)
			u.refusals = append(u.refusals, fmt.Sprintf("at +%v, %.2f tokens, sent %v before",
				now.Sub(u.first).Round(time.Millisecond), u.tokens, now.Sub(time.Unix(0, sent)).Round(time.Millisecond)))
		}
	}
	reset := time.Duration((float64(u.burst) - u.tokens) / u.rate * float64(time.Second))
	ratehdr.Each(u.burst, int64(u.tokens), false, reset, time.Second, w.Header().Set)
	if !ok {
		v, _ := ratehdr.RetryAfter(time.Duration((1 - u.tokens) / u.rate * float64(time.Second)))
		w.Header().Set("Retry-After", v)
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// Two and then four processes, each sending as fast as one sluice budget
// lets it from three goroutines, to one upstream limited to 10/s, for 30 s
// each: no 429, and at least 90 % of what the upstream's bucket allowed
// between the first request and the last (its burst, 10, plus 10 a
// second) was used (issue #39, done-when 2).
func TestSharedBudgetAcrossProcesses(t *testing.T) {
	p := single(t)
	for _, procs := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d processes", procs), func(t *testing.T) {
			u := &tokenUpstream{rate: 10, burst: 10, tokens: 10, at: time.Now()}
			ts := httptest.NewServer(u)
			defer ts.Close()
			const run = 30 * time.Second
			until := time.Now().Add(run)
			var outs, stderrs []*bytes.Buffer
			var cmds []*exec.Cmd
			for i := 0; i < procs; i++ {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "SLUICE_SHARED_CHILD=1", "SLUICE_SHARED_NODES="+p.Resp,
					"SLUICE_SHARED_URL="+ts.URL, "SLUICE_SHARED_WORKERS=3",
					"SLUICE_SHARED_UNTIL="+strconv.FormatInt(until.UnixNano(), 10))
				out, errs := &bytes.Buffer{}, &bytes.Buffer{}
				cmd.Stdout, cmd.Stderr = out, errs
				stderrs = append(stderrs, errs)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				outs, cmds = append(outs, out), append(cmds, cmd)
			}
			var failed atomic.Bool
			var total sharedReport
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					failed.Store(true)
					t.Errorf("process %d: %v\n%s%s", i, err, outs[i], stderrs[i])
					continue
				}
				var rep sharedReport
				if err := json.Unmarshal(outs[i].Bytes(), &rep); err != nil {
					t.Fatalf("process %d's report: %v\n%s%s", i, err, outs[i], stderrs[i])
				}
				t.Logf("process %d: %+v", i, rep)
				if errs := strings.TrimSpace(stderrs[i].String()); errs != "" {
					t.Logf("process %d logged:\n%s", i, errs)
				}
				total.OK += rep.OK
				total.Refused += rep.Refused
				total.Limited += rep.Limited
				total.Errors += rep.Errors
			}
			if failed.Load() {
				t.FailNow()
			}
			u.mu.Lock()
			defer u.mu.Unlock()
			span := u.last.Sub(u.first)
			capacity := float64(u.burst) + u.rate*span.Seconds()
			used := float64(u.admitted) / capacity
			t.Logf("%d processes: upstream admitted %d, refused %d in %v: %.1f %% of its capacity %.0f; clients: %+v; requests reached the upstream's handler up to %v after they were sent",
				procs, u.admitted, u.refused, span.Round(time.Millisecond), 100*used, capacity, total, u.maxLate.Round(time.Millisecond))
			if len(u.refusals) > 0 {
				t.Logf("refusals: %s", strings.Join(u.refusals, "; "))
			}
			if u.refused != 0 || total.Refused != 0 {
				t.Errorf("the upstream refused %d requests (the clients saw %d 429s)", u.refused, total.Refused)
			}
			if total.Errors != 0 {
				t.Errorf("%d requests failed", total.Errors)
			}
			if span < run-time.Second {
				t.Errorf("the requests spanned %v of the %v run", span, run)
			}
			if used < 0.9 {
				t.Errorf("%.1f %% of the upstream's capacity used, want at least 90 %%", 100*used)
			}
		})
	}
}
