package server

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/envoyrls"
)

// Config is every setting of a sluice node. Load fills it from defaults, a
// --config file, SLUICE_* environment variables and flags, in increasing
// order of precedence; Validate checks it as a whole, and WithDefaults
// fills in the settings derived from others.
type Config struct {
	RespAddr       string
	HTTPAddr       string
	GRPCAddr       string
	EnvoyConfig    string
	RaftAddr       string
	Advertise      string
	DataDir        string
	NodeID         string
	BootstrapPeers string
	Join           string
	// BootstrapExpect is how many nodes a new cluster found by --join
	// dns: waits for before its lowest id bootstraps it.
	BootstrapExpect int
	// Voters is how many Raft voters the leader keeps; more nodes join
	// as non-voters (raftfsm's autopilot).
	Voters        int
	Budgets       string
	RequirePass   string
	PeerPassword  string
	ACLFile       string
	TLSCert       string
	TLSKey        string
	TLSCA         string
	ProtectedMode bool
	MaxClients    int

	// GRPCTLSCert and GRPCTLSKey are --grpc-addr's own certificate (default:
	// TLSCert's); GRPCTLSClientCA requires client certificates there,
	// signed by it, and GRPCTLSClientSAN a name they must carry.
	GRPCTLSCert, GRPCTLSKey           string
	GRPCTLSClientCA, GRPCTLSClientSAN string
	// GRPCMaxConnectionAge, when set, ends each gRPC connection that old
	// (±10 %) with a GOAWAY, so that clients spread over the nodes again;
	// calls still running get GRPCMaxConnectionAgeGrace more.
	GRPCMaxConnectionAge, GRPCMaxConnectionAgeGrace time.Duration

	// StatsdAddr, when set, sends envoyproxy/ratelimit's stats of the
	// Envoy front there over StatsdProtocol (udp, tcp) every
	// StatsdFlushInterval, StatsdTags (key:value,…) appended as gostats does.
	StatsdAddr, StatsdProtocol, StatsdTags string
	StatsdFlushInterval                    time.Duration

	// Timeout closes a client connection idle this long (0: never);
	// AuthTimeout, one that has not authenticated this long after it
	// connected, when a password is required (0: never).
	Timeout, AuthTimeout time.Duration
	MaxBuckets           int
	MaxDataMemory        int
	ScriptTimeLimit      time.Duration
	ScriptNative         bool
	MaxQuotas            int
	MaxReservations      int
	ReservationTTL       time.Duration
	MaxKeyLen            int
	MaxBulkLen           int
	MaxArgs              int
	MaxClientBuffers     int // bytes of every connection's read buffer and queued transaction together
	Shards               int
	SyncInterval         time.Duration
	ApplyTimeout         time.Duration
	LoadingTimeout       time.Duration // how long a starting node answers LOADING at most; 0: until caught up
	ShutdownTimeout      time.Duration
	LogLevel             string
	LogFormat            string
	Pprof                bool
	ConfigFile           string
	// Ratelimit is set when the node runs as envoyproxy/ratelimit (set by
	// `sluice ratelimit`, never by a flag); nil: sluice's own semantics.
	Ratelimit *RatelimitMode

	// from says where Load found each setting that is not at its default:
	// "--name", "SLUICE_NAME" or "name in <file>", for messages.
	from map[string]string
}

// setting binds one Config field to its flag name (also its file key and,
// upper-cased with SLUICE_, its environment variable).
type setting struct {
	name   string
	usage  string
	secret bool
	def    string
	bind   func(c *Config, fs *flag.FlagSet, name, usage, def string)
}

func str(get func(*Config) *string) func(*Config, *flag.FlagSet, string, string, string) {
	return func(c *Config, fs *flag.FlagSet, name, usage, def string) { fs.StringVar(get(c), name, def, usage) }
}

func num(get func(*Config) *int) func(*Config, *flag.FlagSet, string, string, string) {
	return func(c *Config, fs *flag.FlagSet, name, usage, def string) {
		*get(c), _ = strconv.Atoi(def)
		fs.Var(intValue{get(c)}, name, usage)
	}
}

// intValue is an integer setting whose error says what it got.
type intValue struct{ p *int }

func (v intValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	*v.p = n
	return nil
}

func dur(get func(*Config) *time.Duration) func(*Config, *flag.FlagSet, string, string, string) {
	return func(c *Config, fs *flag.FlagSet, name, usage, def string) {
		*get(c), _ = time.ParseDuration(def)
		fs.Var(durValue{get(c)}, name, usage)
	}
}

// durValue is a Go duration setting whose error says what it got and
// what it takes.
type durValue struct{ d *time.Duration }

func (v durValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v durValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration; use 100ms, 1s, 2m", s)
	}
	*v.d = d
	return nil
}

// seconds binds a duration given in whole seconds, as Redis's timeout is.
func seconds(get func(*Config) *time.Duration) func(*Config, *flag.FlagSet, string, string, string) {
	return func(c *Config, fs *flag.FlagSet, name, usage, def string) {
		n, _ := strconv.ParseInt(def, 10, 64)
		*get(c) = time.Duration(n) * time.Second
		fs.Var(secondsValue{get(c)}, name, usage)
	}
}

type secondsValue struct{ d *time.Duration }

func (v secondsValue) String() string {
	if v.d == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*v.d/time.Second), 10)
}

// Set takes whole seconds, as Redis does, or a Go duration (rounded up
// to whole seconds).
func (v secondsValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		d, derr := time.ParseDuration(s)
		if derr != nil {
			return fmt.Errorf("%q is not a number of seconds or a duration; use 30, 30s, 5m", s)
		}
		n = int64((d + time.Second - 1) / time.Second)
	}
	if n < 0 || n > 1<<31 {
		return fmt.Errorf("%q must be between 0 and %d seconds", s, int64(1)<<31)
	}
	*v.d = time.Duration(n) * time.Second
	return nil
}

func boolean(get func(*Config) *bool) func(*Config, *flag.FlagSet, string, string, string) {
	return func(c *Config, fs *flag.FlagSet, name, usage, def string) {
		fs.BoolVar(get(c), name, def == "true", usage)
	}
}

var settings = []setting{
	{name: "resp-addr", def: "127.0.0.1:6380", usage: "RESP listen address (host:port)", bind: str(func(c *Config) *string { return &c.RespAddr })},
	{name: "http-addr", def: "127.0.0.1:9380", usage: "HTTP listen address for /metrics, /healthz, /readyz and the HTTP API (/v1/…); empty disables", bind: str(func(c *Config) *string { return &c.HTTPAddr })},
	{name: "grpc-addr", def: "", usage: "gRPC listen address for Envoy's rate limit service (RLS v3) and gRPC health: host:port, or unix:PATH for a Unix socket; empty disables", bind: str(func(c *Config) *string { return &c.GRPCAddr })},
	{name: "grpc-max-connection-age", def: "0s", usage: "close each gRPC connection this old (±10 %) with a GOAWAY, so that clients reconnect and spread over the nodes (0: never)", bind: dur(func(c *Config) *time.Duration { return &c.GRPCMaxConnectionAge })},
	{name: "grpc-max-connection-age-grace", def: "0s", usage: "after --grpc-max-connection-age, how long calls still running may take before the connection is closed (0: as long as they take)", bind: dur(func(c *Config) *time.Duration { return &c.GRPCMaxConnectionAgeGrace })},
	{name: "statsd-addr", def: "", usage: "statsd server (host:port) the Envoy front's stats are sent to, under envoyproxy/ratelimit's names; empty: none", bind: str(func(c *Config) *string { return &c.StatsdAddr })},
	{name: "statsd-protocol", def: "udp", usage: "how --statsd-addr is reached: udp or tcp", bind: str(func(c *Config) *string { return &c.StatsdProtocol })},
	{name: "statsd-flush-interval", def: "10s", usage: "how often the stats gathered are sent to --statsd-addr", bind: dur(func(c *Config) *time.Duration { return &c.StatsdFlushInterval })},
	{name: "statsd-tags", def: "", usage: "tags (key:value,…) appended to every stat sent to --statsd-addr, as envoyproxy/ratelimit's EXTRA_TAGS", bind: str(func(c *Config) *string { return &c.StatsdTags })},
	{name: "envoy-config", def: "", usage: "envoyproxy/ratelimit YAML configuration: a file, or a directory of .yaml/.yml files, loaded at start", bind: str(func(c *Config) *string { return &c.EnvoyConfig })},
	{name: "raft-addr", def: "127.0.0.1:7380", usage: "Raft listen and advertise address (host:port, not 0.0.0.0)", bind: str(func(c *Config) *string { return &c.RaftAddr })},
	{name: "advertise", def: "", usage: "RESP address peers and clients use to reach this node (default: --resp-addr)", bind: str(func(c *Config) *string { return &c.Advertise })},
	{name: "data-dir", def: "./sluice-data", usage: "directory for the Raft log and snapshots", bind: str(func(c *Config) *string { return &c.DataDir })},
	{name: "node-id", def: "", usage: "this node's id in the cluster (default: derived from --raft-addr)", bind: str(func(c *Config) *string { return &c.NodeID })},
	{name: "bootstrap-peers", def: "", usage: "static cluster: id=raftaddr=respaddr,… identical on every node", bind: str(func(c *Config) *string { return &c.BootstrapPeers })},
	{name: "join", def: "", usage: "RESP address of any member to join (host:port), or dns:NAME[:PORT] to find the members in DNS: NAME's A/AAAA records (or SRV records, for a name starting with '_'), as a Kubernetes headless service publishes them; PORT defaults to this node's RESP port", bind: str(func(c *Config) *string { return &c.Join })},
	{name: "bootstrap-expect", def: "0", usage: "with --join dns:, how many nodes (this one included) must answer, none in a cluster yet, before the one with the lowest --node-id bootstraps a new cluster (0: 3); set it to the number of nodes first started", bind: num(func(c *Config) *int { return &c.BootstrapExpect })},
	{name: "voters", def: "3", usage: "how many nodes vote in Raft (1 to 7, odd recommended): a node joining a cluster with as many voters joins as a non-voter, which limits alike; the leader promotes one when a voter is lost (removed, or unreachable for 3 s)", bind: num(func(c *Config) *int { return &c.Voters })},
	{name: "budgets", def: "", usage: "JSON file (RL.BUDGET EXPORT shape) seeding an empty budget tree", bind: str(func(c *Config) *string { return &c.Budgets })},
	{name: "requirepass", def: "", secret: true, usage: "password of the default user (admin role)", bind: str(func(c *Config) *string { return &c.RequirePass })},
	{name: "peer-password", def: "", secret: true, usage: "cluster secret nodes prove themselves to each other with (as sluice-peer:<node-id>), for forwarded writes, joins and internal commands; also the password of user sluice-peer (admin); default: --requirepass", bind: str(func(c *Config) *string { return &c.PeerPassword })},
	{name: "acl-file", def: "", usage: "ACL file: lines 'user <name> <limiter|admin> <sha256-hex of password>'", bind: str(func(c *Config) *string { return &c.ACLFile })},
	{name: "tls-cert", def: "", usage: "TLS certificate (PEM) for client and Raft traffic", bind: str(func(c *Config) *string { return &c.TLSCert })},
	{name: "tls-key", def: "", usage: "TLS private key (PEM)", bind: str(func(c *Config) *string { return &c.TLSKey })},
	{name: "tls-ca", def: "", usage: "CA bundle (PEM) to verify peers; enables mutual TLS between nodes", bind: str(func(c *Config) *string { return &c.TLSCA })},
	{name: "grpc-tls-cert", def: "", usage: "TLS certificate (PEM) of --grpc-addr alone (default: --tls-cert's)", bind: str(func(c *Config) *string { return &c.GRPCTLSCert })},
	{name: "grpc-tls-key", def: "", usage: "TLS private key (PEM) of --grpc-tls-cert", bind: str(func(c *Config) *string { return &c.GRPCTLSKey })},
	{name: "grpc-tls-client-ca", def: "", usage: "CA bundle (PEM): gRPC clients must present a certificate signed by it (mutual TLS on --grpc-addr)", bind: str(func(c *Config) *string { return &c.GRPCTLSClientCA })},
	{name: "grpc-tls-client-san", def: "", usage: "a DNS name or IP address gRPC clients' certificates must carry (with --grpc-tls-client-ca)", bind: str(func(c *Config) *string { return &c.GRPCTLSClientSAN })},
	{name: "protected-mode", def: "true", usage: "without a password, accept loopback clients only", bind: boolean(func(c *Config) *bool { return &c.ProtectedMode })},
	{name: "timeout", def: "0", usage: "close a client connection idle this long (0: never): whole seconds, like Redis's timeout, or a duration such as 5m", bind: seconds(func(c *Config) *time.Duration { return &c.Timeout })},
	{name: "auth-timeout", def: "10", usage: "close a client connection that has not authenticated this long after connecting, when a password is required (0: never): whole seconds or a duration", bind: seconds(func(c *Config) *time.Duration { return &c.AuthTimeout })},
	{name: "maxclients", def: "10000", usage: "maximum simultaneous client connections (also --max-clients, SLUICE_MAX_CLIENTS)", bind: num(func(c *Config) *int { return &c.MaxClients })},
	{name: "max-buckets", def: "10000000", usage: "maximum live buckets; at the bound a full bucket makes room, else calls needing a new bucket are refused", bind: num(func(c *Config) *int { return &c.MaxBuckets })},
	{name: "max-data-memory", def: "268435456", usage: "maximum bytes of the data commands' keys and values (SET, INCR, HSET …) on this node, overheads included; a write past it, or past --max-buckets keys, is refused with Redis's OOM error", bind: num(func(c *Config) *int { return &c.MaxDataMemory })},
	{name: "script-time-limit", def: "5s", usage: "how long one Lua script (EVAL, EVALSHA) may run before it is stopped; SCRIPT KILL stops one that has not written sooner", bind: dur(func(c *Config) *time.Duration { return &c.ScriptTimeLimit })},
	{name: "script-native", def: "true", usage: "run the rate-limit libraries' scripts sluice recognises as built-in operations (false: every script in the Lua interpreter)", bind: boolean(func(c *Config) *bool { return &c.ScriptNative })},
	{name: "max-quota-counters", def: "1000000", usage: "maximum committed calendar quota counters; calls that would start another are refused (0: no limit)", bind: num(func(c *Config) *int { return &c.MaxQuotas })},
	{name: "max-reservations", def: "1000000", usage: "maximum open reservations (RL.RESERVE) on this node; one more is refused until some are settled, released or expire", bind: num(func(c *Config) *int { return &c.MaxReservations })},
	{name: "reservation-ttl", def: "60s", usage: "how long a reservation lives when RL.RESERVE gives no TTL; it is then settled at its estimate", bind: dur(func(c *Config) *time.Duration { return &c.ReservationTTL })},
	{name: "max-key-len", def: "1024", usage: "maximum key or budget path length in bytes", bind: num(func(c *Config) *int { return &c.MaxKeyLen })},
	{name: "max-bulk-len", def: "33554432", usage: "maximum length of one RESP argument in bytes", bind: num(func(c *Config) *int { return &c.MaxBulkLen })},
	{name: "max-client-buffers", def: "1073741824", usage: "maximum bytes of every client connection's read buffer and queued transaction together, the collector's garbage of them included (the buffers are admitted to seven eighths of it); a command that would grow a read buffer past it is refused and its connection closed, one that would grow a transaction's queue is refused", bind: num(func(c *Config) *int { return &c.MaxClientBuffers })},
	{name: "max-args", def: "4096", usage: "maximum arguments in one command", bind: num(func(c *Config) *int { return &c.MaxArgs })},
	{name: "shards", def: "0", usage: "bucket store shards (0: sized to the machine)", bind: num(func(c *Config) *int { return &c.Shards })},
	{name: "apply-timeout", def: "5s", usage: "how long a configuration write may wait for a leader and its commit", bind: dur(func(c *Config) *time.Duration { return &c.ApplyTimeout })},
	{name: "loading-timeout", def: "30s", usage: "how long a starting node answers limiting calls with LOADING while it catches up with the cluster, at most, before it decides from the last tree it applied (0: until caught up, however long)", bind: dur(func(c *Config) *time.Duration { return &c.LoadingTimeout })},
	{name: "sync-interval", def: "100ms", usage: "how often nodes exchange consumption", bind: dur(func(c *Config) *time.Duration { return &c.SyncInterval })},
	{name: "shutdown-timeout", def: "10s", usage: "how long SIGTERM waits for in-flight replies", bind: dur(func(c *Config) *time.Duration { return &c.ShutdownTimeout })},
	{name: "log-level", def: "info", usage: "debug, info, warn or error", bind: str(func(c *Config) *string { return &c.LogLevel })},
	{name: "log-format", def: "text", usage: "text or json", bind: str(func(c *Config) *string { return &c.LogFormat })},
	{name: "pprof", def: "false", usage: "serve Go's /debug/pprof/ on --http-addr (CPU and heap profiles)", bind: boolean(func(c *Config) *bool { return &c.Pprof })},
	{name: "config", def: "", usage: "settings file: one 'name value' per line, names as the flags", bind: str(func(c *Config) *string { return &c.ConfigFile })},
}

// EnvName returns the environment variable of a setting: SLUICE_ and the
// flag name upper-cased with '-' as '_'.
func EnvName(name string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// SettingNames returns every setting's flag name.
func SettingNames() []string {
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = s.name
	}
	return out
}

func newFlagSet(c *Config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(out)
	for _, s := range settings {
		s.bind(c, fs, s.name, s.usage+" (env "+EnvName(s.name)+")", s.def)
	}
	for alias, name := range aliases {
		f := fs.Lookup(name)
		fs.Var(f.Value, alias, f.Usage)
	}
	fs.Usage = func() {
		fmt.Fprintln(out, "Usage of sluice:")
		printGrouped(fs, out)
	}
	return fs
}

// aliases are other names of settings: maxclients is Redis's name, and
// max-clients the one its neighbours (max-buckets, max-args) suggest.
// Both are taken as flags, SLUICE_* variables and --config lines.
var aliases = map[string]string{"max-clients": "maxclients"}

// helpGroups orders the flags of --help by concern; every setting is in
// exactly one (TestHelpIsGrouped).
var helpGroups = []struct {
	title string
	names []string
}{
	{"Listeners", []string{"resp-addr", "http-addr", "grpc-addr", "grpc-max-connection-age", "grpc-max-connection-age-grace", "advertise"}},
	{"Cluster", []string{"raft-addr", "node-id", "data-dir", "bootstrap-peers", "join", "bootstrap-expect", "voters", "apply-timeout", "loading-timeout", "sync-interval"}},
	{"Security", []string{"requirepass", "peer-password", "acl-file", "tls-cert", "tls-key", "tls-ca", "grpc-tls-cert", "grpc-tls-key", "grpc-tls-client-ca", "grpc-tls-client-san", "protected-mode", "auth-timeout"}},
	{"Limits", []string{"budgets", "max-buckets", "max-data-memory", "script-time-limit", "script-native", "max-quota-counters", "max-reservations", "reservation-ttl", "max-key-len", "shards"}},
	{"Clients", []string{"maxclients", "timeout", "max-bulk-len", "max-args", "max-client-buffers"}},
	{"Envoy", []string{"envoy-config", "statsd-addr", "statsd-protocol", "statsd-flush-interval", "statsd-tags"}},
	{"Logging and operations", []string{"log-level", "log-format", "pprof", "shutdown-timeout", "config"}},
}

// printGrouped writes the flags by group, each as the docs write it
// (--name), with its value's kind, its use, environment variable and
// default.
func printGrouped(fs *flag.FlagSet, out io.Writer) {
	for _, g := range helpGroups {
		fmt.Fprintf(out, "\n%s:\n", g.title)
		for _, name := range g.names {
			f := fs.Lookup(name)
			if f == nil {
				continue
			}
			kind, use := flag.UnquoteUsage(f)
			switch f.Value.(type) {
			case intValue:
				kind = "int"
			case durValue:
				kind = "duration"
			case secondsValue:
				kind = "seconds"
			}
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
				kind = ""
			}
			line := "  --" + f.Name
			for alias, of := range aliases {
				if of == name {
					line += ", --" + alias
				}
			}
			if kind != "" {
				line += " " + kind
			}
			if f.DefValue != "" && f.DefValue != "0s" && !(kind == "" && f.DefValue == "false") {
				use += " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(out, "%s\n      %s\n", line, use)
		}
	}
}

// ErrHelp is returned by Load when -h or --help was asked for.
var ErrHelp = flag.ErrHelp

// Load builds a Config from defaults, then the --config file, then
// SLUICE_* variables (looked up with getenv), then args: each later source
// overrides the earlier. It does not validate.
func Load(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	var c Config
	// Parse the flags once only to find --config (flag or environment).
	probe := newFlagSet(&c, io.Discard)
	_ = probe.Parse(args)
	file := c.ConfigFile
	if v := getenv(EnvName("config")); v != "" && !flagGiven(probe, "config") {
		file = v
	}
	c = Config{}
	from := map[string]string{}
	fs := newFlagSet(&c, usage)
	if file != "" {
		vals, err := readConfigFile(file)
		if err != nil {
			return c, err
		}
		for _, kv := range vals {
			if err := fs.Set(kv[0], kv[1]); err != nil {
				return c, fmt.Errorf("config file %s: %s: %v", file, kv[0], err)
			}
			from[kv[0]] = kv[0] + " in " + file
		}
	}
	for alias, name := range aliases {
		if v, ok := lookupEnv(getenv, EnvName(alias)); ok {
			if err := fs.Set(name, v); err != nil {
				return c, fmt.Errorf("%s: %v", EnvName(alias), err)
			}
			from[name] = EnvName(alias)
		}
	}
	for _, s := range settings {
		if v, ok := lookupEnv(getenv, EnvName(s.name)); ok {
			if err := fs.Set(s.name, v); err != nil {
				return c, fmt.Errorf("%s: %v", EnvName(s.name), err)
			}
			from[s.name] = EnvName(s.name)
		}
	}
	if err := fs.Parse(args); err != nil {
		return c, flagError(err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (settings are flags: --name value)", fs.Arg(0))
	}
	probe.Visit(func(f *flag.Flag) { from[f.Name] = "--" + f.Name })
	c.ConfigFile = file
	c.from = from
	return c, nil
}

var (
	unknownFlag = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	badValue    = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]*): (.*)$`)
	noValue     = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError words a flag package error as one line naming the flag the way
// the docs write it (--name), what it got and what it takes.
func flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	if m := unknownFlag.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("unknown flag --%s (see sluice --help)", m[1])
	}
	if m := noValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s needs a value", m[1])
	}
	if m := badValue.FindStringSubmatch(msg); m != nil {
		why := m[3]
		if why == "parse error" { // a boolean
			why = fmt.Sprintf("%q is not a boolean; use true or false", m[1])
		}
		return fmt.Errorf("--%s: %s", m[2], why)
	}
	return err
}

func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			given = true
		}
	})
	return given
}

// readConfigFile reads "name value" lines; '#' starts a comment; values may
// be double-quoted.
func readConfigFile(path string) ([][2]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %v", err)
	}
	defer f.Close()
	known := map[string]bool{}
	for _, s := range settings {
		known[s.name] = true
	}
	for alias := range aliases {
		known[alias] = true
	}
	var out [][2]string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, _ := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimSpace(name), "--")
		value = strings.TrimSpace(value)
		if uq, err := strconv.Unquote(value); err == nil && strings.HasPrefix(value, `"`) {
			value = uq
		}
		if !known[name] || name == "config" {
			return nil, fmt.Errorf("config file %s line %d: unknown setting %q", path, n, name)
		}
		out = append(out, [2]string{name, value})
	}
	return out, sc.Err()
}

// WithDefaults returns the settings with those derived from others filled
// in, as the node runs them: --advertise defaults to --resp-addr (with
// 127.0.0.1 for an address that listens on all interfaces), --node-id to
// --raft-addr (unless its port is 0: the node then takes the address it
// binds). It does not check anything; Validate does.
func (c *Config) WithDefaults() Config {
	d := *c
	if d.Advertise == "" {
		d.Advertise = d.RespAddr
		if host, port, err := net.SplitHostPort(d.RespAddr); err == nil {
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				d.Advertise = net.JoinHostPort("127.0.0.1", port)
			}
		}
	}
	if d.BootstrapExpect == 0 && isDNSJoin(d.Join) {
		d.BootstrapExpect = defaultBootstrapExpect
	}
	if d.NodeID == "" && !strings.HasSuffix(d.RaftAddr, ":0") {
		d.NodeID = d.RaftAddr
	}
	return d
}

// Validate checks the settings as a whole, as the node will run them (with
// the defaults of WithDefaults); it does not change c. Its errors name the
// setting at fault and what it accepts.
// maxVoters bounds --voters: past 7, every commit waits for more nodes and
// more of them must agree on each election, for no gain in availability
// that a team growing for capacity needs.
const maxVoters = 7

func (c *Config) Validate() error {
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", name, fmt.Sprintf(format, a...)))
	}
	hostPort := func(name, v string, allowEmpty, allowUnspecified bool) {
		if v == "" {
			if !allowEmpty {
				bad(name, "must be host:port")
			}
			return
		}
		host, port, err := net.SplitHostPort(v)
		if err != nil {
			bad(name, "must be host:port, got %q", v)
			return
		}
		if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			bad(name, "port must be 0–65535, got %q", port)
		}
		if !allowUnspecified {
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				bad(name, "must be an address other nodes can reach, not %q", v)
			}
		}
	}
	hostPort("resp-addr", c.RespAddr, false, true)
	hostPort("http-addr", c.HTTPAddr, true, true)
	if path, ok := unixSocket(c.GRPCAddr); ok {
		if path == "" {
			bad("grpc-addr", "unix: needs the socket's path (unix:/run/sluice/grpc.sock)")
		}
	} else {
		hostPort("grpc-addr", c.GRPCAddr, true, true)
	}
	if c.GRPCMaxConnectionAge < 0 || c.GRPCMaxConnectionAgeGrace < 0 {
		bad("grpc-max-connection-age", "and --grpc-max-connection-age-grace must be 0 or more")
	}
	if c.GRPCMaxConnectionAgeGrace > 0 && c.GRPCMaxConnectionAge == 0 {
		bad("grpc-max-connection-age-grace", "applies after --grpc-max-connection-age: set it too")
	}
	hostPort("raft-addr", c.RaftAddr, false, false)
	if c.Advertise == "" {
		// The default, 127.0.0.1, reaches no other node.
		if host, _, err := net.SplitHostPort(c.RespAddr); err == nil {
			if ip := net.ParseIP(host); (host == "" || (ip != nil && ip.IsUnspecified())) && (c.BootstrapPeers != "" || c.Join != "") {
				bad("advertise", "is required when --resp-addr listens on all interfaces (%q) in a cluster", c.RespAddr)
			}
		}
	} else {
		hostPort("advertise", c.Advertise, false, false)
	}
	if c.EnvoyConfig != "" && c.GRPCAddr == "" {
		bad("envoy-config", "is served on the gRPC listener: set --grpc-addr too")
	}
	if c.StatsdAddr != "" {
		hostPort("statsd-addr", c.StatsdAddr, false, true)
		if c.GRPCAddr == "" {
			bad("statsd-addr", "sends the stats of the gRPC listener: set --grpc-addr too")
		}
		if c.StatsdProtocol != "udp" && c.StatsdProtocol != "tcp" {
			bad("statsd-protocol", "must be udp or tcp")
		}
		if c.StatsdFlushInterval <= 0 {
			bad("statsd-flush-interval", "must be a positive duration")
		}
		if _, err := envoyrls.ParseStatsdTags(c.StatsdTags); err != nil {
			bad("statsd-tags", "%v", err)
		}
	}
	if c.Ratelimit != nil && c.Ratelimit.XDS != nil {
		if c.EnvoyConfig != "" {
			bad("envoy-config", "cannot be used with CONFIG_TYPE=GRPC_XDS_SOTW: the rules come from the xDS server")
		}
		if c.GRPCAddr == "" {
			bad("grpc-addr", "must be set with CONFIG_TYPE=GRPC_XDS_SOTW: the rules are served on the gRPC listener")
		}
	}
	if c.DataDir == "" {
		bad("data-dir", "must not be empty")
	}
	if strings.ContainsAny(c.WithDefaults().NodeID, " ,=\r\n") {
		bad("node-id", "must not contain spaces, commas or '='")
	}
	if c.BootstrapPeers != "" && c.Join != "" {
		bad("join", "cannot be combined with --bootstrap-peers")
	}
	if c.BootstrapPeers != "" {
		if _, err := ParsePeers(c.BootstrapPeers); err != nil {
			bad("bootstrap-peers", "%v", err)
		}
	}
	switch {
	case isDNSJoin(c.Join):
		if _, err := parseDNSJoin(c.Join); err != nil {
			bad("join", "%v", err)
		}
	case c.Join != "":
		hostPort("join", c.Join, false, false)
	}
	if c.BootstrapExpect != 0 && !isDNSJoin(c.Join) {
		bad("bootstrap-expect", "applies only with --join dns:NAME, got %d", c.BootstrapExpect)
	} else if c.BootstrapExpect < 0 || c.BootstrapExpect > 64 {
		bad("bootstrap-expect", "must be between 1 and 64 (0: %d), got %d", defaultBootstrapExpect, c.BootstrapExpect)
	}
	if c.Voters < 1 || c.Voters > maxVoters {
		bad("voters", "must be between 1 and %d (odd recommended), got %d", maxVoters, c.Voters)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls-cert", "and --tls-key must be given together")
	}
	if c.TLSCA != "" && c.TLSCert == "" {
		bad("tls-ca", "needs --tls-cert and --tls-key")
	}
	if (c.GRPCTLSCert == "") != (c.GRPCTLSKey == "") {
		bad("grpc-tls-cert", "and --grpc-tls-key must be given together")
	}
	if (c.GRPCTLSCert != "" || c.GRPCTLSClientCA != "") && c.GRPCAddr == "" {
		bad("grpc-tls-cert", "applies to the gRPC listener: set --grpc-addr too")
	}
	if c.GRPCTLSClientCA != "" && c.GRPCTLSCert == "" && c.TLSCert == "" {
		bad("grpc-tls-client-ca", "needs TLS on --grpc-addr: --grpc-tls-cert and --grpc-tls-key (or --tls-cert and --tls-key)")
	}
	if c.GRPCTLSClientSAN != "" && c.GRPCTLSClientCA == "" {
		bad("grpc-tls-client-san", "needs --grpc-tls-client-ca: without it no client certificate is asked for, so its name cannot be checked")
	}
	for _, f := range []struct{ name, path string }{{"tls-cert", c.TLSCert}, {"tls-key", c.TLSKey}, {"tls-ca", c.TLSCA},
		{"grpc-tls-cert", c.GRPCTLSCert}, {"grpc-tls-key", c.GRPCTLSKey}, {"grpc-tls-client-ca", c.GRPCTLSClientCA}, {"acl-file", c.ACLFile}} {
		if f.path != "" {
			if _, err := os.Stat(f.path); err != nil {
				bad(f.name, "cannot read %q: %v", f.path, errors.Unwrap(err))
			}
		}
	}
	if c.Budgets != "" {
		// Read now: a node that cannot seed its budget tree must not start
		// with an empty one.
		if _, err := ReadBudgets(c.Budgets); err != nil {
			errs = append(errs, err)
		}
	}
	intRange := func(name string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(name, "must be between %d and %d, got %d", lo, hi, v)
		}
	}
	intRange("maxclients", c.MaxClients, 1, 1_000_000)
	if c.Timeout < 0 || c.Timeout > 365*24*time.Hour {
		bad("timeout", "must be between 0 and 31536000 seconds, got %d", int64(c.Timeout/time.Second))
	}
	if c.AuthTimeout < 0 || c.AuthTimeout > time.Hour {
		bad("auth-timeout", "must be between 0 and 3600 seconds, got %d", int64(c.AuthTimeout/time.Second))
	}
	intRange("max-buckets", c.MaxBuckets, 1000, 1<<32)
	intRange("max-data-memory", c.MaxDataMemory, 1<<20, 1<<40)
	if c.ScriptTimeLimit < time.Millisecond || c.ScriptTimeLimit > time.Hour {
		bad("script-time-limit", "must be between 1ms and 1h, got %v", c.ScriptTimeLimit)
	}
	intRange("max-quota-counters", c.MaxQuotas, 0, 1<<32)
	intRange("max-key-len", c.MaxKeyLen, 16, 16<<10)
	intRange("max-reservations", c.MaxReservations, 1, 100_000_000)
	if c.ReservationTTL < time.Second || c.ReservationTTL > time.Hour {
		bad("reservation-ttl", "must be between 1s and 1h, got %v", c.ReservationTTL)
	}
	intRange("max-bulk-len", c.MaxBulkLen, 1024, 512<<20)
	intRange("max-args", c.MaxArgs, 16, 1<<20)
	if c.MaxClientBuffers < 2*c.MaxBulkLen || c.MaxClientBuffers > 1<<40 {
		bad("max-client-buffers", "must be between twice --max-bulk-len (%d, so that one command of the largest size fits) and %d, got %d",
			2*c.MaxBulkLen, int64(1)<<40, c.MaxClientBuffers)
	}
	intRange("shards", c.Shards, 0, 4096)
	if c.ApplyTimeout < 100*time.Millisecond || c.ApplyTimeout > 10*time.Minute {
		bad("apply-timeout", "must be between 100ms and 10m, got %v", c.ApplyTimeout)
	}
	if c.LoadingTimeout != 0 && (c.LoadingTimeout < time.Second || c.LoadingTimeout > time.Hour) {
		bad("loading-timeout", "must be 0 (until caught up) or between 1s and 1h, got %v", c.LoadingTimeout)
	}
	if c.SyncInterval < 10*time.Millisecond || c.SyncInterval > time.Minute {
		bad("sync-interval", "must be between 10ms and 1m, got %v", c.SyncInterval)
	}
	if c.ShutdownTimeout < 0 || c.ShutdownTimeout > 10*time.Minute {
		bad("shutdown-timeout", "must be between 0s and 10m, got %v", c.ShutdownTimeout)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "warning", "error":
	default:
		bad("log-level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		bad("log-format", "must be text or json, got %q", c.LogFormat)
	}
	return errors.Join(errs...)
}

// placeholders are passwords that examples ship (docker-compose.yml,
// deploy/sluice.conf, the docs) or that are known stand-ins, compared
// after normalizing: lower case, letters and digits only.
var (
	placeholderPrefixes = []string{"changeme", "replaceme", "yourpassword", "yoursecret", "placeholder", "insertpassword", "alongrandom", "thesamepassword"}
	placeholderWords    = map[string]bool{"password": true, "secret": true, "foobared": true, "sluice": true, "admin": true, "default": true, "xxx": true, "todo": true}
)

// IsPlaceholder reports whether pw is a stand-in that must be replaced
// before a node may use it, such as "change-me".
func IsPlaceholder(pw string) bool {
	var b strings.Builder
	for _, r := range strings.ToLower(pw) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	n := b.String()
	if n == "" { // "********" as CONFIG GET shows it, "…", "<...>"
		return pw != "" && strings.Trim(pw, "*.…<>_- ") == ""
	}
	for _, p := range placeholderPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return placeholderWords[n]
}

// CheckSecrets refuses passwords that are placeholders (IsPlaceholder),
// naming where each was set: the flag, the SLUICE_* variable or the config
// file. Validate does not call it, so that shipped examples still load in
// tests; the binary calls both before it starts.
func (c *Config) CheckSecrets() error {
	var errs []error
	for _, s := range []struct{ name, value string }{{"requirepass", c.RequirePass}, {"peer-password", c.PeerPassword}} {
		if s.value == "" || !IsPlaceholder(s.value) {
			continue
		}
		where := "--" + s.name
		if f := c.from[s.name]; f != "" && f != where {
			where = f + " (--" + s.name + ")"
		}
		errs = append(errs, fmt.Errorf("%s: %q is a placeholder, not a password: set a long random one, e.g. from `openssl rand -hex 24` (ACL file users take its hash: `sluice hash-password`)", where, s.value))
	}
	return errors.Join(errs...)
}

// Settings lists the settings as CONFIG GET shows them (secrets masked),
// sorted by name.
func (c *Config) Settings() [][2]string {
	var view Config
	fs := newFlagSet(&view, io.Discard)
	view = *c // the flags point into view: now they show c's values
	var out [][2]string
	for _, s := range settings {
		v := fs.Lookup(s.name).Value.String()
		if s.secret && v != "" {
			v = "********"
		}
		out = append(out, [2]string{s.name, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// Peer is one member of --bootstrap-peers.
type Peer struct {
	ID       string
	RaftAddr string
	RespAddr string
}

// ParsePeers parses "id=raftaddr=respaddr,…".
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(strings.TrimSpace(part), "=")
		if len(f) != 3 || f[0] == "" {
			return nil, fmt.Errorf("each peer must be id=raftaddr=respaddr, got %q", part)
		}
		for _, a := range f[1:] {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("peer %s: %q is not host:port", f[0], a)
			}
		}
		if seen[f[0]] {
			return nil, fmt.Errorf("peer id %q appears twice", f[0])
		}
		seen[f[0]] = true
		out = append(out, Peer{ID: f[0], RaftAddr: f[1], RespAddr: f[2]})
	}
	return out, nil
}
