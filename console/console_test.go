package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, mux http.Handler, path string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

// TestServesThePage checks the console's answers: content types, the
// Content-Security-Policy, revalidation with ETags, the redirect of /ui,
// and 404 for a file it does not have.
func TestServesThePage(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux)
	for path, ctype := range map[string]string{
		"/ui/":            "text/html; charset=utf-8",
		"/ui/index.html":  "text/html; charset=utf-8",
		"/ui/console.js":  "text/javascript; charset=utf-8",
		"/ui/console.css": "text/css; charset=utf-8",
	} {
		w := get(t, mux, path)
		h := w.Header()
		if w.Code != http.StatusOK || h.Get("Content-Type") != ctype {
			t.Errorf("GET %s: %d %q, want 200 %q", path, w.Code, h.Get("Content-Type"), ctype)
		}
		if h.Get("Content-Security-Policy") != CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: headers %v", path, h)
		}
		etag := h.Get("ETag")
		if etag == "" {
			t.Fatalf("GET %s: no ETag", path)
		}
		if w := get(t, mux, path, "If-None-Match", etag); w.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", path, w.Code)
		}
	}
	if !strings.Contains(CSP, "script-src 'self';") || strings.Contains(CSP, "unsafe") {
		t.Errorf("CSP %q allows more than the page's own script", CSP)
	}
	page := get(t, mux, "/ui/").Body.String()
	if strings.Contains(page, "<script>") || strings.Contains(page, " style=") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the page has inline script or style, or an outside asset")
	}
	if w := get(t, mux, "/ui"); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want 301 to /ui/", w.Code, w.Header().Get("Location"))
	}
	if w := get(t, mux, "/ui/missing.js"); w.Code != http.StatusNotFound {
		t.Errorf("GET /ui/missing.js: %d, want 404", w.Code)
	}
}
