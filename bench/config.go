package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/flagx"
)

// Limits of the flags. maxConns keeps the per-connection latency
// histograms (about 140 KB each) within a few hundred megabytes.
const (
	maxConns     = 4096
	maxPipeline  = 10000
	maxRequests  = 1_000_000_000_000
	maxKeySpace  = 1_000_000_000_000
	maxRateArg   = 1_000_000_000_000 // the server's own bound on RATE and BURST
	maxTreeNodes = 1_000_000
	maxDuration  = 24 * time.Hour
	minZipfS     = 1.0 // exclusive: math/rand/v2's Zipf needs s > 1
	maxZipfS     = 10.0
)

// Config is one run of the load generator, as the flags describe it.
type Config struct {
	Targets     []string      // host:port; connection i goes to Targets[i%len]
	Password    string        // AUTH before the run when not empty
	User        string        // AUTH user, with Password
	Conns       int           // connections
	Pipeline    int           // commands written per batch
	Requests    int64         // total requests; 0 when Duration is set
	Duration    time.Duration // run length; 0 when Requests is set
	KeySpace    uint64        // keys are key:0 … key:KeySpace-1
	Dist        string        // "uniform" or "zipf"
	ZipfS       float64       // Zipf exponent, > 1
	Mix         Mix           // command kinds and their weights
	Rate        int64         // RATE of acquire, count of throttle, of evalsha
	Burst       int64         // BURST of acquire, max_burst of throttle, of evalsha
	Per         string        // PER of acquire ("" sends none); throttle's period
	Algo        string        // ALGO of acquire ("" sends none)
	Partners    int           // budget tree: partners under system
	Tenants     int           // budget tree: tenants under each partner
	EvalSHA     string        // script of the evalsha kind
	Seed        int64         // seeds every connection's generator
	RateLimit   int64         // requests/s over all connections; 0 runs flat out
	Timeout     time.Duration // dial, AUTH and setup replies; a stall longer than this ends the run
	JSON        bool          // report as JSON
	ThrottlePer int64         // throttle's period in whole seconds, derived from Per
	// GRPC drives Envoy's rate limit service (ShouldRateLimit) at the
	// targets instead of RESP; Domain is the requests' domain.
	GRPC   bool
	Domain string
	// Descriptors is how many descriptors a --grpc request carries, each
	// (key, key:N) with its own N; NoOverride sends them without a limit
	// override, for the server's rules to limit.
	Descriptors int
	NoOverride  bool
}

// usageText heads the --help output; the flags follow.
const usageText = `Usage: go run ./bench [flags]

A load generator for sluice (and any server that speaks RESP2): -c
connections, each writing -P commands per batch, drawn from a --mix of
command kinds over a key space of -r keys. It reports throughput, the
limiting decisions (admitted, denied, degraded), errors and latency
percentiles.

Exit status: 0 when every reply was a valid answer, 1 when the run failed,
was interrupted or some replies were errors, 2 for bad flags.

Flags (- and -- are the same):
`

// rawFlags are the flags read as text (or noted as given) and turned into
// Config fields only once all flags are known.
type rawFlags struct {
	mix, per, dur, timeout string
	nGiven                 bool
}

// newFlagSet binds every flag to c and raw, with the defaults set.
func newFlagSet(c *Config, raw *rawFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	*c = Config{
		Targets: []string{"127.0.0.1:6380"}, Conns: 50, Pipeline: 1, Requests: 100000,
		KeySpace: 100000, Dist: "uniform", ZipfS: 1.1, Rate: 100, Burst: 100,
		Partners: 10, Tenants: 10, Seed: 1, Timeout: 10 * time.Second, Descriptors: 1,
	}
	*raw = rawFlags{mix: "acquire=100", timeout: "10s"}
	fs.Var(&targetList{list: &c.Targets}, "h", "target `host:port`; repeat or separate with commas to spread connections round-robin")
	fs.StringVar(&c.Password, "a", "", "`password` sent with AUTH on every connection before the run")
	fs.StringVar(&c.User, "user", "", "`name` for AUTH user password (needs -a)")
	fs.Var(flagx.Int[int]{P: &c.Conns, Lo: 1, Hi: maxConns}, "c", "number of `connections`")
	fs.Var(flagx.Int[int]{P: &c.Pipeline, Lo: 1, Hi: maxPipeline}, "P", "pipeline `depth`: commands written in one batch")
	fs.Var(flagx.Int[int64]{P: &c.Requests, Lo: 1, Hi: maxRequests, Given: &raw.nGiven}, "n", "total `requests` (exclusive with -d)")
	fs.StringVar(&raw.dur, "d", "", "run for a `duration` such as 30s or 5m, or whole seconds (exclusive with -n)")
	fs.Var(flagx.Uint{P: &c.KeySpace, Lo: 1, Hi: maxKeySpace}, "r", "key space `size`: keys key:0 … key:r-1")
	fs.StringVar(&c.Dist, "dist", c.Dist, "key `distribution`: uniform or zipf")
	fs.Var(flagx.Float{P: &c.ZipfS, Lo: minZipfS, Hi: maxZipfS}, "zipf-s", "Zipf `exponent` s > 1; larger is more skewed")
	fs.StringVar(&raw.mix, "mix", raw.mix, "command `mix` kind=weight,…; kinds: "+strings.Join(kindNames(), ", "))
	fs.Var(flagx.Int[int64]{P: &c.Rate, Lo: 1, Hi: maxRateArg}, "rate", "`tokens` per window of acquire, throttle and evalsha")
	fs.Var(flagx.Int[int64]{P: &c.Burst, Lo: 1, Hi: maxRateArg}, "burst", "burst `capacity` of acquire and evalsha, max_burst of throttle")
	fs.StringVar(&raw.per, "per", "", "`window` of acquire (PER) and throttle's period: second, minute, hour, day, week or a duration (default second)")
	fs.StringVar(&c.Algo, "algo", "", "`algorithm` of acquire (ALGO): "+strings.Join(algoNames, ", ")+" (default: the server's)")
	fs.Var(flagx.Int[int]{P: &c.Partners, Lo: 1, Hi: maxTreeNodes}, "tree-partners", "budget tree: `partners` under system")
	fs.Var(flagx.Int[int]{P: &c.Tenants, Lo: 1, Hi: maxTreeNodes}, "tree-tenants", "budget tree: `tenants` under each partner")
	fs.StringVar(&c.EvalSHA, "evalsha", "", "`sha1` of a loaded script for the evalsha kind: EVALSHA sha 1 key rate burst")
	fs.Var(flagx.Int[int64]{P: &c.Seed, Lo: math.MinInt64, Hi: math.MaxInt64}, "seed", "`seed` of the key and mix generators; each connection derives its own")
	fs.Var(flagx.Int[int64]{P: &c.RateLimit, Lo: 0, Hi: maxRequests}, "rate-limit", "open loop: send `N` requests/s over all connections; 0 runs as fast as the server answers")
	fs.StringVar(&raw.timeout, "timeout", raw.timeout, "`duration` allowed to connect and for any reply to arrive")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&c.GRPC, "grpc", false, "drive Envoy's rate limit service (ShouldRateLimit over gRPC) at -h, sluice's --grpc-addr: one descriptor (key, key:N) per request with a limit override of --rate per --per (it counts only if the server has rules for --domain, as in envoyproxy/ratelimit); -P calls in flight per connection; mix acquire only")
	fs.StringVar(&c.Domain, "domain", "bench", "`domain` of the --grpc requests")
	fs.Var(flagx.Int[int]{P: &c.Descriptors, Lo: 1, Hi: 64}, "descriptors", "`count` of descriptors in each --grpc request, each (key, key:N) with its own N")
	fs.BoolVar(&c.NoOverride, "no-override", false, "send the --grpc descriptors without a limit override: the server's rules for (key, …) limit them")
	return fs
}

// parseArgs parses and validates the command line. It returns
// flag.ErrHelp, having written the usage to help, when asked for help.
func parseArgs(args []string, help io.Writer) (Config, error) {
	var c Config
	var raw rawFlags
	fs := newFlagSet(&c, &raw)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(help, usageText)
			fs.SetOutput(help)
			fs.PrintDefaults()
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	var err error
	if c.Mix, err = parseMix(raw.mix); err != nil {
		return c, err
	}
	if raw.dur != "" {
		if raw.nGiven {
			return c, errors.New("-n and -d are exclusive: give a request count or a duration")
		}
		if c.Duration, err = parseDuration(raw.dur, time.Millisecond, maxDuration); err != nil {
			return c, fmt.Errorf("-d %v", err)
		}
		c.Requests = 0
	}
	if c.Timeout, err = parseDuration(raw.timeout, time.Millisecond, time.Hour); err != nil {
		return c, fmt.Errorf("--timeout %v", err)
	}
	if c.Dist != "uniform" && c.Dist != "zipf" {
		return c, fmt.Errorf("--dist must be uniform or zipf (got %q)", c.Dist)
	}
	if c.User != "" && c.Password == "" {
		return c, errors.New("--user needs a password: give -a as well")
	}
	if c.Algo != "" && !slices.Contains(algoNames, c.Algo) {
		return c, fmt.Errorf("--algo must be one of %s (got %q)", strings.Join(algoNames, ", "), c.Algo)
	}
	c.ThrottlePer = 1
	if raw.per != "" {
		d, ok := bounds.ParseWindow([]byte(raw.per))
		if !ok {
			return c, fmt.Errorf("%s (got %q)", bounds.WindowMsg("--per"), raw.per)
		}
		c.Per = raw.per
		c.ThrottlePer = int64(d / time.Second)
		if c.Mix.Has(kindThrottle) && (d%time.Second != 0) {
			return c, fmt.Errorf("--per must be a whole number of seconds when the mix has throttle (CL.THROTTLE takes its period in seconds; got %q)", raw.per)
		}
	}
	if c.Mix.Has(kindEvalSHA) && !shaRe.MatchString(c.EvalSHA) {
		return c, fmt.Errorf("--evalsha must be the 40-hex-digit SHA1 of a loaded script when the mix has evalsha (got %q)", c.EvalSHA)
	}
	if c.GRPC {
		if c.Mix.String() != "acquire=100" {
			return c, fmt.Errorf("--grpc sends ShouldRateLimit only: give --mix acquire=100 (got %q)", c.Mix.String())
		}
		if c.RateLimit > 0 {
			return c, errors.New("--grpc runs closed-loop: --rate-limit is for RESP runs")
		}
		if _, ok := grpcUnit(c.Per); !ok {
			return c, fmt.Errorf("--per must be second, minute, hour or day with --grpc (an Envoy limit's unit; got %q)", c.Per)
		}
		if c.Domain == "" {
			return c, errors.New("--domain must not be empty")
		}
	}
	if c.Mix.HasBudget() && int64(c.Partners)*int64(c.Tenants) > maxTreeNodes {
		return c, fmt.Errorf("--tree-partners × --tree-tenants must be at most %d (got %d × %d)", maxTreeNodes, c.Partners, c.Tenants)
	}
	return c, nil
}

var shaRe = regexp.MustCompile(`^[0-9a-fA-F]{40}$`)

// algoNames are the values of ALGO the server accepts.
var algoNames = engine.AlgoNames()

// parseDuration reads a Go duration ("30s", "1m30s") or whole seconds
// ("30") within [lo, hi].
func parseDuration(s string, lo, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.ParseInt(s, 10, 64)
		if nerr != nil || n > int64(hi/time.Second) {
			return 0, fmt.Errorf("must be a duration such as 30s or 5m, or whole seconds, between %v and %v (got %q)", lo, hi, s)
		}
		d = time.Duration(n) * time.Second
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("must be a duration between %v and %v (got %q)", lo, hi, s)
	}
	return d, nil
}

// targetList is the repeatable -h flag; the first use replaces the default.
type targetList struct {
	list *[]string
	set  bool
}

func (t *targetList) String() string {
	if t.list == nil {
		return ""
	}
	return strings.Join(*t.list, ",")
}

func (t *targetList) Set(v string) error {
	if !t.set {
		*t.list, t.set = nil, true
	}
	for _, a := range strings.Split(v, ",") {
		a = strings.TrimSpace(a)
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			return fmt.Errorf("must be host:port (got %q)", a)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("port must be an integer between 1 and 65535 (got %q)", a)
		}
		*t.list = append(*t.list, a)
	}
	return nil
}
