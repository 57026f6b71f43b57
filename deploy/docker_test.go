package deploy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestComposeClusterInDocker builds the scratch image (make image), checks
// that a node started without SLUICE_PASSWORD exits naming it, starts
// docker-compose.yml's three nodes as containers on their bridge network,
// limits through every node, kills one container, keeps limiting and
// writing through the other two, and tears everything down. It needs a
// Docker engine and Compose, and publishes the file's ports (6380-6382,
// 9380-9382) on the host, so it runs only when SLUICE_DOCKER=1: .ci/run
// starts an engine and runs it after make test.
func TestComposeClusterInDocker(t *testing.T) {
	if os.Getenv("SLUICE_DOCKER") == "" {
		t.Skip("set SLUICE_DOCKER=1 to run the compose file's cluster in Docker (needs an engine; .ci/run does)")
	}
	compose := composeCommand(t)
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Fatalf("no Docker engine answers: %v\n%s", err, out)
	}
	if out, err := exec.Command("make", "-C", "..", "image").CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	secret := make([]byte, 16)
	rand.Read(secret)
	password := hex.EncodeToString(secret)
	project := "sluicetest" + hex.EncodeToString(secret[:3])
	runWith := func(password string, args ...string) (string, error) {
		all := append(append(compose[1:len(compose):len(compose)], "-f", filepath.Join("..", "docker-compose.yml"), "--project-directory", "..", "-p", project), args...)
		cmd := exec.Command(compose[0], all...)
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SLUICE_PASSWORD=") })
		if password != "" {
			cmd.Env = append(cmd.Env, "SLUICE_PASSWORD="+password)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(args ...string) (string, error) { return runWith(password, args...) }
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run("logs", "--no-color", "--tail", "40")
			t.Logf("container logs:\n%s", out)
		}
		if out, err := run("down", "-v", "--timeout", "5"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	})
	// Without SLUICE_PASSWORD compose still runs (ps), and a node started
	// without it exits at once naming it, in its container.
	if out, err := runWith("", "ps"); err != nil {
		t.Fatalf("compose ps without SLUICE_PASSWORD: %v\n%s", err, out)
	}
	if out, err := runWith("", "run", "--rm", "--no-deps", "sluice1"); err == nil || !strings.Contains(out, "SLUICE_PASSWORD") {
		t.Fatalf("a node started without SLUICE_PASSWORD: %v, want a failure naming SLUICE_PASSWORD:\n%s", err, out)
	}
	if out, err := run("up", "-d", "--no-build"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	ctx := context.Background()
	nodes := map[string]*redis.Client{}
	for i, name := range []string{"sluice1", "sluice2", "sluice3"} {
		c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", 6380+i), Password: password,
			Protocol: 2, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 10 * time.Second})
		t.Cleanup(func() { c.Close() })
		nodes[name] = c
	}
	// One cluster: every node names the same leader and three members.
	waitDocker(t, 120*time.Second, "three nodes in one cluster", func() bool {
		leader := ""
		for _, c := range nodes {
			info, err := clusterInfo(ctx, c)
			if err != nil || info["leader_id"] == "" || info["members"] != "3" || leader != "" && info["leader_id"] != leader {
				return false
			}
			leader = info["leader_id"]
		}
		return true
	})
	// Limit through every node: one limit of 30 an hour (a token every
	// two minutes), called round robin 150 times, admits within SPEC §5's
	// bound of what one node would (30, −2 % … +1 %, plus one burst): a
	// node just started may decide from its own bucket until its first
	// lease from the key's owner comes back.
	admitted := 0
	names := []string{"sluice1", "sluice2", "sluice3"}
	for i := 0; i < 150; i++ {
		v, err := nodes[names[i%3]].Do(ctx, "RL.ACQUIRE", "docker:demo", "RATE", 30, "PER", "hour").Slice()
		if err != nil {
			t.Fatalf("RL.ACQUIRE on %s: %v", names[i%3], err)
		}
		admitted += int(v[0].(int64))
	}
	t.Logf("a limit of 30 an hour called 150 times through three containers admitted %d", admitted)
	if admitted < 29 || admitted > 60 {
		t.Fatalf("a limit of 30 an hour called 150 times through three containers admitted %d, want 29…60", admitted)
	}
	// Kill one container: the other two keep limiting and keep a quorum
	// for writes.
	if out, err := run("kill", "sluice2"); err != nil {
		t.Fatalf("compose kill sluice2: %v\n%s", err, out)
	}
	delete(nodes, "sluice2")
	for name, c := range nodes {
		v, err := c.Do(ctx, "RL.ACQUIRE", "docker:after", "RATE", 5, "PER", "minute").Slice()
		if err != nil || v[0].(int64) != 1 {
			t.Fatalf("RL.ACQUIRE on %s after the kill: %v %v", name, v, err)
		}
	}
	waitDocker(t, 60*time.Second, "a budget write with one node killed", func() bool {
		return nodes["sluice1"].Do(ctx, "RL.BUDGET", "SET", "docker/after", "RATE", 10, "PER", "minute").Err() == nil
	})
	waitDocker(t, 30*time.Second, "the write on sluice3", func() bool {
		return nodes["sluice3"].Do(ctx, "RL.BUDGET", "GET", "docker/after").Err() == nil
	})
	v, err := nodes["sluice3"].Do(ctx, "RL.ACQUIRE", "docker/after").Slice()
	if err != nil || v[0].(int64) != 1 || v[2].(int64) != 10 {
		t.Fatalf("RL.ACQUIRE of the new budget on sluice3: %v %v", v, err)
	}
}

// composeCommand returns Compose v2 (docker compose) if the client has it,
// else Compose v1 (docker-compose).
func composeCommand(t *testing.T) []string {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	t.Fatal("neither `docker compose` nor docker-compose is installed")
	return nil
}

func clusterInfo(ctx context.Context, c *redis.Client) (map[string]string, error) {
	v, err := c.Do(ctx, "RL.CLUSTER", "INFO").Slice()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for i := 0; i+1 < len(v); i += 2 {
		m[fmt.Sprint(v[i])] = strings.TrimSpace(fmt.Sprint(v[i+1]))
	}
	return m, nil
}

func waitDocker(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}
