package charttest

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"
)

// The chart's copy of the alert rules is deploy/prometheus-alerts.yml,
// byte for byte: Prometheus (compose, promtool's tests) reads that one,
// the PrometheusRule the chart's copy. Edit deploy/prometheus-alerts.yml
// and copy it: cp deploy/prometheus-alerts.yml deploy/helm/sluice/files/
func TestChartAlertsCopy(t *testing.T) {
	want, got := read(t, "deploy/prometheus-alerts.yml"), read(t, chartDir+"/files/prometheus-alerts.yml")
	if got != want {
		t.Errorf("%s/files/prometheus-alerts.yml differs from deploy/prometheus-alerts.yml: cp deploy/prometheus-alerts.yml %s/files/", chartDir, chartDir)
	}
}

// No file of the chart is a symbolic link: Helm follows one with a
// warning on every command, and one that points outside the chart (as
// files/prometheus-alerts.yml did) is not what a packaged chart holds.
func TestChartNoSymlinks(t *testing.T) {
	err := filepath.WalkDir(filepath.Join(root, chartDir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			t.Errorf("%s is a symbolic link (to %s): put a copy in the chart", path, target)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lintChart runs Helm's linter over the chart as `helm lint --strict
// --namespace limits` does, with these values over values.yaml, and
// returns the messages that fail it: strict fails on warnings and errors.
func lintChart(t *testing.T, values map[string]any) []support.Message {
	t.Helper()
	l := lint.AllWithKubeVersionAndSchemaValidation(filepath.Join(root, chartDir), values, "limits", nil, false)
	var failing []support.Message
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			failing = append(failing, m)
		}
	}
	return failing
}

// `helm lint --strict` passes with the default values, and `helm
// template` (loading and rendering the chart) prints nothing: no
// symbolic link warning, no missing value.
func TestChartLintStrict(t *testing.T) {
	var logged bytes.Buffer
	log.SetOutput(&logged)
	defer log.SetOutput(os.Stderr)
	for _, m := range lintChart(t, nil) {
		t.Errorf("helm lint --strict: %v", m)
	}
	renderChart(t, "")
	if logged.Len() != 0 {
		t.Errorf("helm lint or helm template prints:\n%s", logged.String())
	}
}

// values.schema.json refuses what the templates could not use, and helm
// lint (and install, upgrade, template) says which value is wrong.
func TestChartSchema(t *testing.T) {
	for _, c := range []struct {
		values string
		key    string // what the message names
	}{
		{`replicas: "three"`, "replicas"},
		{`replicas: 0`, "replicas"},
		{`voters: 9`, "voters"},
		{`ports: {http: 70000}`, "http"},
		{`ports: {resp: 0}`, "resp"},
		{`antiAffinity: sometimes`, "antiAffinity"},
		{`image: {pullPolicy: Sometimes}`, "pullPolicy"},
		{`service: {type: ExternalName}`, "type"},
		{`persistence: {retentionWhenDeleted: Keep}`, "retentionWhenDeleted"},
		{`persistence: {accessModes: []}`, "accessModes"},
		{`probes: {startup: {failureThreshold: 0}}`, "failureThreshold"},
		{`shutdownTimeout: 10`, "shutdownTimeout"},
		{`replica: 3`, "replica"}, // a typo is not ignored
		{`auth: {existingSecret: Team_Secret}`, "existingSecret"},
	} {
		vals, err := chartutil.ReadValues([]byte(c.values))
		if err != nil {
			t.Fatal(err)
		}
		failing := lintChart(t, vals)
		if !slices.ContainsFunc(failing, func(m support.Message) bool {
			return m.Severity == support.ErrorSev && strings.Contains(m.Err.Error(), "schema") && strings.Contains(m.Err.Error(), c.key)
		}) {
			t.Errorf("%s: helm lint gives no schema error naming %s: %v", c.values, c.key, failing)
		}
	}
	// What values.yaml documents passes.
	for _, v := range []string{
		"replicas: 9\nvoters: 5",
		"probes: {startup: {periodSeconds: 10, failureThreshold: 60}}",
		"pdb: {maxUnavailable: 50%}",
		"extraEnv: {SLUICE_SYNC_INTERVAL: 50ms}",
		"persistence: {size: 10Gi, storageClassName: fast, accessModes: [ReadWriteOncePod]}",
		"resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 2500m}}",
		"metrics: {serviceMonitor: {interval: 1m}}",
	} {
		vals, err := chartutil.ReadValues([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range lintChart(t, vals) {
			t.Errorf("%s: helm lint --strict: %v", v, m)
		}
	}
}

// values.schema.json names every key of values.yaml.
func TestChartSchemaCoversValues(t *testing.T) {
	var values, sch map[string]any
	if err := yaml.Unmarshal([]byte(read(t, chartDir+"/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(read(t, chartDir+"/values.schema.json")), &sch); err != nil {
		t.Fatal(err)
	}
	if sch["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("$schema %v, want draft-07", sch["$schema"])
	}
	defs, _ := sch["definitions"].(map[string]any)
	var walk func(path string, v any, s map[string]any)
	walk = func(path string, v any, s map[string]any) {
		if ref, ok := s["$ref"].(string); ok {
			s, _ = defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
		if s == nil {
			t.Errorf("%s: no schema", path)
			return
		}
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			return
		}
		props, _ := s["properties"].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			p, _ := props[k].(map[string]any)
			if p == nil {
				if _, free := s["additionalProperties"].(map[string]any); !free {
					t.Errorf("%s.%s: not in values.schema.json", path, k)
				}
				continue
			}
			if p["type"] == nil && p["$ref"] == nil && p["oneOf"] == nil {
				t.Errorf("%s.%s: no type in values.schema.json", path, k)
			}
			walk(path+"."+k, m[k], p)
		}
	}
	walk("", values, sch)
}

// secretsGVR is where the fake cluster keeps Secrets.
var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// fakeCluster answers the chart's lookup calls from these objects, as
// `helm upgrade` answers them from the cluster.
type fakeCluster struct{ client dynamic.Interface }

func newFakeCluster(t *testing.T, secrets ...*corev1.Secret) fakeCluster {
	t.Helper()
	objs := make([]runtime.Object, 0, len(secrets))
	for _, s := range secrets {
		// As the API server returns it: data base64-encoded, in JSON.
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	return fakeCluster{dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{secretsGVR: "SecretList"}, objs...)}
}

func (c fakeCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	if apiVersion != "v1" || kind != "Secret" {
		return nil, false, os.ErrNotExist
	}
	return c.client.Resource(secretsGVR), true, nil
}

// An upgrade keeps the passwords: rendered again where the Secret of the
// first render exists (in the release's namespace), the chart gives the
// same Secret. Where none is found (`helm template`, another namespace,
// another name) each render makes new ones.
func TestChartSecretStable(t *testing.T) {
	first := renderChart(t, "").secrets["rl-sluice-auth"]
	if first == nil {
		t.Fatal("no Secret rendered")
	}
	installed := first.DeepCopy()
	installed.Namespace = "limits"
	again := renderChartWith(t, "", newFakeCluster(t, installed))
	checkSecrets(t, again, "rl-sluice-auth")
	got := again.secrets["rl-sluice-auth"]
	if got == nil || len(got.Data) != 2 || !maps.EqualFunc(got.Data, first.Data, bytes.Equal) {
		t.Errorf("the Secret changed on a render where it exists:\nfirst %v\nagain %v", first.Data, got)
	}
	if got != nil && (got.Annotations["helm.sh/resource-policy"] != "keep" || !maps.Equal(got.Labels, first.Labels)) {
		t.Errorf("the kept Secret's metadata: %+v", got.ObjectMeta)
	}

	elsewhere := first.DeepCopy()
	elsewhere.Namespace = "other"
	renamed := first.DeepCopy()
	renamed.Namespace, renamed.Name = "limits", "rl-other-auth"
	for _, cluster := range []fakeCluster{newFakeCluster(t), newFakeCluster(t, elsewhere, renamed)} {
		fresh := renderChartWith(t, "", cluster).secrets["rl-sluice-auth"]
		if fresh == nil || bytes.Equal(fresh.Data["requirepass"], first.Data["requirepass"]) ||
			bytes.Equal(fresh.Data["peer-password"], first.Data["peer-password"]) {
			t.Errorf("a render without the Secret in place reused its passwords: %v", fresh)
		}
	}
}
