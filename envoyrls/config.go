package envoyrls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/quota"
)

// Unit is a limit's unit as Envoy's RateLimitResponse names it.
type Unit = rlsv3.RateLimitResponse_RateLimit_Unit

// unitWindows are the units envoyproxy/ratelimit accepts and the fixed
// window each stands for (a month is 30 days and a year 365, as there).
var unitWindows = map[string]struct {
	unit   Unit
	window time.Duration
}{
	"second": {rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"month":  {rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"year":   {rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// UnitWindow returns the fixed window of an Envoy unit, 0 for UNKNOWN.
func UnitWindow(u Unit) time.Duration {
	for _, w := range unitWindows {
		if w.unit == u {
			return w.window
		}
	}
	return 0
}

// unitOf returns the Envoy unit whose window is d, UNKNOWN if none.
func unitOf(d time.Duration) Unit {
	for _, w := range unitWindows {
		if w.window == d {
			return w.unit
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// Limit is a rule's rate_limit block.
type Limit struct {
	RequestsPerUnit uint32
	Unit            Unit
	Unlimited       bool
	Name            string
	Replaces        []string
	// Algorithm and Burst are sluice's extensions of the rule format
	// (algorithm:, burst:): how the limit admits, and a bucket's capacity.
	// The peer's rules name neither: a fixed window of requests_per_unit.
	Algorithm engine.Algo
	Burst     int64
	// StreamDone (apply_on_stream_done:, also sluice's) says the rule's
	// costs arrive once the response is done, from Envoy's
	// apply_on_stream_done: a descriptor with hits is charged and never
	// refused (past what is left, as debt the next requests wait out);
	// one with hits_addend 0, the request-time check, is refused while the
	// limit is spent.
	StreamDone bool
	// Timezone (timezone:, also sluice's) makes an hour, day, week, month
	// or year a calendar period in that zone (a day from midnight to
	// midnight, a month from the 1st) rather than a fixed window of its
	// length counted from the Unix epoch; the count is a calendar quota.
	Timezone string

	window   time.Duration
	calendar *quota.Spec   // with Timezone: the quota the rule counts
	calFlag  *quota.Spec   // its over flag (PerDescriptor): one a period
	lim      engine.Limit  // fixed window of RequestsPerUnit; unset when 0 or unlimited
	flag     *engine.Limit // the over flag's limit (PerDescriptor): one a window
}

// Rule is one descriptor of a configuration: a key, an optional value (a
// pattern when it holds '*'), an optional limit and nested rules.
type Rule struct {
	Key, Value     string
	Limit          *Limit
	ShadowMode     bool
	DetailedMetric bool
	ValueToMetric  bool
	ShareThreshold bool
	// QuotaMode (quota_mode, read with LoadOptions.QuotaMode): the rule's
	// refusal fails the request only if every quota rule of it refuses.
	QuotaMode bool
	// Metadata is the rule's metadata, returned in dynamic_metadata with
	// Options.DynamicMetadata; nil when none.
	Metadata *structpb.Struct
	// File and Line say where the rule is written.
	File string
	Line int

	parts  []string // Value split at '*' when it is a pattern
	metric string   // the metrics label: domain.key_value.key…
	// valueLabel: this rule or one above it has value_to_metric, so the
	// label names values of the request.
	valueLabel bool
	children   ruleSet
	childList  *yaml.Node // while loading
}

// Metric is the rule's metrics label: the domain and the composite keys
// of the rules down to it (domain.key_value.key), as envoyproxy/ratelimit
// names its stats.
func (r *Rule) Metric() string { return r.metric }

// ruleSet is one level of rules, by key: a value matched exactly, a
// pattern, or any value.
type ruleSet map[string]*keyRules

type keyRules struct {
	exact    map[string]*Rule
	patterns []*Rule // in the order written
	any      *Rule
}

// Config is a loaded set of envoyproxy/ratelimit configuration files:
// rules by domain. It is immutable once loaded.
type Config struct {
	domains map[string]*domainRules
	files   []string
	opts    LoadOptions
	// warnings are what the files hold that is ignored, one line each.
	warnings []string
}

// LoadOptions say which files a directory contributes and how domains
// written twice combine.
type LoadOptions struct {
	// Tree reads every file below the directory, whatever its name, as
	// envoyproxy/ratelimit's runtime loader does; otherwise only the
	// directory's own *.yaml and *.yml files, and at least one.
	Tree bool
	// IgnoreDotFiles skips files and directories whose names start with a
	// dot (RUNTIME_IGNOREDOTFILES), in a Tree.
	IgnoreDotFiles bool
	// MergeDomains adds the rules of a domain written in several files
	// together (MERGE_DOMAIN_CONFIG); otherwise a second one is an error.
	MergeDomains bool
	// QuotaMode accepts quota_mode: true (envoyproxy/ratelimit's quota
	// rules, answered with Options.PerDescriptor); otherwise it is refused,
	// as it means nothing when descriptors are admitted all together.
	QuotaMode bool
}

// Warnings returns one line for each thing of the files that was ignored,
// such as a known key written where it means nothing.
func (c *Config) Warnings() []string {
	if c == nil {
		return nil
	}
	return c.warnings
}

type domainRules struct {
	name  string
	rules ruleSet
	file  string
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// Files returns the files the configuration was read from.
func (c *Config) Files() []string {
	if c == nil {
		return nil
	}
	return c.files
}

// HasDomain reports whether domain is configured.
func (c *Config) HasDomain(domain string) bool {
	if c == nil {
		return false
	}
	_, ok := c.domains[domain]
	return ok
}

// Entry is one key/value pair of a request's descriptor.
type Entry struct{ Key, Value string }

// Match returns the rule whose limit applies to a descriptor of domain
// with the given entries, as envoyproxy/ratelimit chooses it: level by
// level, an entry matches the rule with its key and value, else the first
// rule of its key whose value pattern matches, else the rule of its key
// with no value; the limit is that of the rule matched by the last entry,
// and only if every entry matched a rule nested in the one before. nil
// when no rule's limit applies.
func (c *Config) Match(domain string, n int, entry func(i int) (key, value string)) *Rule {
	if c == nil {
		return nil
	}
	d := c.domains[domain]
	if d == nil {
		return nil
	}
	set := d.rules
	for i := 0; i < n; i++ {
		key, value := entry(i)
		kr := set[key]
		if kr == nil {
			return nil
		}
		next := kr.exact[value]
		if next == nil {
			for _, r := range kr.patterns {
				if wildcardMatch(r.parts, value) {
					next = r
					break
				}
			}
		}
		if next == nil {
			next = kr.any
		}
		if next == nil {
			return nil
		}
		if i == n-1 {
			if next.Limit == nil {
				return nil
			}
			return next
		}
		if len(next.children) == 0 {
			return nil
		}
		set = next.children
	}
	return nil
}

// wildcardMatch reports whether value matches the pattern split at '*'
// into parts: each '*' stands for any run of characters, possibly empty.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) {
		return false
	}
	value = value[len(first):]
	if len(value) < len(last) || !strings.HasSuffix(value, last) {
		return false
	}
	value = value[:len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(value, p)
		if i < 0 {
			return false
		}
		value = value[i+len(p):]
	}
	return true
}

// LoadConfig reads envoyproxy/ratelimit configuration from path: one YAML
// file, or every *.yaml and *.yml file of a directory (not recursing), in
// name order. Errors name the file and line.
func LoadConfig(path string) (*Config, error) { return LoadConfigWith(path, LoadOptions{}) }

// LoadConfigWith is LoadConfig with the choices of o.
func LoadConfigWith(path string, o LoadOptions) (*Config, error) {
	files, err := configFiles(path, o)
	if err != nil {
		return nil, err
	}
	c := &Config{domains: map[string]*domainRules{}, opts: o}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--envoy-config: %v", err)
		}
		if err := c.add(f, b); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// configFiles lists the files LoadConfig reads from path. It stats the
// path each time (not a descriptor kept open), so that a directory or file
// replaced through a symbolic link, as Kubernetes swaps a ConfigMap, is
// read anew.
func configFiles(path string, o LoadOptions) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--envoy-config: %v", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	if o.Tree {
		return treeFiles(path, o.IgnoreDotFiles)
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("--envoy-config: %v", err)
	}
	var files []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			files = append(files, filepath.Join(path, n))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("--envoy-config: no .yaml or .yml file in the directory %s", path)
	}
	return files, nil
}

// treeFiles lists every regular file below dir (following the links a
// ConfigMap's files are), in name order; with ignoreDot, names starting
// with a dot are skipped, directories with their contents.
func treeFiles(dir string, ignoreDot bool) ([]string, error) {
	// The root itself may be a link (RUNTIME_ROOT's "current" usually is).
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("--envoy-config: %v", err)
	}
	var files []string
	err = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("--envoy-config: %v", err)
		}
		if p == dir {
			return nil
		}
		if ignoreDot && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	return files, err
}

// Fingerprint returns a digest of the names and contents of the files
// LoadConfig would read from path: it changes when, and only when, what
// LoadConfig would load may have changed.
func Fingerprint(path string) (string, error) { return FingerprintWith(path, LoadOptions{}) }

// FingerprintWith is Fingerprint of what LoadConfigWith(path, o) reads.
func FingerprintWith(path string, o LoadOptions) (string, error) {
	files, err := configFiles(path, o)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("--envoy-config: %v", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ParseConfig reads configuration from YAML documents in memory; name is
// the file name its errors give.
func ParseConfig(name string, data []byte) (*Config, error) {
	return ParseConfigWith(name, data, LoadOptions{})
}

// ParseConfigWith is ParseConfig with the choices of o.
func ParseConfigWith(name string, data []byte, o LoadOptions) (*Config, error) {
	c := &Config{domains: map[string]*domainRules{}, opts: o}
	if err := c.add(name, data); err != nil {
		return nil, err
	}
	return c, nil
}

// configError is an error at a line of a file.
type configError struct {
	file string
	line int
	msg  string
}

func (e *configError) Error() string {
	if e.line == 0 { // rules pushed over xDS: no file, no line
		return fmt.Sprintf("%s: %s", e.file, e.msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg)
}

// located says which descriptor an error without a line (rules pushed
// over xDS) is about: the composite key of the rule n below metric.
func located(err error, metric string, n *yaml.Node) error {
	ce, ok := err.(*configError)
	if !ok || ce.line != 0 || n.Kind != yaml.MappingNode {
		return err
	}
	var key, value string
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "key":
			key = n.Content[i+1].Value
		case "value":
			value = n.Content[i+1].Value
		}
	}
	if value != "" {
		key += "_" + value
	}
	return &configError{ce.file, 0, fmt.Sprintf("descriptor '%s.%s': %s", metric, key, ce.msg)}
}

// add loads every YAML document of one file.
func (c *Config) add(file string, data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	docs := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			return fmt.Errorf("%s: %v", file, err)
		}
		docs++
		if len(doc.Content) == 0 {
			continue
		}
		if err := c.addDomain(file, doc.Content[0]); err != nil {
			return err
		}
	}
	if docs == 0 {
		return &configError{file, 1, "no configuration: the file must have a domain"}
	}
	c.files = append(c.files, file)
	return nil
}

// peerKeys are the keys envoyproxy/ratelimit accepts anywhere in a file:
// one of them written where it means nothing is ignored (with a warning),
// as there, and any other key is an error.
var peerKeys = map[string]bool{"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true}

// fields checks that n is a mapping of known keys and returns their
// values; a key known elsewhere in a file is ignored with a warning.
func (c *Config) fields(file string, n *yaml.Node, what string, known ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, &configError{file, n.Line, what + " must be a mapping of keys to values"}
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ok := false
		for _, name := range known {
			ok = ok || k.Value == name
		}
		if !ok && peerKeys[k.Value] {
			c.warnings = append(c.warnings, fmt.Sprintf("%s:%d: key '%s' means nothing in %s and is ignored (accepted there: %s)", file, k.Line, k.Value, what, strings.Join(known, ", ")))
			continue
		}
		if !ok {
			return nil, &configError{file, k.Line, fmt.Sprintf("unknown key '%s' in %s (accepted: %s)", k.Value, what, strings.Join(known, ", "))}
		}
		if _, dup := out[k.Value]; dup {
			return nil, &configError{file, k.Line, fmt.Sprintf("key '%s' appears twice in %s", k.Value, what)}
		}
		out[k.Value] = v
	}
	return out, nil
}

func str(file string, n *yaml.Node, name string) (string, error) {
	if n == nil || n.Tag == "!!null" {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", &configError{file, n.Line, name + " must be a string"}
	}
	// envoyproxy/ratelimit takes a string, an integer or a boolean where a
	// string goes, and refuses the file for any other scalar ("error
	// checking config"): a number with a fraction, or an integer past 64
	// bits, which its YAML decoder makes a float or an unsigned integer.
	switch n.ShortTag() {
	case "!!float":
		return "", &configError{file, n.Line, fmt.Sprintf("%s must be a string, an integer or true/false, not %s: YAML reads it as a number with a fraction, which envoyproxy/ratelimit refuses too (quote it: \"%s\")", name, n.Value, n.Value)}
	case "!!int":
		// Underscores are dropped wherever they are, as both YAML
		// decoders drop them (1_000, 1000_).
		if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			return "", &configError{file, n.Line, fmt.Sprintf("%s must be a string, an integer of 64 bits or true/false, not %s, which envoyproxy/ratelimit refuses too (quote it: \"%s\")", name, n.Value, n.Value)}
		}
	}
	return n.Value, nil
}

func boolean(file string, n *yaml.Node, name string) (bool, error) {
	if n == nil || n.Tag == "!!null" {
		return false, nil
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return false, &configError{file, n.Line, name + " must be true or false"}
	}
	return b, nil
}

func (c *Config) addDomain(file string, root *yaml.Node) error {
	f, err := c.fields(file, root, "the file", "domain", "descriptors")
	if err != nil {
		return err
	}
	name, err := str(file, f["domain"], "domain")
	if err != nil {
		return err
	}
	if name == "" {
		return &configError{file, root.Line, "the configuration has an empty or missing domain"}
	}
	d, ok := c.domains[name]
	switch {
	case ok && !c.opts.MergeDomains:
		return &configError{file, f["domain"].Line, fmt.Sprintf("domain '%s' is already configured in %s", name, d.file)}
	case !ok:
		d = &domainRules{name: name, rules: ruleSet{}, file: file}
	}
	// Merged: the rules join the domain's; a composite key written twice
	// is an error as within one file.
	if err := c.addRules(file, name, d.rules, f["descriptors"], name, false); err != nil {
		return err
	}
	c.domains[name] = d
	return nil
}

func (c *Config) addRules(file, domain string, set ruleSet, list *yaml.Node, metric string, valueLabel bool) error {
	if list == nil || list.Tag == "!!null" {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return &configError{file, list.Line, "descriptors must be a list"}
	}
	for _, n := range list.Content {
		r, err := c.parseRule(file, n)
		if err != nil {
			return located(err, metric, n)
		}
		composite := r.Key
		if r.Value != "" {
			composite += "_" + r.Value
		}
		r.metric = metric + "." + composite
		kr := set[r.Key]
		if kr == nil {
			kr = &keyRules{exact: map[string]*Rule{}}
			set[r.Key] = kr
		}
		dup := false
		switch {
		case r.Value == "":
			dup, kr.any = kr.any != nil, r
		case strings.Contains(r.Value, "*"):
			for _, p := range kr.patterns {
				dup = dup || p.Value == r.Value
			}
			r.parts = strings.Split(r.Value, "*")
			kr.patterns = append(kr.patterns, r)
		default:
			dup = kr.exact[r.Value] != nil
			kr.exact[r.Value] = r
		}
		if dup {
			return &configError{file, r.Line, fmt.Sprintf("duplicate descriptor composite key '%s'", r.metric)}
		}
		if r.ShareThreshold && r.parts == nil {
			return &configError{file, r.Line, fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", composite)}
		}
		r.children = ruleSet{}
		r.valueLabel = valueLabel || r.ValueToMetric
		if err := c.addRules(file, domain, r.children, r.childList, r.metric, r.valueLabel); err != nil {
			return err
		}
		r.childList = nil
	}
	return nil
}

func (c *Config) parseRule(file string, n *yaml.Node) (*Rule, error) {
	f, err := c.fields(file, n, "a descriptor", "key", "value", "rate_limit", "descriptors", "shadow_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "metadata")
	if err != nil {
		return nil, err
	}
	r := &Rule{File: file, Line: n.Line}
	if r.Key, err = str(file, f["key"], "key"); err != nil {
		return nil, err
	}
	if r.Key == "" {
		return nil, &configError{file, n.Line, "descriptor has empty key"}
	}
	if r.Value, err = str(file, f["value"], "value"); err != nil {
		return nil, err
	}
	for name, dst := range map[string]*bool{"shadow_mode": &r.ShadowMode, "detailed_metric": &r.DetailedMetric,
		"value_to_metric": &r.ValueToMetric, "share_threshold": &r.ShareThreshold} {
		if *dst, err = boolean(file, f[name], name); err != nil {
			return nil, err
		}
	}
	if q, err := boolean(file, f["quota_mode"], "quota_mode"); err != nil {
		return nil, err
	} else if q && !c.opts.QuotaMode {
		return nil, &configError{file, f["quota_mode"].Line, "quota_mode is not supported: sluice admits every descriptor of a request together or not at all; use a calendar quota on a budget node instead"}
	} else {
		r.QuotaMode = q
	}
	if rl := f["rate_limit"]; rl != nil && rl.Tag != "!!null" {
		if r.Limit, err = c.parseLimit(file, rl); err != nil {
			return nil, err
		}
	}
	if md := f["metadata"]; md != nil && md.Tag != "!!null" {
		var v map[string]any
		if err := md.Decode(&v); err == nil {
			r.Metadata, err = structpb.NewStruct(v)
		}
		if err != nil || r.Metadata == nil {
			return nil, &configError{file, md.Line, "metadata must be a mapping of names to values"}
		}
	}
	r.childList = f["descriptors"]
	return r, nil
}

// calendarPeriod makes l count in calendar periods of unit in l.Timezone.
func (l *Limit) calendarPeriod(unit string, f map[string]*yaml.Node) error {
	switch {
	case l.Unlimited:
		return errors.New("should not specify timezone when unlimited")
	case f["algorithm"] != nil || f["burst"] != nil:
		return errors.New("timezone makes a calendar period, which counts requests: it takes no algorithm or burst")
	case l.StreamDone:
		return errors.New("timezone and apply_on_stream_done do not go together: a calendar period is a quota, charged when the request arrives")
	}
	switch strings.ToLower(unit) {
	case "hour", "day", "week", "month", "year":
	default:
		return fmt.Errorf("timezone needs a unit of hour, day, week, month or year (a calendar period), not '%s'", unit)
	}
	per, err := quota.ParsePeriod(unit, l.Timezone)
	if err != nil {
		return fmt.Errorf("invalid timezone '%s': must be an IANA time zone name such as UTC, Europe/Paris or America/New_York", l.Timezone)
	}
	l.calendar = &quota.Spec{N: int64(l.RequestsPerUnit), Period: per}
	l.calFlag = &quota.Spec{N: 1, Period: per}
	return nil
}

// ruleArgs words an engine.NewLimit refusal with a rule's names for its
// arguments (requests_per_unit, unit, burst) rather than RESP's.
func ruleArgs(err error) string {
	var ae *engine.ArgError
	if !errors.As(err, &ae) {
		return err.Error()
	}
	r := strings.NewReplacer("RATE", "requests_per_unit", "PER", "unit", "BURST", "burst")
	return r.Replace(ae.Arg) + " " + r.Replace(ae.Msg)
}

func (c *Config) parseLimit(file string, n *yaml.Node) (*Limit, error) {
	f, err := c.fields(file, n, "rate_limit", "unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst", "apply_on_stream_done", "timezone")
	if err != nil {
		return nil, err
	}
	l := &Limit{}
	if l.Unlimited, err = boolean(file, f["unlimited"], "unlimited"); err != nil {
		return nil, err
	}
	if l.Name, err = str(file, f["name"], "name"); err != nil {
		return nil, err
	}
	if l.StreamDone, err = boolean(file, f["apply_on_stream_done"], "apply_on_stream_done"); err != nil {
		return nil, err
	}
	if l.Timezone, err = str(file, f["timezone"], "timezone"); err != nil {
		return nil, err
	}
	unit, err := str(file, f["unit"], "unit")
	if err != nil {
		return nil, err
	}
	uw, valid := unitWindows[strings.ToLower(unit)]
	if !valid && unit != "" {
		// sluice's extension: any period, written as a duration (10s, 5m,
		// 1h30m, 7d); reported to Envoy as its unit when it is one.
		if d, ok := engine.ParseWindow([]byte(unit)); ok {
			if !l.Unlimited && !bounds.InWindow(d) {
				return nil, &configError{file, f["unit"].Line, bounds.WindowMsg("unit")}
			}
			uw.unit, uw.window, valid = unitOf(d), d, true
		}
	}
	switch {
	case l.Unlimited && valid:
		return nil, &configError{file, f["unit"].Line, "should not specify rate limit unit when unlimited"}
	case !l.Unlimited && !valid:
		line := n.Line
		if u := f["unit"]; u != nil {
			line = u.Line
		}
		return nil, &configError{file, line, fmt.Sprintf("invalid rate limit unit '%s': must be second, minute, hour, day, week, month or year", unit)}
	}
	l.Unit, l.window = uw.unit, uw.window
	if rpu := f["requests_per_unit"]; rpu != nil && rpu.Tag != "!!null" {
		var v int64
		// The tag first: yaml.v3 would decode 1.5 into an integer as 1.
		if rpu.Kind != yaml.ScalarNode || rpu.ShortTag() != "!!int" || rpu.Decode(&v) != nil || !bounds.RequestsPerUnit.In(v) {
			return nil, &configError{file, rpu.Line, bounds.RequestsPerUnit.Msg("requests_per_unit")}
		}
		l.RequestsPerUnit = uint32(v)
	}
	l.Algorithm, l.Burst = engine.FixedWindow, int64(l.RequestsPerUnit)
	if a := f["algorithm"]; a != nil && a.Tag != "!!null" {
		name, err := str(file, a, "algorithm")
		if err != nil {
			return nil, err
		}
		var ok bool
		if l.Algorithm, ok = engine.ParseAlgo(name); !ok {
			return nil, &configError{file, a.Line, fmt.Sprintf("invalid algorithm '%s': %s", name, bounds.OneOfText(engine.AlgoNames()))}
		}
	}
	if b := f["burst"]; b != nil && b.Tag != "!!null" {
		if b.Kind != yaml.ScalarNode || b.ShortTag() != "!!int" || b.Decode(&l.Burst) != nil || !bounds.Burst.In(l.Burst) {
			return nil, &configError{file, b.Line, bounds.Burst.Msg("burst")}
		}
		if l.Algorithm.IsWindow() {
			return nil, &configError{file, b.Line, fmt.Sprintf("burst belongs to token_bucket, gcra and leaky_bucket: a %s admits requests_per_unit a window", l.Algorithm)}
		}
	}
	if l.Unlimited && (f["algorithm"] != nil || f["burst"] != nil || l.StreamDone) {
		return nil, &configError{file, n.Line, "should not specify algorithm, burst or apply_on_stream_done when unlimited"}
	}
	if !l.Unlimited && l.RequestsPerUnit > 0 {
		if l.lim, err = engine.NewLimit(l.Algorithm, int64(l.RequestsPerUnit), l.window, l.Burst); err != nil {
			return nil, &configError{file, n.Line, ruleArgs(err)}
		}
	}
	if l.Timezone != "" {
		if err := l.calendarPeriod(unit, f); err != nil {
			return nil, &configError{file, f["timezone"].Line, err.Error()}
		}
	}
	if !l.Unlimited {
		if l.flag = overFlags[l.window]; l.flag == nil {
			fl, err := engine.NewLimit(engine.FixedWindow, 1, l.window, 1)
			if err != nil {
				return nil, &configError{file, n.Line, err.Error()}
			}
			l.flag = &fl
		}
	}
	if rep := f["replaces"]; rep != nil && rep.Tag != "!!null" {
		if rep.Kind != yaml.SequenceNode {
			return nil, &configError{file, rep.Line, "replaces must be a list of {name: …}"}
		}
		for _, e := range rep.Content {
			ef, err := c.fields(file, e, "a replaces entry", "name")
			if err != nil {
				return nil, err
			}
			name, err := str(file, ef["name"], "name")
			if err != nil {
				return nil, err
			}
			if name == "" {
				return nil, &configError{file, e.Line, "should not have an empty replaces entry"}
			}
			if name == l.Name {
				return nil, &configError{file, e.Line, "replaces should not contain name of same descriptor"}
			}
			l.Replaces = append(l.Replaces, name)
		}
	}
	return l, nil
}
