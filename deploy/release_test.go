package deploy_test

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"
)

// TestReleaseArtifacts runs `make release`'s script into a temporary
// folder and then uses every artifact the way a user would: the checksums
// check, the binaries are static, for their platform, and list their
// modules; the wheel and the sdist install with pip into clean venvs (no
// index) and import; the npm tarball installs into a clean folder and
// loads; the image tarball `docker load`s under the chart's default image
// name and runs a node that answers; the packaged chart renders with
// `helm template`, its values schema refuses a bad value, and the image
// its StatefulSet runs is the image just loaded.
//
// The release builds an image, so it needs a Docker engine and runs only
// when SLUICE_DOCKER=1 (.ci/run runs it beside TestComposeClusterInDocker,
// after starting an engine). A missing tool skips it, or fails it when
// SLUICE_REQUIRE_TOOLS is set.
func TestReleaseArtifacts(t *testing.T) {
	if os.Getenv("SLUICE_DOCKER") == "" {
		t.Skip("set SLUICE_DOCKER=1 to build the release and load its image (needs a Docker engine; .ci/run does)")
	}
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		python = requireTool(t, "python3", "apt-get install python3 python3-venv python3-pip python3-setuptools")
	}
	requireTool(t, "docker", "apt-get install docker.io")
	requireTool(t, "npm", "apt-get install npm")
	requireTool(t, "node", "apt-get install nodejs")
	requireTool(t, "sha256sum", "apt-get install coreutils")
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Arch}}").CombinedOutput(); err != nil {
		t.Fatalf("no Docker engine answers: %v\n%s", err, out)
	}

	chart := chartMeta(t)
	version := chart.AppVersion
	image := chart.Repository + ":" + version
	dist := filepath.Join(t.TempDir(), "dist")
	// The release tags the image; a tag that was there before stays.
	if exec.Command("docker", "image", "inspect", image).Run() != nil {
		t.Cleanup(func() { exec.Command("docker", "rmi", "-f", image).Run() })
	}
	start := time.Now()
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "release.sh"))
	cmd.Env = append(os.Environ(), "DIST="+dist, "PYTHON="+python)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/release.sh: %v\n%s", err, out)
	}
	t.Logf("scripts/release.sh took %v:\n%s", time.Since(start).Round(time.Second), out)

	files := map[string]bool{}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		files[e.Name()] = true
	}
	arch, _ := exec.Command("docker", "version", "--format", "{{.Server.Arch}}").Output()
	imageTar := fmt.Sprintf("sluice-image-%s-linux-%s.tar.gz", version, strings.TrimSpace(string(arch)))
	want := []string{"SHA256SUMS", imageTar, "sluice-" + chart.Version + ".tgz"}
	for _, p := range []string{"linux-amd64", "linux-arm64", "darwin-arm64"} {
		want = append(want, "sluice-"+version+"-"+p, "sluice-"+version+"-"+p+".buildinfo")
	}
	pyName, pyVersion := pythonProject(t)
	nodeName, nodeVersion := nodePackage(t)
	wheel := strings.ReplaceAll(pyName, "-", "_") + "-" + pyVersion + "-py3-none-any.whl"
	// setuptools names the sdist as the project is written (before 69) or
	// normalized (69 and later).
	sdist := pyName + "-" + pyVersion + ".tar.gz"
	if normalized := strings.ReplaceAll(pyName, "-", "_") + "-" + pyVersion + ".tar.gz"; files[normalized] {
		sdist = normalized
	}
	npmTar := strings.ReplaceAll(strings.TrimPrefix(nodeName, "@"), "/", "-") + "-" + nodeVersion + ".tgz"
	want = append(want, wheel, sdist, npmTar)
	for _, f := range want {
		if !files[f] {
			t.Errorf("dist has no %s", f)
		}
	}
	for f := range files {
		if !slices.Contains(want, f) {
			t.Errorf("dist has %s, which the release does not list", f)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Run("checksums", func(t *testing.T) {
		cmd := exec.Command("sha256sum", "-c", "--strict", "SHA256SUMS")
		cmd.Dir = dist
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sha256sum -c: %v\n%s", err, out)
		}
		var listed []string
		for _, line := range strings.Split(strings.TrimSpace(string(mustRead(t, filepath.Join(dist, "SHA256SUMS")))), "\n") {
			if _, name, ok := strings.Cut(line, "  "); ok {
				listed = append(listed, name)
			}
		}
		for _, f := range want {
			if f != "SHA256SUMS" && !slices.Contains(listed, f) {
				t.Errorf("SHA256SUMS does not list %s", f)
			}
		}
	})

	t.Run("binaries", func(t *testing.T) {
		for _, p := range []struct{ goos, goarch string }{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}} {
			path := filepath.Join(dist, "sluice-"+version+"-"+p.goos+"-"+p.goarch)
			checkExecutable(t, path, p.goos, p.goarch)
			bi, err := buildinfo.ReadFile(path)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			settings := map[string]string{}
			for _, s := range bi.Settings {
				settings[s.Key] = s.Value
			}
			if bi.Main.Path != "github.com/sluice-rl/sluice" || bi.Path != "github.com/sluice-rl/sluice/cmd/sluice" ||
				settings["CGO_ENABLED"] != "0" || settings["GOOS"] != p.goos || settings["GOARCH"] != p.goarch || settings["-trimpath"] != "true" {
				t.Errorf("%s: build info %s %s %v", path, bi.Path, bi.Main.Path, settings)
			}
			list := string(mustRead(t, path+".buildinfo"))
			for _, dep := range []string{"github.com/hashicorp/raft", "github.com/tidwall/redcon", "google.golang.org/grpc"} {
				if !regexp.MustCompile(`(?m)^\tdep\t` + regexp.QuoteMeta(dep) + `\tv`).MatchString(list) {
					t.Errorf("%s.buildinfo does not list %s:\n%s", path, dep, list)
				}
			}
			if !strings.HasPrefix(list, filepath.Base(path)+": go") {
				t.Errorf("%s.buildinfo should start with the binary's name and Go version: %.80q", path, list)
			}
			if p.goos == runtime.GOOS && p.goarch == runtime.GOARCH {
				if out, err := exec.Command(path, "version").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "sluice "+version {
					t.Errorf("%s version: %v %q, want %q", path, err, out, "sluice "+version)
				}
			}
		}
	})

	t.Run("python", func(t *testing.T) {
		module := "sluice"
		for _, artifact := range []string{wheel, sdist} {
			venv := filepath.Join(t.TempDir(), "venv")
			runOK(t, "", python, "-m", "venv", "--system-site-packages", venv)
			// The sdist builds with the system's setuptools; no index is asked.
			runOK(t, "", filepath.Join(venv, "bin", "pip"), "install", "-q", "--no-index", "--no-deps",
				"--no-build-isolation", filepath.Join(dist, artifact))
			got := runOK(t, t.TempDir(), filepath.Join(venv, "bin", "python"), "-c",
				"import importlib.metadata as m, "+module+"; print(m.version('"+pyName+"'), "+module+".__file__)")
			f := strings.Fields(got)
			if len(f) != 2 || f[0] != pyVersion || !strings.HasPrefix(f[1], venv) {
				t.Errorf("%s: import %s gave %q, want version %s from %s", artifact, module, got, pyVersion, venv)
			}
		}
	})

	t.Run("npm", func(t *testing.T) {
		dir := t.TempDir()
		// ioredis is an optional peer dependency: the tarball alone
		// installs with no registry.
		runOK(t, dir, "npm", "install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", filepath.Join(dist, npmTar))
		got := runOK(t, dir, "node", "-e", `const s = require("`+nodeName+`");
const p = require("`+nodeName+`/package.json");
console.log(p.version, typeof s.Client === "function" ? "Client" : Object.keys(s).join(","));`)
		if strings.TrimSpace(got) != nodeVersion+" Client" {
			t.Errorf("require(%q) gave %q, want %q", nodeName, got, nodeVersion+" Client")
		}
	})

	t.Run("image", func(t *testing.T) {
		out := runOK(t, "", "docker", "load", "-i", filepath.Join(dist, imageTar))
		if !strings.Contains(out, "Loaded image: "+image) {
			t.Fatalf("docker load: %q, want %q", out, "Loaded image: "+image)
		}
		if got := strings.TrimSpace(runOK(t, "", "docker", "run", "--rm", image, "version")); got != "sluice "+version {
			t.Errorf("docker run %s version: %q", image, got)
		}
		id := strings.TrimSpace(runOK(t, "", "docker", "run", "-d", "-e", "SLUICE_REQUIREPASS=a-release-test-password",
			"-p", "127.0.0.1::6380", image))
		t.Cleanup(func() {
			if t.Failed() {
				logs, _ := exec.Command("docker", "logs", "--tail", "30", id).CombinedOutput()
				t.Logf("container logs:\n%s", logs)
			}
			exec.Command("docker", "rm", "-f", id).Run()
		})
		addr := strings.TrimSpace(strings.Split(runOK(t, "", "docker", "port", id, "6380/tcp"), "\n")[0])
		c := redis.NewClient(&redis.Options{Addr: addr, Password: "a-release-test-password", Protocol: 2, MaxRetries: -1,
			DialTimeout: 2 * time.Second, ReadTimeout: 10 * time.Second})
		defer c.Close()
		ctx := context.Background()
		var v []any
		waitDocker(t, 60*time.Second, "the container's node to admit a request", func() bool {
			v, err = c.Do(ctx, "RL.ACQUIRE", "release:demo", "RATE", 2, "PER", "minute").Slice()
			return err == nil
		})
		if v[0].(int64) != 1 {
			t.Errorf("the first RL.ACQUIRE in the container: %v", v)
		}
	})

	t.Run("chart", func(t *testing.T) {
		helm := helmBinary(t)
		pkg := filepath.Join(dist, "sluice-"+chart.Version+".tgz")
		var meta chartInfo
		if err := yaml.Unmarshal([]byte(runOK(t, "", helm, "show", "chart", pkg)), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Version != chart.Version || meta.AppVersion != version {
			t.Errorf("the packaged chart is %s (appVersion %s), want %s (%s)", meta.Version, meta.AppVersion, chart.Version, version)
		}
		cmd := exec.Command(helm, "template", "rl", pkg)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Fatalf("helm template: %v\n%s", err, stderr.String())
		}
		images := renderedImages(t, stdout.Bytes())
		if len(images) == 0 || slices.ContainsFunc(images, func(s string) bool { return s != image }) {
			t.Errorf("the packaged chart runs %v, want %s (the image loaded)", images, image)
		}
		// The schema travels in the package: a bad value is refused.
		out, err := exec.Command(helm, "template", "rl", pkg, "--set", "replicas=0").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "replicas") || !strings.Contains(strings.ToLower(string(out)), "schema") {
			t.Errorf("helm template --set replicas=0: %v, want a schema error naming replicas:\n%s", err, out)
		}
	})
}

// requireTool returns the path of a program, skipping the test without it
// (failing it when SLUICE_REQUIRE_TOOLS is set); install says how to get it.
func requireTool(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s is not installed (%s); SLUICE_REQUIRE_TOOLS is set", name, install)
		}
		t.Skipf("%s is not installed (%s)", name, install)
	}
	return p
}

// runOK runs a command in dir and returns its output, failing the test on
// an error.
func runOK(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type chartInfo struct {
	Version    string
	AppVersion string `yaml:"appVersion"`
	Repository string `yaml:"-"`
}

// chartMeta reads the chart's version, appVersion and default image
// repository from deploy/helm/sluice.
func chartMeta(t *testing.T) chartInfo {
	t.Helper()
	var c chartInfo
	readYAML(t, "deploy/helm/sluice/Chart.yaml", &c)
	var values struct {
		Image struct{ Repository, Tag string }
	}
	readYAML(t, "deploy/helm/sluice/values.yaml", &values)
	if c.Version == "" || c.AppVersion == "" || values.Image.Repository == "" {
		t.Fatalf("deploy/helm/sluice: version %q, appVersion %q, image.repository %q", c.Version, c.AppVersion, values.Image.Repository)
	}
	if values.Image.Tag != "" {
		t.Fatalf("deploy/helm/sluice/values.yaml: image.tag %q: the default tag should be the appVersion, which the release sets", values.Image.Tag)
	}
	c.Repository = values.Image.Repository
	return c
}

func pythonProject(t *testing.T) (name, version string) {
	t.Helper()
	src := read(t, "clients/python/pyproject.toml")
	_, project, _ := strings.Cut(src, "\n[project]\n")
	project, _, _ = strings.Cut(project, "\n[")
	get := func(key string) string {
		m := regexp.MustCompile(`(?m)^` + key + `\s*=\s*"([^"]+)"`).FindStringSubmatch(project)
		if m == nil {
			t.Fatalf("clients/python/pyproject.toml: no %s in [project]", key)
		}
		return m[1]
	}
	return get("name"), get("version")
}

func nodePackage(t *testing.T) (name, version string) {
	t.Helper()
	var p struct{ Name, Version string }
	readYAML(t, "clients/node/package.json", &p) // JSON is YAML
	return p.Name, p.Version
}

// checkExecutable fails unless path is an executable for goos/goarch
// that needs no dynamic loader or shared library.
func checkExecutable(t *testing.T, path, goos, goarch string) {
	t.Helper()
	switch goos {
	case "linux":
		f, err := elf.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer f.Close()
		machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if f.Machine != machine || f.Type != elf.ET_EXEC {
			t.Errorf("%s: %v %v, want an executable for %v", path, f.Machine, f.Type, machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s: dynamically linked (%v): not static", path, p.Type)
			}
		}
	case "darwin":
		f, err := macho.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer f.Close()
		if f.Cpu != macho.CpuArm64 || f.Type != macho.TypeExec {
			t.Errorf("%s: %v %v, want an arm64 executable", path, f.Cpu, f.Type)
		}
		// macOS has no static libc: a Go binary built without cgo links the
		// system's libSystem, libresolv (the net package's DNS) and the
		// CoreFoundation and Security frameworks (crypto/x509's roots), as
		// every macOS program may; cgo would add others.
		libs, _ := f.ImportedLibraries()
		for _, l := range libs {
			if !strings.HasPrefix(l, "/usr/lib/libSystem.") && !strings.HasPrefix(l, "/usr/lib/libresolv.") &&
				!strings.HasPrefix(l, "/System/Library/Frameworks/") {
				t.Errorf("%s: links %s", path, l)
			}
		}
	}
}

// helmBinary returns the helm the release used: HELM, or the tool
// deploy/charttest's go.mod pins (go tool -n helm builds it once into the
// Go cache and prints its path).
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	return strings.TrimSpace(runOK(t, filepath.Join(root, "deploy", "charttest"), "go", "tool", "-n", "helm"))
}

// renderedImages returns the image of every container and init container
// in a rendered chart.
func renderedImages(t *testing.T, manifests []byte) []string {
	t.Helper()
	var images []string
	dec := yaml.NewDecoder(bytes.NewReader(manifests))
	for {
		var doc struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						Containers     []struct{ Image string }
						InitContainers []struct{ Image string } `yaml:"initContainers"`
					}
				}
			}
		}
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template's output: %v", err)
		}
		for _, c := range append(doc.Spec.Template.Spec.Containers, doc.Spec.Template.Spec.InitContainers...) {
			images = append(images, c.Image)
		}
	}
	return images
}
