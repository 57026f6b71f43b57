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
		b, err := os.ReadFile(filepath.Join("testdata/peer", n))
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

// The files test/config/config_test.go expects the peer to reject, with
// the words of its error (TestEmptyDomain, TestDuplicateDomain,
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
		{[]string{"empty_domain.yaml"}, false, "empty_domain.yaml:1: the configuration has an empty or missing domain"},
		{[]string{"basic_config.yaml", "duplicate_domain.yaml"}, false, "domain 'test-domain' is already configured"},
		{[]string{"empty_key.yaml"}, false, "descriptor has empty key"},
		{[]string{"duplicate_key.yaml"}, false, "duplicate descriptor composite key 'test-domain.key1_value1'"},
		{[]string{"merge_domain_key1.yaml", "merge_domain_key1.yaml"}, true, "duplicate descriptor composite key 'test-domain.key1_value1'"},
		{[]string{"bad_limit_unit.yaml"}, false, "invalid rate limit unit 'foo'"},
		{[]string{"replaces_self.yaml"}, false, "replaces should not contain name of same descriptor"},
		{[]string{"replaces_empty.yaml"}, false, "should not have an empty replaces entry"},
		{[]string{"bad_yaml.yaml"}, false, "yaml: line 2: found unexpected end of stream"},
		{[]string{"misspelled_key.yaml"}, false, "unknown key 'ratelimit'"},
		{[]string{"misspelled_key2.yaml"}, false, "unknown key 'requestsperunit'"},
		{[]string{"non_string_key.yaml"}, false, "unknown key '0.25'"},
		{[]string{"non_map_list.yaml"}, false, "a descriptor must be a mapping"},
		{[]string{"unlimited_with_unit.yaml"}, false, "should not specify rate limit unit when unlimited"},
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
	c, err := loadPeerFiles(t, LoadOptions{MergeDomains: true}, "merge_domain_key1.yaml", "merge_domain_key2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]uint32{"key1": 10, "key2": 20} {
		v := strings.Replace(key, "key", "value", 1)
		if r := c.Match("test-domain", 1, func(int) (string, string) { return key, v }); r == nil || r.Limit.RequestsPerUnit != want {
			t.Fatalf("%s=%s: %+v, want %d per unit", key, v, r, want)
		}
	}
	if _, err := loadPeerFiles(t, LoadOptions{}, "merge_domain_key1.yaml", "merge_domain_key2.yaml"); err == nil {
		t.Fatal("two files of one domain load without MERGE_DOMAIN_CONFIG")
	}
}

// The files the peer's config tests load (TestBasicConfig,
// TestShadowModeConfig, TestWildcardConfig, metadata, share_threshold).
func TestPeerConfigLoads(t *testing.T) {
	for _, f := range []string{"basic_config.yaml", "shadowmode_config.yaml", "wildcard.yaml", "metadata.yaml", "share_threshold.yaml"} {
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
	b, err := os.ReadFile("testdata/peer/share_threshold.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig("share_threshold.yaml", b)
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
		{[]string{"files", "files/a.txt"}, "test-domain.files_files/*"},
		{[]string{"route", "api/v1", "method", "GET"}, "test-domain.route_api/*.method"},
		{[]string{"service", "svc/user", "endpoint", "get"}, "test-domain.service_svc/*.endpoint_get"},
		{[]string{"nested", "parent", "files", "nested/file1.txt"}, "test-domain.nested_parent.files_nested/*"},
		{[]string{"files", "top/file1.txt", "files", "nested/file1.txt"}, "test-domain.files_top/*.files_nested/*"},
		{[]string{"path", "path/foo", "file", "file/doc1", "type", "pdf"}, "test-domain.path_path/*.file_file/*.type"},
		{[]string{"file", "test1"}, "test-domain.file_test1"},
		{[]string{"midroute", "/api-x-v2"}, "test-domain.midroute_/api*v2"},
	} {
		w := &work{cfg: cfg}
		req := &rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: []*rlcommon.RateLimitDescriptor{desc(c.kv...)}}
		if err := s.prepare(req, w); err != nil {
			t.Fatal(err)
		}
		if got := w.parts[0].metric; got != c.want {
			t.Errorf("%v: label %q, want %q", c.kv, got, c.want)
		}
	}
}
