package deploy_test

import (
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
)

// parseUnit reads a unit file into section → key → values, in order.
func parseUnit(t *testing.T, file string) map[string]map[string][]string {
	t.Helper()
	opts, err := unit.DeserializeOptions(strings.NewReader(read(t, file)))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	out := map[string]map[string][]string{}
	for _, o := range opts {
		if out[o.Section] == nil {
			out[o.Section] = map[string][]string{}
		}
		// systemd reads a line ending in '\' and the next as one line, the
		// two joined by a space; go-systemd keeps the '\' and the newline.
		v := strings.TrimSpace(strings.ReplaceAll(o.Value, "\\\n", " "))
		out[o.Section][o.Name] = append(out[o.Section][o.Name], v)
	}
	return out
}

// systemdSeconds reads a systemd time span such as 20, 20s, 1min or 1min 30s.
func systemdSeconds(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	s = strings.NewReplacer(" ", "", "min", "m", "sec", "s").Replace(s)
	return time.ParseDuration(s)
}

func TestSystemdUnit(t *testing.T) {
	const file = "deploy/sluice.service"
	src := read(t, file)
	checkFlags(t, file+" comments", hashComments(src), "system", "no-create-home", "shell", "now")
	checkEnvNames(t, file, src, nil)
	u := parseUnit(t, file)
	svc := u["Service"]
	get := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	for k, want := range map[string]string{
		"Type": "simple", "Restart": "on-failure", "ProtectSystem": "strict", "CapabilityBoundingSet": "",
	} {
		if v, ok := svc[k]; !ok || get(k) != want {
			t.Errorf("%s: want %s=%s, got %q", file, k, want, v)
		}
	}
	for _, k := range []string{"NoNewPrivileges", "ProtectHome", "PrivateTmp"} {
		if v := get(k); v != "yes" && v != "true" {
			t.Errorf("%s: want %s=yes, got %q", file, k, v)
		}
	}
	if user := get("User"); user == "" || user == "root" || user == "0" {
		t.Errorf("%s: run as a dedicated user, not %q", file, user)
	}
	if v := get("PrivateNetwork"); v == "yes" || v == "true" {
		t.Errorf("%s: PrivateNetwork cuts the node off from clients and peers", file)
	}
	if af := strings.Fields(get("RestrictAddressFamilies")); len(af) > 0 && !slices.Contains(af, "AF_INET") {
		t.Errorf("%s: RestrictAddressFamilies=%s must allow AF_INET (and AF_INET6) for the listeners", file, get("RestrictAddressFamilies"))
	}
	if len(u["Install"]["WantedBy"]) == 0 {
		t.Errorf("%s: no [Install] WantedBy", file)
	}

	// ExecStart: the binary with --config pointing at the example file; the
	// settings it yields load and validate.
	start := strings.Fields(get("ExecStart"))
	if len(start) == 0 || !filepath.IsAbs(start[0]) || path.Base(start[0]) != "sluice" {
		t.Fatalf("%s: ExecStart should start with the absolute path of sluice, got %q", file, start)
	}
	checkFlags(t, file+" ExecStart", strings.Join(start[1:], " "))
	var args []string
	for _, a := range start[1:] {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			args = append(args, "--config", v)
		} else {
			args = append(args, a)
		}
	}
	confAt := slices.Index(args, "--config") + 1
	if confAt == 0 || confAt == len(args) || path.Base(args[confAt]) != "sluice.conf" {
		t.Fatalf("%s: ExecStart should read --config …/sluice.conf (deploy/sluice.conf), got %q", file, args)
	}
	args[confAt] = filepath.Join(root, "deploy", "sluice.conf")
	env := map[string]string{}
	for _, e := range svc["Environment"] {
		for _, kv := range strings.Fields(e) {
			k, v, _ := strings.Cut(strings.Trim(kv, `"`), "=")
			env[k] = v
		}
	}
	cfg := loadConfig(t, file+" ExecStart", args, env)

	if sd := get("StateDirectory"); sd == "" || cfg.DataDir != "/var/lib/"+sd {
		t.Errorf("%s: StateDirectory=%s, but data-dir is %s; systemd makes /var/lib/<StateDirectory> writable", file, sd, cfg.DataDir)
	}
	if d, err := systemdSeconds(get("TimeoutStopSec")); err != nil || d < cfg.ShutdownTimeout+5*time.Second {
		t.Errorf("%s: TimeoutStopSec=%s should leave the node shutdown-timeout (%v) plus time to hand over Raft leadership", file, get("TimeoutStopSec"), cfg.ShutdownTimeout)
	}
	if n, err := strconv.Atoi(get("LimitNOFILE")); err != nil || n < cfg.MaxClients+1024 {
		t.Errorf("%s: LimitNOFILE=%s should exceed maxclients (%d) with room for Raft, peers and files", file, get("LimitNOFILE"), cfg.MaxClients)
	}
}
