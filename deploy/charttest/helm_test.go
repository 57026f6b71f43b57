package charttest

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/envoyrls"
	"github.com/sluice-rl/sluice/server"
)

// root is the repository root, seen from this package's directory.
const root = "../.."

const chartDir = "deploy/helm/sluice"

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rendered is one render of the chart: its objects decoded strictly into
// their Kubernetes types, by name, and NOTES.txt.
type rendered struct {
	sts      *appsv1.StatefulSet
	services map[string]*corev1.Service
	secrets  map[string]*corev1.Secret
	configs  map[string]*corev1.ConfigMap
	pdbs     []*policyv1.PodDisruptionBudget
	monitors []*serviceMonitor
	rules    []*prometheusRule
	notes    string
	raw      string // every manifest, for searching
}

// serviceMonitor and prometheusRule are the fields of the Prometheus
// Operator's CRDs the chart sets (k8s.io/api has no types for them);
// decoding strictly into them refuses any other field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel  string               `json:"jobLabel"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ruleGroups `json:"spec"`
}

// renderChart renders the chart as `helm template rl --namespace limits`
// with these values over values.yaml.
func renderChart(t *testing.T, values string) *rendered {
	t.Helper()
	return renderChartWith(t, values, nil)
}

// renderChartWith renders as renderChart does, with lookup answered by
// cluster when it is not nil (as `helm install` and `helm upgrade` render).
func renderChartWith(t *testing.T, values string, cluster engine.ClientProvider) *rendered {
	t.Helper()
	chrt, err := loader.Load(filepath.Join(root, chartDir))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	top, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: "rl", Namespace: "limits", Revision: 1, IsInstall: true},
		chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	var files map[string]string
	if cluster == nil {
		files, err = engine.Render(chrt, top)
	} else {
		files, err = engine.RenderWithClientProvider(chrt, top, cluster)
	}
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	r := &rendered{services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{}, configs: map[string]*corev1.ConfigMap{}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			r.notes = files[name]
			continue
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(files[name], -1) {
			if strings.TrimSpace(stripComments(doc)) != "" {
				r.add(t, name, doc)
			}
		}
	}
	if r.sts == nil {
		t.Fatal("no StatefulSet rendered")
	}
	return r
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

// add decodes one manifest strictly into the type of its kind.
func (r *rendered) add(t *testing.T, file, doc string) {
	t.Helper()
	r.raw += doc + "\n---\n"
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	strict := func(v any) {
		if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			t.Fatalf("%s: %s %s does not decode strictly: %v\n%s", file, tm.APIVersion, tm.Kind, err, doc)
		}
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 StatefulSet":
		r.sts = &appsv1.StatefulSet{}
		strict(r.sts)
	case "v1 Service":
		s := &corev1.Service{}
		strict(s)
		r.services[s.Name] = s
	case "v1 Secret":
		s := &corev1.Secret{}
		strict(s)
		r.secrets[s.Name] = s
	case "v1 ConfigMap":
		c := &corev1.ConfigMap{}
		strict(c)
		r.configs[c.Name] = c
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		strict(p)
		r.pdbs = append(r.pdbs, p)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		m := &serviceMonitor{}
		strict(m)
		r.monitors = append(r.monitors, m)
	case "monitoring.coreos.com/v1 PrometheusRule":
		p := &prometheusRule{}
		strict(p)
		r.rules = append(r.rules, p)
	default:
		t.Fatalf("%s: unexpected object %s %s", file, tm.APIVersion, tm.Kind)
	}
}

func (r *rendered) container(t *testing.T) corev1.Container {
	t.Helper()
	cs := r.sts.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return cs[0]
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

func portOf(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container has no port %q", name)
	return 0
}

// nodeSettings loads the container's environment as pod pod's sluice
// would ($(VAR) references expanded, secrets as the Secret holds them)
// and validates it.
func nodeSettings(t *testing.T, r *rendered, pod string) server.Config {
	t.Helper()
	vars := map[string]string{}
	for _, e := range r.container(t).Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vars[e.Name] = pod
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			sec := r.secrets[ref.Name]
			if sec == nil {
				sec = &corev1.Secret{Data: map[string][]byte{ref.Key: []byte("an-operators-own-secret-value")}}
			}
			vars[e.Name] = string(sec.Data[ref.Key])
		default:
			vars[e.Name] = regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(e.Value, func(m string) string { return vars[m[2:len(m)-1]] })
		}
	}
	cfg, err := server.Load(nil, func(k string) string { return vars[k] }, io.Discard)
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil {
		err = cfg.CheckSecrets()
	}
	if err != nil {
		t.Fatalf("the pod's settings do not validate: %v", err)
	}
	return cfg.WithDefaults()
}

// The default values: a StatefulSet of 3 that finds its peers by DNS, a
// headless service publishing not-ready pods, a client service, a PDB,
// anti-affinity, probes, a locked-down container and passwords only from
// a Secret.
func TestChartDefaults(t *testing.T) {
	r := renderChart(t, "")
	checkStatefulSet(t, r)
	checkServices(t, r)
	checkPDB(t, r)
	checkSecurity(t, r)
	checkSecrets(t, r, "rl-sluice-auth")
	if len(r.configs)+len(r.monitors)+len(r.rules) != 0 {
		t.Errorf("the defaults render Envoy or monitoring objects")
	}
	cfg := nodeSettings(t, r, "rl-sluice-0")
	const peers = "rl-sluice-peers.limits.svc.cluster.local"
	if cfg.NodeID != "rl-sluice-0" || cfg.RaftAddr != "rl-sluice-0."+peers+":7380" || cfg.Advertise != "rl-sluice-0."+peers+":6380" ||
		cfg.Join != "dns:"+peers || cfg.BootstrapExpect != 3 || cfg.DataDir != "/var/lib/sluice" {
		t.Errorf("node settings: id %q raft %q advertise %q join %q expect %d data %q",
			cfg.NodeID, cfg.RaftAddr, cfg.Advertise, cfg.Join, cfg.BootstrapExpect, cfg.DataDir)
	}
	for _, want := range []string{"rl-sluice.limits.svc:6380", "RL.ACQUIRE", "RL.CLUSTER LEAVE", "kubectl -n limits get secret rl-sluice-auth"} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt does not say %q:\n%s", want, r.notes)
		}
	}
	// --bootstrap-expect follows the replicas.
	if cfg := nodeSettings(t, renderChart(t, "replicas: 5"), "rl-sluice-4"); cfg.BootstrapExpect != 5 {
		t.Errorf("replicas 5: --bootstrap-expect %d", cfg.BootstrapExpect)
	}
	// Scaled past three, the pods keep --voters 3 unless told otherwise.
	if cfg.Voters != 3 {
		t.Errorf("defaults: --voters %d", cfg.Voters)
	}
	if cfg := nodeSettings(t, renderChart(t, "replicas: 9\nvoters: 5"), "rl-sluice-8"); cfg.Voters != 5 {
		t.Errorf("voters 5: --voters %d", cfg.Voters)
	}
}

func checkStatefulSet(t *testing.T, r *rendered) {
	t.Helper()
	s := r.sts.Spec
	if s.Replicas == nil || *s.Replicas != 3 || s.PodManagementPolicy != appsv1.ParallelPodManagement || s.ServiceName != "rl-sluice-peers" {
		t.Errorf("StatefulSet: replicas %v, podManagementPolicy %q, serviceName %q", s.Replicas, s.PodManagementPolicy, s.ServiceName)
	}
	if len(s.VolumeClaimTemplates) != 1 || s.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("volumeClaimTemplates: %+v", s.VolumeClaimTemplates)
	}
	c := r.container(t)
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "data" && m.MountPath == "/var/lib/sluice" }) {
		t.Errorf("the Raft data volume is not mounted at /var/lib/sluice: %+v", c.VolumeMounts)
	}
	http := portOf(t, c, "http")
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/healthz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Fatalf("%s probe: %+v, want GET %s on the http port (%d)", p.name, p.probe, p.path, http)
		}
		if p.probe.PeriodSeconds < 1 || p.probe.FailureThreshold < 1 {
			t.Errorf("%s probe: periodSeconds %d, failureThreshold %d", p.name, p.probe.PeriodSeconds, p.probe.FailureThreshold)
		}
	}
	// A node replaying a large Raft log may take a minute or more before
	// it serves: the startup probe, which holds off the liveness probe,
	// waits longer than that (the liveness probe alone would restart it
	// after periodSeconds × failureThreshold).
	if s := c.StartupProbe; s.PeriodSeconds*s.FailureThreshold < 120 {
		t.Errorf("the startup probe gives a starting node %ds (%d × %d), want 2 min or more", s.PeriodSeconds*s.FailureThreshold, s.PeriodSeconds, s.FailureThreshold)
	}
	if nodeSettings(t, r, "rl-sluice-1").HTTPAddr != fmt.Sprintf("0.0.0.0:%d", http) {
		t.Errorf("the probes' port %d is not where the node serves HTTP", http)
	}
	pre := c.Lifecycle
	if pre == nil || pre.PreStop == nil || pre.PreStop.Sleep == nil || pre.PreStop.Sleep.Seconds < 1 {
		t.Fatalf("preStop: %+v", pre)
	}
	// The grace period covers the preStop pause, --shutdown-timeout and
	// the leadership handover after it.
	grace := r.sts.Spec.Template.Spec.TerminationGracePeriodSeconds
	stop := nodeSettings(t, r, "rl-sluice-1").ShutdownTimeout.Seconds()
	if grace == nil || float64(*grace) < float64(pre.PreStop.Sleep.Seconds)+stop+5 {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %ds + shutdown %vs + 5s", grace, pre.PreStop.Sleep.Seconds, stop)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v", c.Resources)
	}
	checkAntiAffinity(t, r)
}

func checkAntiAffinity(t *testing.T, r *rendered) {
	t.Helper()
	aff := r.sts.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("no required pod anti-affinity: %+v", aff)
	}
	term := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != "kubernetes.io/hostname" || !selects(term.LabelSelector.MatchLabels, r.sts.Spec.Template.Labels) {
		t.Errorf("anti-affinity term %+v does not keep the pods %v on separate nodes", term, r.sts.Spec.Template.Labels)
	}
}

// selects reports whether a non-empty selector matches labels.
func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

func checkServices(t *testing.T, r *rendered) {
	t.Helper()
	pods := r.sts.Spec.Template.Labels
	peers, clients := r.services["rl-sluice-peers"], r.services["rl-sluice"]
	if peers == nil || clients == nil || len(r.services) != 2 {
		t.Fatalf("services %v, want rl-sluice-peers and rl-sluice", slices.Collect(maps.Keys(r.services)))
	}
	if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses || !selects(peers.Spec.Selector, pods) {
		t.Errorf("peers' service: clusterIP %q, publishNotReadyAddresses %v, selector %v", peers.Spec.ClusterIP, peers.Spec.PublishNotReadyAddresses, peers.Spec.Selector)
	}
	if clients.Spec.ClusterIP == corev1.ClusterIPNone || !selects(clients.Spec.Selector, pods) {
		t.Errorf("clients' service: %+v", clients.Spec)
	}
	for _, svc := range []*corev1.Service{peers, clients} {
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "resp" && p.TargetPort.String() == "resp" }) {
			t.Errorf("%s has no RESP port", svc.Name)
		}
	}
}

func checkPDB(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(r.pdbs))
	}
	p := r.pdbs[0].Spec
	if p.MaxUnavailable == nil || p.MaxUnavailable.String() != "1" || p.MinAvailable != nil || p.Selector == nil || !selects(p.Selector.MatchLabels, r.sts.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget: %+v", p)
	}
}

func checkSecurity(t *testing.T, r *rendered) {
	t.Helper()
	pod := r.sts.Spec.Template.Spec.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.RunAsUser == nil || *pod.RunAsUser == 0 {
		t.Errorf("pod securityContext: %+v", pod)
	}
	c := r.container(t).SecurityContext
	if c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem || c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation ||
		c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.Capabilities.Add) != 0 {
		t.Errorf("container securityContext: %+v", c)
	}
}

// checkSecrets: the passwords come only through secretKeyRef from the
// Secret named; no value of the chart's values.yaml is a password; the
// Secret the chart makes (if any) holds long random passwords, new at
// each install.
func checkSecrets(t *testing.T, r *rendered, name string) {
	t.Helper()
	env := envOf(r.container(t))
	for _, v := range []string{"SLUICE_REQUIREPASS", "SLUICE_PEER_PASSWORD"} {
		e, ok := env[v]
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != name {
			t.Errorf("%s is not taken from Secret %s: %+v", v, name, e)
		}
	}
	for _, e := range r.container(t).Env {
		if regexp.MustCompile(`(?i)pass|secret|token`).MatchString(e.Name) && e.Value != "" {
			t.Errorf("%s is a plain value in the manifest", e.Name)
		}
	}
	values := read(t, chartDir+"/values.yaml")
	for _, sec := range r.secrets {
		for k, v := range sec.Data {
			if len(v) < 32 || strings.Contains(values, string(v)) || strings.Contains(r.raw, string(v)) {
				t.Errorf("Secret %s key %s: %d bytes, or in plain text in values.yaml or a manifest", sec.Name, k, len(v))
			}
		}
	}
}

// The Secret the chart generates differs at each install, and none is
// made for an existing one.
func TestChartSecrets(t *testing.T) {
	a, b := renderChart(t, ""), renderChart(t, "")
	sa, sb := a.secrets["rl-sluice-auth"], b.secrets["rl-sluice-auth"]
	if sa == nil || sb == nil || string(sa.Data["requirepass"]) == string(sb.Data["requirepass"]) ||
		string(sa.Data["requirepass"]) == string(sa.Data["peer-password"]) {
		t.Fatalf("generated passwords are not random: %v %v", sa, sb)
	}
	own := renderChart(t, "auth: {existingSecret: team-sluice, requirepassKey: pw, peerPasswordKey: cluster}")
	if len(own.secrets) != 0 {
		t.Errorf("a Secret is rendered though auth.existingSecret is set")
	}
	checkSecrets(t, own, "team-sluice")
	env := envOf(own.container(t))
	if env["SLUICE_REQUIREPASS"].ValueFrom.SecretKeyRef.Key != "pw" || env["SLUICE_PEER_PASSWORD"].ValueFrom.SecretKeyRef.Key != "cluster" {
		t.Errorf("secret keys: %+v", env)
	}
}

// The Envoy front and monitoring: the gRPC port on the pods and the
// clients' service, the rules in a ConfigMap mounted as a directory
// (updates reach running pods; a subPath mount would never see them), a
// ServiceMonitor over every pod and the alert rules of
// deploy/prometheus-alerts.yml.
func TestChartEnvoyAndMonitoring(t *testing.T) {
	r := renderChart(t, `
envoy:
  enabled: true
  rules:
    api.yaml: |
      domain: api
      descriptors:
        - key: remote_address
          rate_limit: {unit: second, requests_per_unit: 10}
metrics:
  serviceMonitor: {enabled: true}
  prometheusRule: {enabled: true}
`)
	checkStatefulSet(t, r)
	checkSecurity(t, r)
	checkEnvoy(t, r)
	checkMonitoring(t, r)
}

func checkEnvoy(t *testing.T, r *rendered) {
	t.Helper()
	cm := r.configs["rl-sluice-envoy"]
	if cm == nil || len(cm.Data) != 1 {
		t.Fatalf("envoy ConfigMap: %+v", r.configs)
	}
	if _, err := envoyrls.ParseConfig("api.yaml", []byte(cm.Data["api.yaml"])); err != nil {
		t.Errorf("the rules in the ConfigMap do not load: %v", err)
	}
	c := r.container(t)
	cfg := nodeSettings(t, r, "rl-sluice-2")
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == cfg.EnvoyConfig {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || mount.SubPath != "" {
		t.Fatalf("--envoy-config %s is not a directory mount: %+v", cfg.EnvoyConfig, c.VolumeMounts)
	}
	if !slices.ContainsFunc(r.sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == mount.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name
	}) {
		t.Errorf("volume %s is not ConfigMap %s", mount.Name, cm.Name)
	}
	grpc := portOf(t, c, "grpc")
	if cfg.GRPCAddr != fmt.Sprintf("0.0.0.0:%d", grpc) {
		t.Errorf("--grpc-addr %q, container port %d", cfg.GRPCAddr, grpc)
	}
	if !slices.ContainsFunc(r.services["rl-sluice"].Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc" && p.TargetPort.String() == "grpc" }) {
		t.Errorf("the clients' service has no grpc port")
	}
}

func checkMonitoring(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.monitors) != 1 || len(r.rules) != 1 {
		t.Fatalf("%d ServiceMonitors and %d PrometheusRules, want 1 each", len(r.monitors), len(r.rules))
	}
	m := r.monitors[0].Spec
	peers := r.services["rl-sluice-peers"]
	if !selects(m.Selector.MatchLabels, peers.Labels) || selects(m.Selector.MatchLabels, r.services["rl-sluice"].Labels) {
		t.Errorf("the ServiceMonitor does not select the peers' service (every pod) alone: %v", m.Selector.MatchLabels)
	}
	if len(m.Endpoints) != 1 || m.Endpoints[0].Port != "http" || m.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints: %+v", m.Endpoints)
	}
	// The alert rules select job="sluice": the job label is taken from the
	// service's label named by jobLabel.
	if peers.Labels[m.JobLabel] != "sluice" {
		t.Errorf("jobLabel %q gives job %q, the rules want \"sluice\"", m.JobLabel, peers.Labels[m.JobLabel])
	}
	var want ruleGroups
	if err := yaml.UnmarshalStrict([]byte(read(t, "deploy/prometheus-alerts.yml")), &want); err != nil {
		t.Fatal(err)
	}
	got := r.rules[0].Spec
	if len(want.Groups) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("PrometheusRule groups differ from deploy/prometheus-alerts.yml:\n got %+v\nwant %+v", got, want)
	}
}

// Every yaml block of docs/operations.md's Kubernetes section is a values
// file that renders, decodes strictly and gives pods valid settings.
func TestOperationsValues(t *testing.T) {
	doc := read(t, "docs/operations.md")
	_, sec, ok := strings.Cut(doc, "\n## Kubernetes\n")
	if !ok {
		t.Fatal("docs/operations.md has no Kubernetes section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	blocks := regexp.MustCompile("(?s)\n```yaml\n(.*?)\n```").FindAllStringSubmatch(sec, -1)
	if len(blocks) < 2 {
		t.Fatalf("%d yaml blocks in the Kubernetes section", len(blocks))
	}
	for _, b := range blocks {
		r := renderChart(t, b[1])
		nodeSettings(t, r, "rl-sluice-1")
		checkSecurity(t, r)
	}
}
