package server

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSettingsPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sluice.conf")
	os.WriteFile(file, []byte(`# file values
maxclients 100
max-key-len 200
max-args 300
log-level "warn"
`), 0o644)
	env := map[string]string{
		"SLUICE_CONFIG":      file,
		"SLUICE_MAX_KEY_LEN": "222",
		"SLUICE_MAX_ARGS":    "333",
	}
	cfg, err := Load([]string{"--max-args", "444"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// flag > environment > file > default
	if cfg.MaxArgs != 444 || cfg.MaxKeyLen != 222 || cfg.MaxClients != 100 || cfg.LogLevel != "warn" || cfg.MaxBulkLen != 33554432 {
		t.Fatalf("precedence: args %d key %d clients %d level %s bulk %d", cfg.MaxArgs, cfg.MaxKeyLen, cfg.MaxClients, cfg.LogLevel, cfg.MaxBulkLen)
	}
	// --config given as a flag wins over SLUICE_CONFIG.
	other := filepath.Join(t.TempDir(), "other.conf")
	os.WriteFile(other, []byte("maxclients 7\n"), 0o644)
	cfg, err = Load([]string{"--config", other}, func(k string) string { return env[k] }, io.Discard)
	if err != nil || cfg.MaxClients != 7 || cfg.ConfigFile != other {
		t.Fatalf("--config flag: %v %d", err, cfg.MaxClients)
	}
}

func TestInvalidSettingsNameTheSetting(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		env  map[string]string
		file string
		want string
	}{
		{args: []string{"--maxclients", "0"}, want: "--maxclients: must be between 1 and 1000000, got 0"},
		{args: []string{"--raft-addr", "0.0.0.0:7380"}, want: "--raft-addr: must be an address other nodes can reach, not \"0.0.0.0:7380\""},
		{args: []string{"--resp-addr", "nonsense"}, want: "--resp-addr: must be host:port, got \"nonsense\""},
		{args: []string{"--log-format", "xml"}, want: "--log-format: must be text or json, got \"xml\""},
		{args: []string{"--sync-interval", "1h"}, want: "--sync-interval: must be between 10ms and 1m, got 1h0m0s"},
		{args: []string{"--bootstrap-peers", "a=1.2.3.4:1", "--join", "1.2.3.4:6380"}, want: "--join: cannot be combined with --bootstrap-peers"},
		{args: []string{"--join", "dns:"}, want: "--join: must be dns:NAME or dns:NAME:PORT with NAME a DNS name"},
		{args: []string{"--join", "dns:peers svc"}, want: "--join: must be dns:NAME or dns:NAME:PORT with NAME a DNS name (letters, digits, '-', '_', '.'), got \"dns:peers svc\""},
		{args: []string{"--join", "dns:peers.svc:70000"}, want: "--join: port must be 1–65535 in dns:NAME:PORT, got \"dns:peers.svc:70000\""},
		{args: []string{"--voters", "0"}, want: "--voters: must be between 1 and 7 (odd recommended), got 0"},
		{args: []string{"--voters", "9"}, want: "--voters: must be between 1 and 7 (odd recommended), got 9"},
		{args: []string{"--bootstrap-expect", "3"}, want: "--bootstrap-expect: applies only with --join dns:NAME, got 3"},
		{args: []string{"--join", "dns:peers.svc", "--bootstrap-expect", "-1"}, want: "--bootstrap-expect: must be between 1 and 64 (0: 3), got -1"},
		{args: []string{"--join", "dns:peers.svc", "--bootstrap-expect", "three"}, want: "--bootstrap-expect: \"three\" is not a whole number"},
		{args: []string{"--bootstrap-peers", "a=1.2.3.4:1"}, want: "--bootstrap-peers: each peer must be id=raftaddr=respaddr"},
		{args: []string{"--tls-cert", "x.pem"}, want: "--tls-cert: and --tls-key must be given together"},
		{args: []string{"--grpc-addr", "127.0.0.1:0", "--grpc-tls-cert", "x.pem"}, want: "--grpc-tls-cert: and --grpc-tls-key must be given together"},
		{args: []string{"--grpc-tls-cert", "x.pem", "--grpc-tls-key", "x.key"}, want: "--grpc-tls-cert: applies to the gRPC listener: set --grpc-addr too"},
		{args: []string{"--grpc-addr", "127.0.0.1:0", "--grpc-tls-client-ca", "ca.pem"}, want: "--grpc-tls-client-ca: needs TLS on --grpc-addr"},
		{args: []string{"--grpc-addr", "127.0.0.1:0", "--grpc-tls-client-san", "envoy"}, want: "--grpc-tls-client-san: needs --grpc-tls-client-ca"},
		{args: []string{"--grpc-addr", "unix:"}, want: "--grpc-addr: unix: needs the socket's path"},
		{args: []string{"--grpc-addr", "unix://"}, want: "--grpc-addr: unix: needs the socket's path"},
		{args: []string{"--grpc-addr", "127.0.0.1:0", "--grpc-max-connection-age-grace", "1s"}, want: "--grpc-max-connection-age-grace: applies after --grpc-max-connection-age: set it too"},
		{args: []string{"--grpc-addr", "127.0.0.1:0", "--grpc-max-connection-age", "-1s"}, want: "--grpc-max-connection-age: and --grpc-max-connection-age-grace must be 0 or more"},
		{args: []string{"--grpc-addr", "127.0.0.1:0", "--grpc-tls-cert", "/nope.pem", "--grpc-tls-key", "/nope.key"}, want: `--grpc-tls-cert: cannot read "/nope.pem": no such file or directory`},
		{env: map[string]string{"SLUICE_MAX_BUCKETS": "10"}, want: "--max-buckets: must be between 1000 and 4294967296, got 10"},
		{env: map[string]string{"SLUICE_MAXCLIENTS": "many"}, want: `SLUICE_MAXCLIENTS: "many" is not a whole number`},
		{file: "maxclients lots\n", want: "config file " + filepath.Join(dir, "bad.conf") + ": maxclients: \"lots\" is not a whole number"},
		{file: "colour blue\n", want: "unknown setting \"colour\""},
	}
	for _, c := range cases {
		args := c.args
		if c.file != "" {
			p := filepath.Join(dir, "bad.conf")
			os.WriteFile(p, []byte(c.file), 0o644)
			args = append(args, "--config", p)
		}
		cfg, err := Load(args, func(k string) string { return c.env[k] }, io.Discard)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v %q:\n got %v\nwant …%s…", c.args, c.env, c.file, err, c.want)
		}
	}
}

func TestConfigGetShowsEffectiveSettings(t *testing.T) {
	cfg, _ := Load([]string{"--requirepass", "pw", "--maxclients", "77"}, func(string) string { return "" }, io.Discard)
	got := map[string]string{}
	for _, kv := range cfg.Settings() {
		got[kv[0]] = kv[1]
	}
	if got["maxclients"] != "77" || got["requirepass"] != "********" || got["sync-interval"] != (100*time.Millisecond).String() {
		t.Fatalf("settings %v", got)
	}
	if len(got) != len(SettingNames()) {
		t.Fatalf("%d settings shown, %d exist", len(got), len(SettingNames()))
	}
}

func TestIsPlaceholder(t *testing.T) {
	for _, pw := range []string{"change-me", "CHANGE ME", "changeme123", "change-me-to-a-long-random-secret", "change me: a long random secret",
		"a-long-random-secret", "the same password on every node", "password", "Secret", "foobared", "********", "…", "<password>", "your-password-here"} {
		if !IsPlaceholder(pw) {
			t.Errorf("%q is not taken for a placeholder", pw)
		}
	}
	for _, pw := range []string{"", "s3cret", "hunter2", "pw", "7f3c9e0b5a1d48c2b6e4f0a9d3c7e185", "a-long-enough-password", "!@#$%^&*()", "passwords are long"} {
		if IsPlaceholder(pw) {
			t.Errorf("%q is taken for a placeholder", pw)
		}
	}
}

// Validate only checks; WithDefaults fills in the settings derived from
// others, and Validate judges the settings as they will be run.
func TestValidateChecksAndWithDefaultsDerives(t *testing.T) {
	for _, c := range []struct {
		args          []string
		advertise, id string
	}{
		{[]string{"--resp-addr", "10.0.0.5:6380", "--raft-addr", "10.0.0.5:7380"}, "10.0.0.5:6380", "10.0.0.5:7380"},
		{[]string{"--resp-addr", "0.0.0.0:6380", "--raft-addr", "10.0.0.5:7380"}, "127.0.0.1:6380", "10.0.0.5:7380"},
		{[]string{"--resp-addr", ":6380", "--raft-addr", "127.0.0.1:0"}, "127.0.0.1:6380", ""},
		{[]string{"--advertise", "a.example:6380", "--node-id", "a", "--raft-addr", "10.0.0.5:7380"}, "a.example:6380", "a"},
	} {
		cfg, err := Load(append(c.args, "--data-dir", t.TempDir()), func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		before := cfg
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if !reflect.DeepEqual(cfg, before) {
			t.Errorf("%v: Validate changed the settings:\n%+v\n%+v", c.args, before, cfg)
		}
		d := cfg.WithDefaults()
		if d.Advertise != c.advertise || d.NodeID != c.id {
			t.Errorf("%v: advertise %q node-id %q, want %q %q", c.args, d.Advertise, d.NodeID, c.advertise, c.id)
		}
		if !reflect.DeepEqual(cfg, before) {
			t.Errorf("%v: WithDefaults changed its receiver", c.args)
		}
	}
	// A node id derived from --raft-addr is checked like a given one.
	cfg, _ := Load([]string{"--raft-addr", "a=b:7380", "--data-dir", t.TempDir()}, func(string) string { return "" }, io.Discard)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--node-id: must not contain") {
		t.Errorf("a derived node id with '=': %v", err)
	}
}

// --help lists every setting once, in its group, as the docs write it.
func TestHelpIsGrouped(t *testing.T) {
	var out bytes.Buffer
	if _, err := Load([]string{"--help"}, func(string) string { return "" }, &out); !errors.Is(err, ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	seen := map[string]int{}
	for _, g := range helpGroups {
		if !strings.Contains(help, "\n"+g.title+":\n") {
			t.Errorf("no group %q in --help", g.title)
		}
		for _, n := range g.names {
			seen[n]++
		}
	}
	for _, n := range SettingNames() {
		if seen[n] != 1 {
			t.Errorf("setting %s is in %d groups of --help", n, seen[n])
		}
		if !strings.Contains(help, "\n  --"+n+" ") && !strings.Contains(help, "\n  --"+n+"\n") && !strings.Contains(help, "\n  --"+n+", ") {
			t.Errorf("--help does not show --%s", n)
		}
		if !strings.Contains(help, "(env "+EnvName(n)+")") {
			t.Errorf("--help does not name %s", EnvName(n))
		}
	}
	if strings.Contains(help, "\n  -"+SettingNames()[0]) {
		t.Error("--help shows flags with one dash")
	}
}

// --max-clients is --maxclients under the name its neighbours suggest: as
// a flag, a variable and a line of the settings file.
func TestMaxClientsAlias(t *testing.T) {
	file := t.TempDir() + "/sluice.conf"
	if err := os.WriteFile(file, []byte("max-clients 300\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want int
	}{
		{[]string{"--max-clients", "100"}, nil, 100},
		{nil, map[string]string{"SLUICE_MAX_CLIENTS": "200"}, 200},
		{[]string{"--config", file}, nil, 300},
		{[]string{"--maxclients", "400"}, nil, 400},
	} {
		c, err := Load(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err != nil || c.MaxClients != tc.want {
			t.Errorf("%v %v: maxclients %d (%v), want %d", tc.args, tc.env, c.MaxClients, err, tc.want)
		}
	}
}
