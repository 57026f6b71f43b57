package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"
)

// requireChromium returns the path of Debian's Chromium. If it is missing
// the test fails when SLUICE_REQUIRE_TOOLS is set (as in CI) and is
// skipped, saying why, otherwise.
func requireChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
		t.Fatal("chromium is not installed (apt-get install chromium); SLUICE_REQUIRE_TOOLS is set")
	}
	t.Skip("chromium is not installed: install Debian's chromium to run the console test (CI does)")
	return ""
}

// artifactDir is where a test leaves files for a person to look at:
// $SLUICE_ARTIFACTS when set, else the test's temporary folder.
func artifactDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("SLUICE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// browser starts a headless Chromium with a profile of its own and
// returns its context, with one deadline for the whole session: generous,
// since a loaded machine starts Chromium slowly; the tests wait on what
// the page shows, not on time. It ends with the test.
func browser(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	bctx, cancelTimeout := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelBrowser(); cancelAlloc() })
	return bctx
}

// TestConsoleInChromium drives the web console (/ui/) in a headless
// Chromium against the real binary with a password set: it logs in, finds
// a tenant's quota bar and the most refused key, sees both change as more
// load arrives (without a reload), and changes a budget node's rate and a
// quota's count through the page's dialogs, which RESP then reports.
func TestConsoleInChromium(t *testing.T) {
	chromium := requireChromium(t)
	const pass = "console-test-password"
	p := single(t, "--requirepass", pass)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp, Password: pass, Protocol: 2, MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	do := func(args ...any) any {
		t.Helper()
		v, err := rdb.Do(ctx, args...).Result()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}

	// The tree: tenants, and acme under it with a monthly quota of 1000.
	for path, body := range map[string]string{
		"tenants":       `{"sustained":{"rate":100000,"window":"minute"}}`,
		"tenants/acme":  `{"sustained":{"rate":100,"window":"minute"},"quota":{"limit":1000,"period":"month"}}`,
		"tenants/batch": `{"sustained":{"rate":50,"window":"second"}}`,
	} {
		req, _ := http.NewRequest(http.MethodPut, "http://"+p.HTTP+"/v1/budgets/"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+pass)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT /v1/budgets/%s: %s", path, resp.Status)
		}
	}
	// acme has used 250 of its quota, and 5 more calls; a login key is
	// refused 20 times.
	do("RL.QUOTA", "SET", "tenants/acme", "USED", 250)
	load := func(admitted, refused int) {
		t.Helper()
		for range admitted {
			if v := do("RL.ACQUIRE", "tenants/acme").([]any); v[0] != int64(1) {
				t.Fatalf("RL.ACQUIRE tenants/acme refused: %v", v)
			}
		}
		for range refused {
			do("RL.ACQUIRE", "login:10.0.0.7", "RATE", 1, "PER", "day")
		}
	}
	load(5, 21)
	// Two reservations of a batch job stay in flight.
	for range 2 {
		do("RL.RESERVE", "tenants/batch", "COST", 1, "TTL", 600000)
	}

	bctx := browser(t, chromium)
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitText polls the text of the first element sel matches until ok
	// accepts it.
	waitText := func(what, sel string, ok func(string) bool) string {
		t.Helper()
		js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.textContent : null; })()`, sel)
		check := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.textContent : ''; })()`, sel)
		deadline := time.Now().Add(90 * time.Second)
		for {
			got, err := chromedp.Run(bctx, chromedp.Evaluate[string](check))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if ok(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s shows %q", what, sel, got)
			}
			// The page polls every 2 s; wait for its next change.
			_, _ = chromedp.Run(bctx, chromedp.Poll[bool](fmt.Sprintf(`%s !== %q`, js, got),
				chromedp.WithPollingTimeout(5*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
		}
	}

	url := "http://" + p.HTTP + "/ui/"
	run("open the console and log in",
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#login-form`)),
		chromedp.SetValue(chromedp.CSS(`#login-user`), "default"),
		chromedp.SendKeys(chromedp.CSS(`#login-pass`), pass),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#app`)),
	)
	acmeQuota := `#quota-list .quota[data-level="tenants/acme"] .figures`
	waitText("acme's quota bar", acmeQuota, func(s string) bool { return s == "255 / 1000" })
	topKey := `#top-body tr[data-key="login:10.0.0.7"] .count`
	waitText("the top refused key", topKey, func(s string) bool { return s == "20" })
	waitText("the reservations in flight", `#reservations-body tr[data-path="tenants/batch"] .num`, func(s string) bool { return s == "2" })
	html, err := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(html, pass) {
		t.Fatal("the page shows the password")
	}

	// More load: the figures change in place (the marker set on the
	// window survives, so the page was not reloaded).
	run("mark the page", chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	load(7, 10)
	waitText("acme's quota bar after more load", acmeQuota, func(s string) bool { return s == "262 / 1000" })
	waitText("the top refused key after more load", topKey, func(s string) bool { return s == "30" })
	if marker, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.notReloaded === true`)); err != nil || !marker {
		t.Fatal("the page reloaded")
	}

	shot := filepath.Join(artifactDir(t), "console.png")
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the console: %s", shot)

	// Edit acme's rate and burst: the dialog, then its confirmation.
	acmeRow := `#tree-body tr[data-path="tenants/acme"]`
	run("edit tenants/acme",
		chromedp.Click(chromedp.CSS(acmeRow+` .edit-node`)),
		chromedp.WaitVisible(chromedp.CSS(`#f-rate`)),
		chromedp.SetValue(chromedp.CSS(`#f-rate`), "50"),
		chromedp.SetValue(chromedp.CSS(`#f-burst`), "40"),
		chromedp.Click(chromedp.CSS(`#edit-review`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-apply`)),
	)
	waitText("the confirmation", `#confirm-summary`, func(s string) bool {
		return strings.Contains(s, "rate 100 / minute → 50 / minute") && strings.Contains(s, "burst 100 → 40")
	})
	run("confirm", chromedp.Click(chromedp.CSS(`#confirm-apply`)), chromedp.WaitNotVisible(chromedp.CSS(`#edit`)))
	var node struct {
		Config struct {
			Sustained struct {
				Rate   int64  `json:"rate"`
				Window string `json:"window"`
			} `json:"sustained"`
			Burst struct {
				Capacity int64 `json:"capacity"`
			} `json:"burst"`
			Quota struct {
				Limit int64 `json:"limit"`
			} `json:"quota"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(do("RL.BUDGET", "GET", "tenants/acme").(string)), &node); err != nil {
		t.Fatal(err)
	}
	if c := node.Config; c.Sustained.Rate != 50 || c.Sustained.Window != "minute" || c.Burst.Capacity != 40 || c.Quota.Limit != 1000 {
		t.Fatalf("RL.BUDGET GET tenants/acme after the edit: %+v", c)
	}
	waitText("the new limit in the tree", acmeRow+` .limit`, func(s string) bool { return s == "50 / minute, burst 40" })

	// Set acme's quota count to 900 the same way.
	run("set acme's quota",
		chromedp.Click(chromedp.CSS(`#quota-list .quota[data-level="tenants/acme"] .set-used`)),
		chromedp.WaitVisible(chromedp.CSS(`#f-used`)),
		chromedp.SetValue(chromedp.CSS(`#f-used`), "900"),
		chromedp.Click(chromedp.CSS(`#edit-review`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-apply`)),
	)
	waitText("the quota confirmation", `#confirm-summary`, func(s string) bool { return strings.Contains(s, "used 262 → 900 of 1000") })
	run("confirm", chromedp.Click(chromedp.CSS(`#confirm-apply`)), chromedp.WaitNotVisible(chromedp.CSS(`#edit`)))
	if v := do("RL.QUOTA", "tenants/acme"); field(v, "used") != int64(900) {
		t.Fatalf("RL.QUOTA tenants/acme after the edit: %v", v)
	}
	waitText("acme's quota bar after the edit", acmeQuota, func(s string) bool { return s == "900 / 1000" })
}
