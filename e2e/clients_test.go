package e2e

import (
	"bufio"
	"context"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestGoRedisDefaultOptions(t *testing.T) {
	p := single(t)
	ctx := context.Background()
	// Default options: go-redis v9 opens with HELLO 3 (the connection
	// speaks RESP3) and sends CLIENT SETINFO.
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp})
	defer rdb.Close()
	res, err := rdb.Do(ctx, "RL.ACQUIRE", "user:1", "RATE", 10, "BURST", 10).Slice()
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(1), int64(9), int64(10), int64(0), int64(100), "user:1"}
	for i := range want {
		if res[i] != want[i] {
			t.Fatalf("reply %v, want %v", res, want)
		}
	}
	info, err := rdb.Do(ctx, "CLIENT", "INFO").Text()
	if err != nil || !strings.Contains(info, "lib-name=go-redis") {
		t.Fatalf("CLIENT SETINFO did not arrive: %q %v", info, err)
	}
	cell, err := rdb.Do(ctx, "CL.THROTTLE", "user123", 15, 30, 60).Int64Slice()
	if err != nil || len(cell) != 5 || cell[0] != 0 || cell[1] != 16 || cell[2] != 15 {
		t.Fatalf("CL.THROTTLE %v %v", cell, err)
	}
	// A pipeline of 100 over one connection.
	cmds, err := rdb.Pipelined(ctx, func(pp redis.Pipeliner) error {
		for i := 0; i < 100; i++ {
			pp.Do(ctx, "RL.ACQUIRE", "pipe", "RATE", 1, "PER", "hour", "BURST", 60)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for _, c := range cmds {
		if v, _ := c.(*redis.Cmd).Slice(); v[0] == int64(1) {
			admitted++
		}
	}
	if admitted != 60 {
		t.Fatalf("pipeline admitted %d, want 60", admitted)
	}
	if err := rdb.Do(ctx, "RL.ACQUIRE", "k", "RATE", 0).Err(); err == nil || err.Error() != "ERR RATE must be an integer between 1 and 1000000000000" {
		t.Fatalf("bad RATE: %v", err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 3 {
		t.Fatalf("DBSIZE %d %v", n, err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestGoRedisWithPassword(t *testing.T) {
	p := single(t, "--requirepass", "hunter2")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp, Password: "hunter2"})
	defer rdb.Close()
	if err := rdb.Do(ctx, "RL.ACQUIRE", "a", "RATE", 5).Err(); err != nil {
		t.Fatalf("authenticated client: %v", err)
	}
	bad := redis.NewClient(&redis.Options{Addr: p.Resp, Password: "wrong"})
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v", err)
	}
	anon := redis.NewClient(&redis.Options{Addr: p.Resp})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("no password: %v", err)
	}
}

func TestRedisCLI(t *testing.T) {
	cli := requireTool(t, "redis-cli")
	p := single(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(cli, append([]string{"-p", port(p.Resp)}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("RL.ACQUIRE", "k", "RATE", "10", "BURST", "10"); got != "1\n9\n10\n0\n100\nk" {
		t.Fatalf("RL.ACQUIRE via redis-cli:\n%s", got)
	}
	if got := run("CL.THROTTLE", "user123", "15", "30", "60"); got != "0\n16\n15\n-1\n2" {
		t.Fatalf("CL.THROTTLE via redis-cli:\n%s", got)
	}
	if got := run("RL.ACQUIRE", "k", "RATE", "ten"); got != "ERR RATE must be an integer between 1 and 1000000000000" {
		t.Fatalf("error via redis-cli: %s", got)
	}
	if got := run("PING"); got != "PONG" {
		t.Fatal(got)
	}
	if got := run("--no-raw", "DBSIZE"); got != "(integer) 2" {
		t.Fatalf("DBSIZE: %s", got)
	}
	// redis-cli's interactive mode loads COMMAND DOCS for hints; piping a
	// command through it exercises that start-up path.
	cmd := exec.Command(cli, "-p", port(p.Resp))
	cmd.Stdin = strings.NewReader("RL.PEEK k\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "k") {
		t.Fatalf("interactive redis-cli: %v\n%s", err, out)
	}
}

func TestRedisBenchmark(t *testing.T) {
	bench := requireTool(t, "redis-benchmark")
	p := single(t)
	for _, args := range [][]string{
		{"-t", "ping", "-n", "20000", "-c", "20"},
		{"-n", "20000", "-c", "20", "-r", "100000", "RL.ACQUIRE", "key:__rand_int__", "RATE", "100", "BURST", "100"},
		{"-n", "20000", "-c", "20", "-P", "16", "-r", "100000", "RL.ACQUIRE", "key:__rand_int__", "RATE", "100", "BURST", "100"},
	} {
		out, err := exec.Command(bench, append([]string{"-p", port(p.Resp), "-q"}, args...)...).CombinedOutput()
		s := strings.ReplaceAll(string(out), "\r", "\n")
		if err != nil || !strings.Contains(s, "requests per second") || strings.Contains(s, "ERR") || strings.Contains(s, "rror") {
			t.Fatalf("redis-benchmark %v: %v\n%s", args, err, s)
		}
	}
	// Every RL.ACQUIRE above reached the engine: the keys exist.
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp})
	defer rdb.Close()
	if n, err := rdb.DBSize(context.Background()).Result(); err != nil || n < 1000 {
		t.Fatalf("DBSIZE after benchmark: %d %v", n, err)
	}
}

func TestDefaultsAndSignal(t *testing.T) {
	if l, err := net.Listen("tcp", "127.0.0.1:6380"); err != nil {
		t.Skipf("port 6380 is taken on this machine (%v): cannot check the default address", err)
	} else {
		l.Close()
	}
	if l, err := net.Listen("tcp", "127.0.0.1:9380"); err != nil {
		t.Skipf("port 9380 is taken on this machine (%v): cannot check the default address", err)
	} else {
		l.Close()
	}
	p := start(t, "--data-dir", t.TempDir())
	if p.Resp != "127.0.0.1:6380" || p.HTTP != "127.0.0.1:9380" {
		t.Fatalf("defaults: resp %s http %s", p.Resp, p.HTTP)
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.Resp})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	start := time.Now()
	if err := p.stop(); err != nil {
		t.Fatalf("exit after SIGINT: %v", err)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("took %v to stop", time.Since(start))
	}
}

func TestInvalidSettingsStopTheStart(t *testing.T) {
	out, err := exec.Command(binary, "--maxclients", "0", "--log-format", "yaml").CombinedOutput()
	if err == nil {
		t.Fatal("started with invalid settings")
	}
	for _, want := range []string{"--maxclients: must be between 1 and 1000000, got 0", "--log-format: must be text or json, got \"yaml\""} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestSignalWhileOpening sends SIGTERM the moment the node logs its first
// line (Raft started, ports not yet open): the node must drain and exit 0,
// never die by the signal's default action, as a supervisor may stop a pod
// that is still starting.
func TestSignalWhileOpening(t *testing.T) {
	cmd := exec.Command(binary, "--resp-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--raft-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-format", "text")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	sent := false
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if !sent && strings.Contains(sc.Text(), `msg="raft started"`) {
			cmd.Process.Signal(syscall.SIGTERM)
			sent = true
		}
	}
	err = cmd.Wait()
	if !sent {
		t.Fatalf("never saw Raft start (exit %v):\n%s", err, log.String())
	}
	if err != nil || !strings.Contains(log.String(), "msg=stopping signal=terminated") {
		t.Fatalf("SIGTERM while opening: exit %v, want 0 after a logged drain:\n%s", err, log.String())
	}
}
