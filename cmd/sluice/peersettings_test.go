package main

import (
	"bufio"
	"crypto/tls"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/testsupport/testpki"
)

// peerSettingOfList is one line of testdata/peer-settings.txt: a setting
// of envoyproxy/ratelimit with its Go type and default.
type peerSettingOfList struct{ name, typ, def string }

func peerList(t *testing.T) []peerSettingOfList {
	t.Helper()
	f, err := os.Open("testdata/peer-settings.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []peerSettingOfList
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) != 3 {
			t.Fatalf("peer-settings.txt: %q: want name, type and default", line)
		}
		out = append(out, peerSettingOfList{f[0], f[1], f[2]})
	}
	if len(out) != 114 {
		t.Fatalf("peer-settings.txt lists %d settings, the peer has 114", len(out))
	}
	return out
}

// gostatsOnly are the table's settings the peer's stats library reads
// rather than its settings.go.
var gostatsOnly = map[string]bool{"STATSD_PROTOCOL": true}

// Every one of the peer's settings is in the table once, with the kind
// its type parses as, and the table holds nothing else.
func TestEveryPeerSettingIsClassified(t *testing.T) {
	rows := map[string]peerSetting{}
	for _, s := range peerSettings {
		if _, dup := rows[s.name]; dup {
			t.Errorf("%s is in the table twice", s.name)
		}
		rows[s.name] = s
	}
	kindOf := map[string]string{"bool": "bool", "int": "int", "int64": "int", "time.Duration": "duration",
		"float32": "float", "float64": "float", "map[string]string": "map", "string": "", "[]string": ""}
	listed := map[string]bool{}
	for _, p := range peerList(t) {
		listed[p.name] = true
		if _, ok := rows[p.name]; !ok {
			t.Errorf("%s (%s, default %q) is not in the table of peersettings.go", p.name, p.typ, p.def)
		}
		k, known := kindOf[p.typ]
		if !known {
			t.Errorf("%s: type %s not known to the test", p.name, p.typ)
		}
		if peerKinds[p.name] != k {
			t.Errorf("%s is a %s: its kind is %q, peerKinds says %q", p.name, p.typ, k, peerKinds[p.name])
		}
	}
	for n := range rows {
		if !listed[n] && !gostatsOnly[n] {
			t.Errorf("%s is in the table but not a setting of the peer", n)
		}
	}
}

// outcome is what ratelimitSettings makes of an environment, with what it
// logs apart.
type outcome struct {
	flags string
	mode  *ratelimitMode
	err   string
	said  string // the WARN and INFO lines
}

func settingsOutcome(env map[string]string) outcome {
	flags, m, err := ratelimitSettings(func(k string) string { return env[k] })
	o := outcome{flags: strings.Join(flags, " "), mode: m}
	if err != nil {
		o.err = err.Error()
	}
	if m != nil {
		o.said = strings.Join(append(append([]string{}, m.notes...), m.info...), "\n")
	}
	return o
}

// sameSettings reports whether two outcomes set the same: flags, mode
// (TLS configurations compared by what they hold) and error.
func sameSettings(a, b outcome) bool {
	if a.flags != b.flags || a.err != b.err || (a.mode == nil) != (b.mode == nil) {
		return false
	}
	if a.mode == nil {
		return true
	}
	ma, mb := a.mode.RatelimitMode, b.mode.RatelimitMode
	if (ma.XDS == nil) != (mb.XDS == nil) {
		return false
	}
	if ma.XDS != nil {
		xa, xb := *ma.XDS, *mb.XDS
		if !sameTLS(xa.TLS, xb.TLS) {
			return false
		}
		xa.TLS, xb.TLS = nil, nil
		ma.XDS, mb.XDS = &xa, &xb
	}
	return reflect.DeepEqual(ma, mb)
}

func sameTLS(a, b *tls.Config) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.ServerName != b.ServerName || len(a.Certificates) != len(b.Certificates) || (a.RootCAs == nil) != (b.RootCAs == nil) {
		return false
	}
	for i := range a.Certificates {
		if !reflect.DeepEqual(a.Certificates[i].Certificate, b.Certificates[i].Certificate) {
			return false
		}
	}
	return a.RootCAs == nil || a.RootCAs.Equal(b.RootCAs)
}

// namedIn reports whether name is one of the settings a log line names:
// in the list of an INFO line ("settings ignored (why): A, B"), or as a
// whole word of a WARN line — never as part of another setting's name
// (PORT in STATSD_PORT) or of a reason's text.
func namedIn(said, name string) bool {
	word := regexp.MustCompile(`(^|[^A-Z0-9_])` + name + `($|[^A-Z0-9_])`)
	for _, line := range strings.Split(said, "\n") {
		if strings.HasPrefix(line, "settings ignored (") {
			i := strings.LastIndex(line, "): ")
			if i >= 0 && slices.Contains(strings.Split(line[i+3:], ", "), name) {
				return true
			}
			continue
		}
		if word.MatchString(line) {
			return true
		}
	}
	return false
}

// Each setting, set, is honoured (what sluice runs with changes), refused
// (the start fails naming it) or named in a log line, as its row says;
// alone, without the settings it needs, it is never passed over in
// silence; and a value its type does not take stops the start naming it,
// as it stops the peer's.
func TestEachPeerSettingIsHonouredRefusedOrNamed(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	pair := ca.Issue("node", "ratelimit", testpki.Server)
	files := strings.NewReplacer("$CERT", pair.Cert, "$KEY", pair.Key, "$CA", ca.File)
	envOfRow := func(s peerSetting, value string, withContext bool) (with, without map[string]string) {
		with, without = map[string]string{}, map[string]string{}
		if withContext {
			for _, kv := range s.context {
				k, v, _ := strings.Cut(kv, "=")
				with[k], without[k] = files.Replace(v), files.Replace(v)
			}
		}
		with[s.name] = files.Replace(value)
		return with, without
	}
	for _, s := range peerSettings {
		t.Run(s.name, func(t *testing.T) {
			with, without := envOfRow(s, s.sample, true)
			got, base := settingsOutcome(with), settingsOutcome(without)
			if base.err != "" && s.class != honoured {
				// (A certificate's file is honoured where its context,
				// TLS asked for without it, is refused.)
				t.Fatalf("the context %v alone is refused: %s", s.context, base.err)
			}
			switch s.class {
			case honoured:
				if got.err != "" {
					t.Fatalf("%s=%s with %v: refused: %s", s.name, s.sample, s.context, got.err)
				}
				if sameSettings(got, base) {
					t.Fatalf("%s=%s with %v changes nothing", s.name, s.sample, s.context)
				}
			case refused:
				if !strings.Contains(got.err, s.name) {
					t.Fatalf("%s=%s: want a refusal naming it, got %q", s.name, s.sample, got.err)
				}
			case ignored:
				if got.err != "" {
					t.Fatalf("%s=%s: refused: %s", s.name, s.sample, got.err)
				}
				if !sameSettings(got, base) {
					t.Fatalf("%s=%s changes what sluice runs with, though ignored:\n%s\n%s", s.name, s.sample, got.flags, base.flags)
				}
				if !namedIn(got.said, s.name) {
					t.Fatalf("%s=%s is named in no log line: %q", s.name, s.sample, got.said)
				}
			}
			alone, none := envOfRow(s, s.sample, false)
			a, defaults := settingsOutcome(alone), settingsOutcome(none)
			if !strings.Contains(a.err, s.name) && !namedIn(a.said, s.name) && sameSettings(a, defaults) {
				t.Fatalf("%s=%s alone changes nothing and is named nowhere", s.name, s.sample)
			}
			if kind := peerKinds[s.name]; kind != "" {
				bad, _ := envOfRow(s, "not-a-"+kind, true)
				if o := settingsOutcome(bad); !strings.Contains(o.err, s.name) {
					t.Fatalf("%s=not-a-%s: want a refusal naming it, as the peer refuses it; got %q", s.name, kind, o.err)
				}
			}
		})
	}
}

// docs/envoy.md's table of the drop-in's settings names every setting once
// with the class of its row here, and the peer's default beside it.
func TestEnvoyDocsSettingsTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "| variable (default) | class | what sluice does with it |")
	if start < 0 {
		t.Fatal("docs/envoy.md: no table headed | variable (default) | class | what sluice does with it |")
	}
	defaults := map[string]string{}
	for _, p := range peerList(t) {
		defaults[p.name] = p.def
	}
	classes := map[string]string{}
	nameRe := regexp.MustCompile("`([A-Z][A-Z0-9_]+)`(?: \\(`([^`]*)`\\))?")
	for _, line := range strings.Split(doc[start:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			t.Fatalf("docs/envoy.md: row %q has no class", line)
		}
		class := strings.TrimSpace(cells[1])
		for _, m := range nameRe.FindAllStringSubmatch(strings.TrimPrefix(cells[0], "| "), -1) {
			name, def := m[1], m[2]
			if _, dup := classes[name]; dup {
				t.Errorf("docs/envoy.md: %s is in two rows", name)
			}
			classes[name] = class
			if peerDef, ok := defaults[name]; ok && def != peerDef && (def != "" || strings.Contains(m[0], "(")) {
				t.Errorf("docs/envoy.md: %s's default is written %q, the peer's is %q", name, def, peerDef)
			}
		}
	}
	var missing []string
	for _, s := range peerSettings {
		c, ok := classes[s.name]
		if !ok {
			missing = append(missing, s.name)
			continue
		}
		if c != s.class.String() {
			t.Errorf("docs/envoy.md: %s is %q, the table of peersettings.go says %s", s.name, c, s.class)
		}
		delete(classes, s.name)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("docs/envoy.md's settings table lacks %s", strings.Join(missing, ", "))
	}
	for n := range classes {
		t.Errorf("docs/envoy.md's settings table names %s, which is none of the peer's settings", n)
	}
}

// Settings that matter only beside another are named when set without it,
// even where one of them is read in another configuration: with
// DISABLE_STATS=true, NEAR_LIMIT_RATIO and the statsd and Prometheus ones.
func TestSettingsThatNeedAnotherAreNamed(t *testing.T) {
	o := settingsOutcome(map[string]string{"DISABLE_STATS": "true", "NEAR_LIMIT_RATIO": "0.5", "USE_PROMETHEUS": "true",
		"STATSD_HOST": "stats", "PROMETHEUS_ADDR": ":9091"})
	if o.err != "" {
		t.Fatal(o.err)
	}
	for _, n := range []string{"NEAR_LIMIT_RATIO", "USE_PROMETHEUS", "STATSD_HOST", "PROMETHEUS_ADDR"} {
		if !namedIn(o.said, n) {
			t.Errorf("%s with DISABLE_STATS=true is named nowhere: %q", n, o.said)
		}
	}
	o = settingsOutcome(map[string]string{"GRPC_UDS": "/tmp/rl.sock", "GRPC_PORT": "9000"})
	if !namedIn(o.said, "GRPC_PORT") || namedIn(o.said, "PORT") {
		t.Errorf("GRPC_PORT beside GRPC_UDS: %q", o.said)
	}
}
