package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/redis/go-redis/v9"

	client "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/clients/go/httplimit"
)

// standIn answers RL.ACQUIRE key RATE n … as a sluice node answers an
// inline limit of n a second within its first second: n calls per key
// admitted, then refusals for a second. It lets the examples run without
// a server; a program passes client.New(nodes) (client.NewNodes) or
// client.New(redis.NewClient(…)).
type standIn struct {
	mu   sync.Mutex
	used map[string]int64
}

func (s *standIn) Do(ctx context.Context, args ...any) *redis.Cmd {
	key, rate := args[1].(string), args[3].(int64)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used == nil {
		s.used = map[string]int64{}
	}
	cmd := redis.NewCmd(ctx, args...)
	if s.used[key] < rate {
		s.used[key]++
		cmd.SetVal([]any{int64(1), rate - s.used[key], rate, int64(0), int64(1000), key})
	} else {
		cmd.SetVal([]any{int64(0), int64(0), rate, int64(1000), int64(1000), key})
	}
	return cmd
}

func get(h http.Handler, path, user string) {
	r := httptest.NewRequest("GET", path, nil)
	r.Header.Set("X-User", user)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Printf("%s %s: %d %q Retry-After %q\n", user, path, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
}

// The middleware is a func(http.Handler) http.Handler, the type chi's
// r.Use, alice, negroni's Wrap and every net/http chain take: with chi,
//
//	r := chi.NewRouter()
//	r.Use(middleware.RequestID, limit)
//
// Here the same chain with net/http alone: request id, then the limit,
// then the handler, which finds the decision in the request's context.
func Example_chain() {
	sl := client.New(&standIn{})
	limit := httplimit.New(sl, httplimit.Inline(
		func(r *http.Request) string { return "user:" + r.Header.Get("X-User") },
		client.Limit{Rate: 2}))
	requestID := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", "42")
			next.ServeHTTP(w, r)
		})
	}
	// use applies middlewares in the order given, as chi's Use does.
	use := func(h http.Handler, mws ...func(http.Handler) http.Handler) http.Handler {
		for i := len(mws) - 1; i >= 0; i-- {
			h = mws[i](h)
		}
		return h
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := httplimit.FromContext(r.Context())
		fmt.Fprintf(w, "%d left\n", d.Remaining)
	})
	h := use(hello, requestID, limit)
	for i := 0; i < 3; i++ {
		get(h, "/hello", "alice")
	}
	get(h, "/hello", "bob")
	// Output:
	// alice /hello: 200 "\"burst\";r=1;t=1" Retry-After ""
	// alice /hello: 200 "\"burst\";r=0;t=1" Retry-After ""
	// alice /hello: 429 "\"burst\";r=0;t=1" Retry-After "1"
	// bob /hello: 200 "\"burst\";r=1;t=1" Retry-After ""
}

// A limit per group of routes, as gin's r.Group("/api").Use(…) or chi's
// r.Route("/export", …) give: each group's handler wrapped in its own
// middleware. With gin, whose middleware is a gin.HandlerFunc, adapt it:
//
//	func ginLimit(mw func(http.Handler) http.Handler) gin.HandlerFunc {
//		return func(c *gin.Context) {
//			passed := false
//			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
//				passed, c.Request = true, r
//				c.Next()
//			})).ServeHTTP(c.Writer, c.Request)
//			if !passed {
//				c.Abort() // the middleware answered 429 or 503
//			}
//		}
//	}
func Example_routeGroups() {
	sl := client.New(&standIn{})
	user := func(r *http.Request) string { return r.Header.Get("X-User") }
	// Three calls a second per user on the API, one on exports.
	apiLimit := httplimit.New(sl, httplimit.Inline(func(r *http.Request) string { return "api:" + user(r) }, client.Limit{Rate: 3}))
	exportLimit := httplimit.New(sl, httplimit.Inline(func(r *http.Request) string { return "export:" + user(r) }, client.Limit{Rate: 1}))
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

	api := http.NewServeMux()
	api.Handle("/api/items", ok)
	mux := http.NewServeMux()
	mux.Handle("/api/", apiLimit(api))
	mux.Handle("/export", exportLimit(ok))
	mux.Handle("/healthz", ok) // not limited

	get(mux, "/export", "carol")
	get(mux, "/export", "carol")
	get(mux, "/api/items", "carol")
	get(mux, "/healthz", "carol")
	// Output:
	// carol /export: 200 "\"burst\";r=0;t=1" Retry-After ""
	// carol /export: 429 "\"burst\";r=0;t=1" Retry-After "1"
	// carol /api/items: 200 "\"burst\";r=2;t=1" Retry-After ""
	// carol /healthz: 200 "" Retry-After ""
}
