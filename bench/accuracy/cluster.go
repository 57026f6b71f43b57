package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// buildSluice builds cmd/sluice into dir and returns the binary's path. It
// runs go build in the module that holds this package, so it works from
// any directory of the checkout.
func buildSluice(ctx context.Context, dir string, stderr io.Writer) (string, error) {
	bin := filepath.Join(dir, "sluice")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/sluice-rl/sluice/cmd/sluice")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building sluice (go build ./cmd/sluice): %w", err)
	}
	return bin, nil
}

// node is one running sluice process.
type node struct {
	id, resp, raft string
	cmd            *exec.Cmd
	logPath        string
	exited         chan error
}

// cluster is N nodes on loopback, started with the same --bootstrap-peers.
type cluster struct {
	nodes []*node
}

// Timeouts of the cluster's life.
const (
	startTimeout  = 30 * time.Second // until every node listens
	leaderTimeout = 30 * time.Second // until every node names the same leader
	stopTimeout   = 15 * time.Second // after SIGTERM, before SIGKILL
	cmdTimeout    = 10 * time.Second // one setup command or reply
	startAttempts = 3                // fresh ports each time
)

// startCluster starts n nodes of bin with --sync-interval sync, each with
// a data directory and a log file under dir, and waits until they agree
// on a leader. A start that fails (a port taken meanwhile) is tried again
// on other ports.
func startCluster(ctx context.Context, bin string, n int, sync time.Duration, dir string) (*cluster, error) {
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var c *cluster
		c, err = tryStart(ctx, bin, n, sync, filepath.Join(dir, fmt.Sprintf("attempt%d", attempt)))
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, err
}

func tryStart(ctx context.Context, bin string, n int, sync time.Duration, dir string) (*cluster, error) {
	c := &cluster{}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := 0; i < n; i++ {
		nd := &node{id: fmt.Sprintf("n%d", i+1), resp: ports[2*i], raft: ports[2*i+1], exited: make(chan error, 1)}
		c.nodes = append(c.nodes, nd)
		peers = append(peers, nd.id+"="+nd.raft+"="+nd.resp)
	}
	for _, nd := range c.nodes {
		if err := nd.start(bin, strings.Join(peers, ","), sync, dir); err != nil {
			c.stop()
			return nil, err
		}
	}
	for _, nd := range c.nodes {
		if err := nd.waitListening(ctx); err != nil {
			c.stop()
			return nil, err
		}
	}
	if err := c.waitLeader(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// freePorts returns n distinct loopback addresses whose ports were free a
// moment ago, below Linux's ephemeral range (32768+) as the e2e tests
// choose them, so that sockets the OS numbers meanwhile do not take them.
func freePorts(n int) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("no free loopback ports between 20000 and 32000")
		}
		a := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if seen[a] {
			continue
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			continue
		}
		l.Close()
		seen[a] = true
		out = append(out, a)
	}
	return out, nil
}

// start runs the node's process, its stderr going to its log file.
func (nd *node) start(bin, peers string, sync time.Duration, dir string) error {
	data := filepath.Join(dir, nd.id)
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	nd.logPath = filepath.Join(dir, nd.id+".log")
	logf, err := os.Create(nd.logPath)
	if err != nil {
		return err
	}
	nd.cmd = exec.Command(bin, "--node-id", nd.id, "--resp-addr", nd.resp, "--raft-addr", nd.raft,
		"--http-addr", "", "--data-dir", data, "--bootstrap-peers", peers,
		"--sync-interval", sync.String(), "--log-format", "text")
	nd.cmd.Stdout, nd.cmd.Stderr = logf, logf
	nd.cmd.SysProcAttr = childAttr()
	if err := nd.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		nd.exited <- nd.cmd.Wait()
		logf.Close()
	}()
	return nil
}

// waitListening waits until the node answers PING.
func (nd *node) waitListening(ctx context.Context) error {
	deadline := time.Now().Add(startTimeout)
	for {
		if c, err := dial(nd.resp, time.Second); err == nil {
			_, err = c.do(cmdTimeout, "PING")
			c.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case err := <-nd.exited:
			nd.exited <- err
			return fmt.Errorf("node %s exited before listening (%v); its log: %s\n%s", nd.id, err, nd.logPath, nd.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s did not answer PING on %s within %v; its log: %s", nd.id, nd.resp, startTimeout, nd.logPath)
		}
	}
}

// tail returns the last lines of the node's log.
func (nd *node) tail() string {
	f, err := os.Open(nd.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 20 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// info returns the node's RL.CLUSTER INFO, or nil.
func (nd *node) info() map[string]string {
	c, err := dial(nd.resp, time.Second)
	if err != nil {
		return nil
	}
	defer c.Close()
	v, err := c.do(cmdTimeout, "RL.CLUSTER", "INFO")
	if err != nil {
		return nil
	}
	return v.pairs()
}

// waitLeader waits until every node names the same leader and counts
// every node as a member.
func (c *cluster) waitLeader(ctx context.Context) error {
	deadline := time.Now().Add(leaderTimeout)
	members := fmt.Sprint(len(c.nodes))
	for {
		leader, agreed := "", true
		for _, nd := range c.nodes {
			inf := nd.info()
			if inf == nil || inf["leader_id"] == "" || (leader != "" && inf["leader_id"] != leader) || inf["members"] != members {
				agreed = false
				break
			}
			leader = inf["leader_id"]
		}
		if agreed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the %d nodes did not agree on a leader within %v; logs in %s", len(c.nodes), leaderTimeout, filepath.Dir(c.nodes[0].logPath))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// addrs returns the nodes' RESP addresses.
func (c *cluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.resp
	}
	return out
}

// stop sends SIGTERM to every node, waits for them, and kills any that is
// still running after stopTimeout.
func (c *cluster) stop() {
	for _, nd := range c.nodes {
		if nd.cmd != nil && nd.cmd.Process != nil {
			nd.cmd.Process.Signal(os.Interrupt)
		}
	}
	for _, nd := range c.nodes {
		if nd.cmd == nil || nd.cmd.Process == nil {
			continue
		}
		select {
		case err := <-nd.exited:
			nd.exited <- err
		case <-time.After(stopTimeout):
			nd.cmd.Process.Kill()
			nd.exited <- <-nd.exited
		}
	}
}
