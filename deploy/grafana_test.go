package deploy_test

import (
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// dashboardFiles returns the repository paths of the dashboards Grafana is
// provisioned with, checking the provisioning on the way.
func dashboardFiles(t *testing.T, cf composeFile) []string {
	t.Helper()
	svc := cf.service(t, "grafana")
	mnt := svc.mounts(t, "services.grafana")
	prov, ok := mnt["/etc/grafana/provisioning"]
	if !ok {
		t.Fatal("docker-compose.yml: nothing is mounted at grafana's /etc/grafana/provisioning")
	}
	// Data sources: the compose Prometheus.
	ds, _ := filepath.Glob(filepath.Join(root, prov, "datasources", "*.yml"))
	if len(ds) == 0 {
		t.Errorf("%s/datasources: no data source", prov)
	}
	for _, f := range ds {
		rel, _ := filepath.Rel(root, f)
		var doc struct{ Datasources []struct{ Type, URL string } }
		readYAML(t, rel, &doc)
		for _, d := range doc.Datasources {
			if d.Type != "prometheus" {
				continue
			}
			if _, ok := cf.Services[hostOf(strings.TrimPrefix(d.URL, "http://"))]; !ok {
				t.Errorf("%s: url %s names no compose service", rel, d.URL)
			}
		}
	}
	// Dashboard providers: directories mounted into the container.
	var files []string
	provs, _ := filepath.Glob(filepath.Join(root, prov, "dashboards", "*.yml"))
	if len(provs) == 0 {
		t.Fatalf("%s/dashboards: no dashboard provider", prov)
	}
	for _, f := range provs {
		rel, _ := filepath.Rel(root, f)
		var doc struct {
			Providers []struct{ Options struct{ Path string } }
		}
		readYAML(t, rel, &doc)
		for i, p := range doc.Providers {
			where := fmt.Sprintf("%s providers[%d]", rel, i)
			src, ok := mnt[p.Options.Path]
			if !ok {
				t.Errorf("%s: path %q is not mounted into the grafana service", where, p.Options.Path)
				continue
			}
			found, _ := filepath.Glob(filepath.Join(root, src, "*.json"))
			for _, j := range found {
				r, _ := filepath.Rel(root, j)
				files = append(files, filepath.ToSlash(r))
			}
		}
	}
	if len(files) == 0 {
		t.Fatal("grafana is provisioned with no dashboard")
	}
	if home, ok := svc.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; ok {
		dir, file := path.Split(home)
		if src, ok := mnt[strings.TrimSuffix(dir, "/")]; !ok || !slices.Contains(files, path.Join(src, file)) {
			t.Errorf("docker-compose.yml grafana: the home dashboard %s is not a provisioned dashboard", home)
		}
	}
	return files
}

type dashQuery struct {
	where, expr, legend string
}

func loadDashboard(t *testing.T, file string) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal([]byte(read(t, file)), &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return d
}

// allPanels returns every panel of a dashboard, those inside rows too.
func allPanels(d map[string]any) []map[string]any {
	var out []map[string]any
	var walk func(v any)
	walk = func(v any) {
		l, _ := v.([]any)
		for _, p := range l {
			if m, ok := p.(map[string]any); ok {
				out = append(out, m)
				walk(m["panels"])
			}
		}
	}
	walk(d["panels"])
	return out
}

// templateVars returns a dashboard's template variables by name.
func templateVars(t *testing.T, file string, d map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	tpl, _ := d["templating"].(map[string]any)
	list, _ := tpl["list"].([]any)
	for i, v := range list {
		m := object(t, fmt.Sprintf("%s templating variable %d", file, i), v)
		name, ok := m["name"].(string)
		if !ok {
			t.Fatalf("%s: templating variable %d has no name", file, i)
		}
		out[name] = m
	}
	return out
}

// dashboardQueries returns every PromQL expression of a dashboard: panel
// targets and template variable queries.
func dashboardQueries(t *testing.T, file string) []dashQuery {
	t.Helper()
	d := loadDashboard(t, file)
	var out []dashQuery
	for _, p := range allPanels(d) {
		targets, _ := p["targets"].([]any)
		for i, tg := range targets {
			m := object(t, fmt.Sprintf("%s panel %q target %d", file, p["title"], i), tg)
			legend, _ := m["legendFormat"].(string)
			expr, _ := m["expr"].(string)
			out = append(out, dashQuery{fmt.Sprintf("%s panel %q target %d", file, p["title"], i), expr, legend})
		}
	}
	for name, m := range templateVars(t, file, d) {
		if m["type"] != "query" {
			continue
		}
		q := m["definition"]
		if qm, ok := m["query"].(map[string]any); ok {
			q = qm["query"]
		} else if qs, ok := m["query"].(string); ok {
			q = qs
		}
		s, _ := q.(string)
		out = append(out, dashQuery{fmt.Sprintf("%s variable %v", file, name), s, ""})
	}
	return out
}

const dsVar = "${DS_PROMETHEUS}"

func TestGrafanaDashboards(t *testing.T) {
	cf := loadCompose(t)
	for _, file := range dashboardFiles(t, cf) {
		d := loadDashboard(t, file)
		if v, _ := d["schemaVersion"].(float64); v < 36 {
			t.Errorf("%s: schemaVersion %v; want 36 or later", file, d["schemaVersion"])
		}
		if uid, _ := d["uid"].(string); uid == "" {
			t.Errorf("%s: no uid (provisioned dashboards need a stable one)", file)
		}
		vars := templateVars(t, file, d)
		if ds := vars["DS_PROMETHEUS"]; ds == nil || ds["type"] != "datasource" || ds["query"] != "prometheus" {
			t.Errorf("%s: want a DS_PROMETHEUS variable of type datasource for prometheus", file)
		}
		if inst := vars["instance"]; inst == nil || inst["type"] != "query" || !usesDS(inst["datasource"]) {
			t.Errorf("%s: want an instance query variable on %s", file, dsVar)
		}
		ids := map[float64]bool{}
		for _, p := range allPanels(d) {
			where := fmt.Sprintf("%s panel %q", file, p["title"])
			id, _ := p["id"].(float64)
			if ids[id] {
				t.Errorf("%s: id %v used twice", where, id)
			}
			ids[id] = true
			g, _ := p["gridPos"].(map[string]any)
			x, okx := g["x"].(float64)
			w, okw := g["w"].(float64)
			if !okx || !okw || x+w > 24 {
				t.Errorf("%s: gridPos %v should have x + w within 24", where, p["gridPos"])
			}
			if p["type"] == "row" {
				continue
			}
			if !usesDS(p["datasource"]) {
				t.Errorf("%s: datasource is not %s", where, dsVar)
			}
			targets, _ := p["targets"].([]any)
			if len(targets) == 0 {
				t.Errorf("%s: no targets", where)
			}
			for _, tg := range targets {
				m := object(t, where, tg)
				if ds, ok := m["datasource"]; ok && !usesDS(ds) {
					t.Errorf("%s: target datasource is not %s", where, dsVar)
				}
			}
		}
		for _, q := range dashboardQueries(t, file) {
			if q.expr == "" {
				t.Errorf("%s: empty query", q.where)
			} else if !strings.Contains(q.where, " variable ") && !strings.Contains(q.expr, "$instance") {
				t.Errorf("%s: %s ignores the $instance variable", q.where, q.expr)
			}
		}
	}
}

// object is a JSON object of a dashboard, failing the test for anything
// else.
func object(t *testing.T, where string, v any) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: want an object, got %T", where, v)
	}
	return m
}

func usesDS(v any) bool {
	m, _ := v.(map[string]any)
	return m != nil && m["uid"] == dsVar && (m["type"] == nil || m["type"] == "prometheus")
}
