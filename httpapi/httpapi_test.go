package httpapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/sluice-rl/sluice/reserve"
	"github.com/sluice-rl/sluice/testsupport/testlimiter"
)

func newAPI(t *testing.T) *http.ServeMux {
	t.Helper()
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC).UnixNano()
	svc := testlimiter.New(t, `{"budgets":{"api":{"sustained":{"rate":2,"window":"minute"},"quota":{"limit":5,"period":"day"}}}}`, 8,
		func() int64 { return now })
	svc.Holds = reserve.New("n1", 100, 0)
	mux := http.NewServeMux()
	(&API{Service: svc, MaxKeyLen: 1024}).Register(mux)
	return mux
}

// TestOpenAPI validates docs/openapi.yaml, then every request and response
// of a session of calls against it: each status, header and body the API
// answers is one the document describes.
func TestOpenAPI(t *testing.T) {
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	mux := newAPI(t)
	calls := []struct {
		path, body string
		status     int
	}{
		{"/v1/acquire", `{"key":"u","rate":2,"per":"minute"}`, 200},
		{"/v1/acquire", `{"key":"u","rate":2,"per":"minute","cost":2}`, 429},
		{"/v1/acquire", `{"key":"u","rate":2,"per":"minute","cost":3}`, 429},
		{"/v1/acquire", `{"key":"q","quota":{"limit":3,"per":"day","tz":"Europe/Paris"},"dry_run":true}`, 200},
		{"/v1/acquire", `{"path":"api","wait_ms":0}`, 200},
		{"/v1/acquire", `{"path":"none"}`, 404},
		{"/v1/acquire", `{"key":"u","rate":0}`, 400}, // the document refuses it too (see below)
		{"/v1/peek", `{"key":"u","cost":0}`, 200},
		{"/v1/peek", `{"path":"api"}`, 200},
		{"/v1/refund", `{"key":"u","cost":1}`, 200},
		{"/v1/quota", `{"path":"api"}`, 200},
		{"/v1/quota", `{"key":"nothing"}`, 400},
		{"/v1/reserve", `{"key":"r","rate":10,"cost":4,"ttl_ms":60000}`, 200},
		{"/v1/reserve", `{"key":"r","rate":10,"cost":7}`, 429},
		{"/v1/reserve", `{"key":"c","concurrency":1,"cost":1}`, 200},
		{"/v1/reserve", `{"key":"c","concurrency":1,"cost":1}`, 429},
		{"/v1/reserve", `{"key":"r","rate":10}`, 400},
		{"/v1/settle", `{"id":"00000000000000010000000000000000@n1","actual":2}`, 200},
		{"/v1/settle", `{"id":"00000000000000010000000000000000@n1","actual":2}`, 404},
		{"/v1/renew", `{"id":"00000000000000020000000000000000@n1","ttl_ms":1000}`, 200},
		{"/v1/release", `{"id":"00000000000000020000000000000000@n1"}`, 200},
		{"/v1/release", `{"id":"00000000000000010000000000000000@n9"}`, 404},
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	for i, c := range calls {
		req := httptest.NewRequest("POST", "http://127.0.0.1:9380"+c.path, bytes.NewReader([]byte(c.body)))
		req.Header.Set("Content-Type", "application/json")
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(ctx, in); (err != nil) != (c.status == 400 && (c.path == "/v1/acquire" || c.path == "/v1/reserve")) {
			t.Fatalf("call %d %s: request does not match the document: %v", i, c.body, err)
		}
		req.Body = io.NopCloser(bytes.NewReader([]byte(c.body)))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Fatalf("call %d %s: status %d, want %d: %s", i, c.body, rec.Code, c.status, rec.Body)
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: opts}
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			t.Fatalf("call %d %s: response %d %s does not match the document: %v", i, c.body, rec.Code, rec.Body, err)
		}
	}
}
