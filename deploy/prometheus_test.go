package deploy_test

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// promConfig is the part of a Prometheus configuration the tests read.
type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string                       `yaml:"job_name"`
		MetricsPath   string                       `yaml:"metrics_path"`
		StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// promSetup returns the Prometheus configuration docker-compose.yml
// mounts, its repository path, and the repository paths of its rule
// files.
func promSetup(t *testing.T, cf composeFile) (cfg promConfig, file string, rules []string) {
	t.Helper()
	svc := cf.service(t, "prometheus")
	mnt := svc.mounts(t, "services.prometheus")
	in := "/etc/prometheus/prometheus.yml"
	for _, a := range svc.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			in = v
		}
	}
	file, ok := mnt[in]
	if !ok {
		t.Fatalf("docker-compose.yml: prometheus reads %s, which nothing mounts", in)
	}
	readYAML(t, file, &cfg)
	for _, r := range cfg.RuleFiles {
		rs, ok := mnt[r]
		if !ok {
			t.Fatalf("%s: rule file %s is not mounted into the prometheus service", file, r)
		}
		rules = append(rules, rs)
	}
	return cfg, file, rules
}

type alertRule struct{ where, expr string }

// alertRules returns the expression of every alerting and recording rule.
func alertRules(t *testing.T, files []string) []alertRule {
	t.Helper()
	var out []alertRule
	for _, f := range files {
		var doc struct {
			Groups []struct {
				Rules []struct{ Alert, Record, Expr string }
			}
		}
		readYAML(t, f, &doc)
		for gi, g := range doc.Groups {
			for ri, r := range g.Rules {
				where := fmt.Sprintf("%s groups[%d].rules[%d]", f, gi, ri)
				switch {
				case r.Alert != "":
					where += " " + r.Alert
				case r.Record != "":
					where += " " + r.Record
				default:
					t.Errorf("%s: neither alert nor record", where)
				}
				if r.Expr == "" {
					t.Errorf("%s: no expr", where)
				}
				out = append(out, alertRule{where, r.Expr})
			}
		}
	}
	return out
}

func TestPrometheus(t *testing.T) {
	cf := loadCompose(t)
	cfg, file, ruleFiles := promSetup(t, cf)
	checkFlags(t, file+" comments", hashComments(read(t, file)))
	want := map[string]bool{}
	for _, n := range cf.nodes {
		want[n.service+":"+portOf(t, n.service, n.cfg.HTTPAddr)] = true
	}
	jobs := map[string]bool{}
	got := map[string]bool{}
	for i, sc := range cfg.ScrapeConfigs {
		where := fmt.Sprintf("%s scrape_configs[%d]", file, i)
		jobs[sc.JobName] = true
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("%s: metrics_path %v; sluice serves /metrics", where, sc.MetricsPath)
		}
		for _, s := range sc.StaticConfigs {
			for _, target := range s.Targets {
				got[target] = true
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s scrapes %v; the nodes' HTTP listeners are %v", file, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	if len(ruleFiles) == 0 {
		t.Errorf("%s loads no alerting rules", file)
	}
	jobRE := regexp.MustCompile(`\bjob\s*=\s*"([^"]*)"`)
	for _, r := range alertRules(t, ruleFiles) {
		for _, m := range jobRE.FindAllStringSubmatch(r.expr, -1) {
			if !jobs[m[1]] {
				t.Errorf("%s: job %q is not a scrape job of %s", r.where, m[1], file)
			}
		}
	}
	for _, f := range ruleFiles {
		src := read(t, f)
		checkFlags(t, f, src)
		checkEnvNames(t, f, src, nil)
	}
}
