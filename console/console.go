// Package console serves sluice's web console, GET /ui/ on the HTTP
// address: a page of static HTML, CSS and JavaScript embedded in the
// binary that reads the JSON endpoints of package httpapi (/v1/usage,
// /v1/quotas, /v1/top, /v1/history, /v1/cluster) every two seconds and
// writes through them (PUT /v1/budgets/{path}, POST /v1/quota/set). The
// page itself holds nothing secret, so it is served without credentials;
// every call it makes sends the credentials the operator typed into its
// login form, and the endpoints check them as for any other client.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var files embed.FS

// CSP is the Content-Security-Policy of every console answer: scripts,
// styles and calls to the page's own origin only, no inline script or
// style element, no framing, no form posted elsewhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the console under prefix (such as "/ui/"): prefix itself
// is the page, prefix+name its other files. Everything is answered with
// Cache-Control: no-cache and an ETag, so that a browser revalidates (a
// 304 while the binary is the same) and never runs a page older than the
// server it talks to.
func Handler(prefix string) http.Handler {
	assets := map[string]asset{}
	sub, _ := fs.Sub(files, "static")
	fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		assets[p] = asset{body: b, ctype: contentType(p), etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, prefix)
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !ok {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			h.Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte("404 page not found\n"))
			return
		}
		h.Set("Content-Type", a.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// Register adds the console to mux at /ui/, and /ui's redirect to it.
func Register(mux *http.ServeMux) {
	mux.Handle("GET /ui/", Handler("/ui/"))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	}
	return "application/octet-stream"
}
