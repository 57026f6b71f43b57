package envoyrls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func loadPeerFiles(t *testing.T, o LoadOptions, names ...string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	for i, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata/ratelimit-format", n))
		if err != nil {
			t.Fatal(err)
		}
		// Name order is load order: a prefix keeps the order given.
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))+"-"+n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o.Tree = true
	return LoadConfigWith(dir, o)
}

// A file for each kind of mistake test/config/config_test.go expects the
// peer to reject, with the words of its error (TestEmptyDomain, TestDuplicateDomain,
// TestEmptyKey, TestDuplicateKey, TestDuplicateKeyDomainMerge,
// TestBadLimitUnit, TestReplacesSelf, TestReplacesEmpty, TestBadYaml,
// TestMisspelledKey, TestNonStringKey, TestNonMapList,
// TestUnlimitedWithRateLimitUnit).
func TestPeerConfigRejects(t *testing.T) {
	cases := []struct {
		files []string
		merge bool
		want  string
	}{
		{[]string{"reject_no_domain.yaml"}, false, "reject_no_domain.yaml:1: the configuration has an empty or missing domain"},
		{[]string{"rules.yaml", "reject_domain_again.yaml"}, false, "reject_domain_again.yaml:2: domain 'media' is already configured in"},
		{[]string{"reject_key_missing.yaml"}, false, "reject_key_missing.yaml:6: descriptor has empty key"},
		{[]string{"reject_key_twice.yaml"}, false, "duplicate descriptor composite key 'media.tenant_acme.plan_gold'"},
		{[]string{"merge_uploads.yaml", "merge_uploads.yaml"}, true, "duplicate descriptor composite key 'media.upload_image'"},
		{[]string{"reject_unit_fortnight.yaml"}, false, "invalid rate limit unit 'fortnight'"},
		{[]string{"reject_replaces_itself.yaml"}, false, "replaces should not contain name of same descriptor"},
		{[]string{"reject_replaces_blank.yaml"}, false, "should not have an empty replaces entry"},
		{[]string{"reject_not_yaml.yaml"}, false, "reject_not_yaml.yaml: yaml: line 4: found unexpected end of stream"},
		{[]string{"reject_rate_limits_typo.yaml"}, false, "unknown key 'rate_limits'"},
		{[]string{"reject_per_unit_typo.yaml"}, false, "unknown key 'request_per_unit'"},
		{[]string{"reject_numeric_key.yaml"}, false, "unknown key '1.5'"},
		{[]string{"reject_scalar_descriptors.yaml"}, false, "a descriptor must be a mapping"},
		{[]string{"reject_unlimited_unit.yaml"}, false, "should not specify rate limit unit when unlimited"},
	}
	for _, c := range cases {
		_, err := loadPeerFiles(t, LoadOptions{MergeDomains: c.merge}, c.files...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error with %q", c.files, err, c.want)
		}
	}
}

// From test/config/config_test.go TestDomainMerge: with
// MERGE_DOMAIN_CONFIG the rules of one domain in two files add up.
func TestPeerConfigMergesDomains(t *testing.T) {
	c, err := loadPeerFiles(t, LoadOptions{MergeDomains: true}, "merge_uploads.yaml", "merge_downloads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]uint32{"upload": 12, "download": 36} {
		if r := c.Match("media", 1, func(int) (string, string) { return key, "image" }); r == nil || r.Limit.RequestsPerUnit != want {
			t.Fatalf("%s=image: %+v, want %d per unit", key, r, want)
		}
	}
	if _, err := loadPeerFiles(t, LoadOptions{}, "merge_uploads.yaml", "merge_downloads.yaml"); err == nil {
		t.Fatal("two files of one domain load without MERGE_DOMAIN_CONFIG")
	}
}

// Files of the kinds the peer's config tests load (TestBasicConfig,
// TestShadowModeConfig, TestWildcardConfig, metadata, share_threshold).
func TestPeerConfigLoads(t *testing.T) {
	for _, f := range []string{"rules.yaml", "shadow.yaml", "wildcards.yaml", "with_metadata.yaml", "shared_counters.yaml"} {
		if _, err := loadPeerFiles(t, LoadOptions{}, f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// What the peer decides that sluice decided otherwise (issue #23), under
// both modes: requests_per_unit 1.5 is refused (the peer's yaml decoder
// refuses a float for an integer; yaml.v3 would take 1); a key the peer
// knows, written where it means nothing (unit directly under a
// descriptor), is ignored with a warning.
func TestConfigAsThePeerValidates(t *testing.T) {
	_, err := ParseConfig("f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1.5}\n"))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:4: requests_per_unit must be an integer") {
		t.Fatalf("1.5: %v", err)
	}
	// A value the peer's decoder makes a float, or an integer past 64
	// bits, refuses the file; quoted, or a plain integer, it is a string.
	for _, v := range []string{"1.5", "1e3", ".inf", "18446744073709551616"} {
		_, err := ParseConfig("f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: "+v+"\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"))
		if err == nil || !strings.Contains(err.Error(), "f.yaml:4: value must be a string") {
			t.Fatalf("value: %s: %v", v, err)
		}
	}
	for _, v := range []string{`"1.5"`, "'1.5'", "15", "0x1F", "true", "1_000", "1000_"} {
		c, err := ParseConfig("f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: "+v+"\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"))
		if err != nil {
			t.Fatalf("value: %s: %v", v, err)
		}
		want := strings.Trim(v, `"'`)
		if r := c.Match("d", 1, func(int) (string, string) { return "k", want }); r == nil {
			t.Fatalf("value: %s: no rule for %q", v, want)
		}
	}
	c, err := ParseConfig("f.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    unit: second\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"))
	if err != nil {
		t.Fatalf("unit under a descriptor: %v", err)
	}
	if w := c.Warnings(); len(w) != 1 || !strings.HasPrefix(w[0], "f.yaml:4: key 'unit' means nothing in a descriptor and is ignored") {
		t.Fatalf("warnings: %q", w)
	}
	if r := c.Match("d", 1, func(int) (string, string) { return "k", "x" }); r == nil || r.Limit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("the rule: %+v", r)
	}
}

// In a Tree, dot files are read unless IgnoreDotFiles (RUNTIME_IGNOREDOTFILES),
// and files of any name below the directory count, as the peer's runtime
// loader reads them.
func TestTreeFiles(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.MkdirAll(filepath.Join(dir, ".hidden"), 0o755)
	writeTree(t, dir, map[string]string{"a.conf": "domain: a\n", "sub/b": "domain: b\n", ".c.yaml": "domain: c\n", ".hidden/d.yaml": "domain: d\n"})
	for _, ignore := range []bool{false, true} {
		c, err := LoadConfigWith(dir, LoadOptions{Tree: true, IgnoreDotFiles: ignore})
		if err != nil {
			t.Fatal(err)
		}
		want := "a,b,c,d"
		if ignore {
			want = "a,b"
		}
		if got := strings.Join(c.Domains(), ","); got != want {
			t.Fatalf("ignore dot files %v: %s, want %s", ignore, got, want)
		}
	}
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for n, body := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// From test/config/config_test.go TestShareThreshold ("share_threshold with
// metrics", "Nested wildcards"): the stats key of a descriptor — here its
// metrics label — writes a share_threshold pattern for the values it
// matched, even with value_to_metric or detailed_metric, which otherwise
// name the request's values.
func TestPeerMetricLabels(t *testing.T) {
	b, err := os.ReadFile("testdata/ratelimit-format/shared_counters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig("shared_counters.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	s := newServer(t, "domain: unused\n", &now)
	s.SetConfig(cfg)
	for _, c := range []struct {
		kv   []string
		want string
	}{
		{[]string{"blob", "blobs/x.bin"}, "assets.blob_blobs/*"},
		{[]string{"api", "v2/users", "verb", "POST"}, "assets.api_v2/*.verb"},
		{[]string{"queue", "q/mail", "op", "send"}, "assets.queue_q/*.op_send"},
		{[]string{"project", "main", "blob", "deep/y.dat"}, "assets.project_main.blob_deep/*"},
		{[]string{"blob", "outer/1", "blob", "inner/2"}, "assets.blob_outer/*.blob_inner/*"},
		{[]string{"dir", "dir/a", "doc", "doc/b", "format", "svg"}, "assets.dir_dir/*.doc_doc/*.format"},
		{[]string{"doc", "report"}, "assets.doc_report"},
		{[]string{"doc", "repo"}, "assets.doc_rep*"},
		{[]string{"gateway", "/gw-1-east"}, "assets.gateway_/gw*east"},
		{[]string{"zone", "z1prod", "shard", "s9b"}, "assets.zone_z*prod.shard_s*b"},
	} {
		w := &work{cfg: cfg}
		req := &rlsv3.RateLimitRequest{Domain: "assets", Descriptors: []*rlcommon.RateLimitDescriptor{desc(c.kv...)}}
		if err := s.prepare(req, w); err != nil {
			t.Fatal(err)
		}
		if got := w.parts[0].metric; got != c.want {
			t.Errorf("%v: label %q, want %q", c.kv, got, c.want)
		}
	}
}
