package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// settle is the pause between scenarios on one cluster, so that the
// previous scenario's sync and quota messages are out of the way.
const settle = 500 * time.Millisecond

// execute runs every scenario of cfg on a fresh cluster per sync interval
// and returns the report, complete as far as it got.
func execute(ctx context.Context, cfg *Config, progress io.Writer) (*report, error) {
	rep := &report{cfg: cfg, loadStart: loadAvg()}
	defer func() { rep.loadEnd = loadAvg() }()
	dir := cfg.LogDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "sluice-accuracy")
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return rep, fmt.Errorf("--log-dir: %w", err)
	}
	bin := cfg.Binary
	if bin == "" {
		fmt.Fprintln(progress, "accuracy: building sluice")
		var err error
		if bin, err = buildSluice(ctx, dir, progress); err != nil {
			return rep, err
		}
	}
	for _, sync := range cfg.Syncs {
		if err := runSync(ctx, cfg, bin, sync, dir, rep, progress); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// runSync starts a cluster with one sync interval and runs every scenario
// on it.
func runSync(ctx context.Context, cfg *Config, bin string, sync time.Duration, dir string, rep *report, progress io.Writer) error {
	fmt.Fprintf(progress, "accuracy: starting %d nodes with --sync-interval %v\n", cfg.Nodes, sync)
	c, err := startCluster(ctx, bin, cfg.Nodes, sync, fmt.Sprintf("%s/sync-%v", dir, sync))
	if err != nil {
		return err
	}
	defer c.stop()
	for i, sc := range cfg.Scenarios {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(settle):
			}
		}
		fmt.Fprintf(progress, "accuracy: %s, sync %v, %v\n", sc.name, sync, cfg.Duration)
		row, err := runScenario(ctx, cfg, c, sc, sync)
		if err != nil {
			return fmt.Errorf("scenario %s, --sync-interval %v: %w", sc.name, sync, err)
		}
		rep.rows = append(rep.rows, row)
	}
	return nil
}

// runScenario sets up, drives and judges one scenario on c.
func runScenario(ctx context.Context, cfg *Config, c *cluster, sc *scenario, sync time.Duration) (row, error) {
	key := "acc:" + sc.name + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
	sim, burst, err := sc.newSimulator(cfg.Rate, key)
	if err != nil {
		return row{}, err
	}
	if err := setup(ctx, c, sc.setup(cfg.Rate)); err != nil {
		return row{}, err
	}
	res, err := runLoad(ctx, loadSpec{
		addrs: c.addrs(), conns: cfg.Conns, pattern: sc.pattern,
		perSec: sc.load * float64(cfg.Rate), duration: cfg.Duration,
		command: sc.command(cfg.Rate, key),
	})
	if err != nil {
		return row{}, err
	}
	r := row{scenario: sc.name, sync: sync, duration: cfg.Duration, calls: int64(len(res.calls)),
		burst: burst, errors: res.errors, errMsg: res.errMsg, load1: strings.Fields(loadAvg())[0]}
	for _, cl := range res.calls {
		if cl.ok {
			r.admitted++
		}
	}
	r.ideal = idealAdmitted(sim, res.start.UnixNano(), res.calls)
	r.verdict = judge(r.admitted, r.ideal, r.burst)
	return r, nil
}

// setup sends the scenario's setup commands through the first node and
// waits until every node has applied them (RL.BUDGET GET reports the same
// version everywhere).
func setup(ctx context.Context, c *cluster, cmds [][]string) error {
	if len(cmds) == 0 {
		return nil
	}
	first, err := dial(c.nodes[0].resp, cmdTimeout)
	if err != nil {
		return err
	}
	defer first.Close()
	var paths []string
	for _, cmd := range cmds {
		if _, err := first.do(cmdTimeout, cmd...); err != nil {
			return fmt.Errorf("%v: %w", cmd, err)
		}
		paths = append(paths, cmd[2])
	}
	want, err := budgetVersion(first, paths[len(paths)-1])
	if err != nil {
		return err
	}
	for _, nd := range c.nodes[1:] {
		if err := waitVersion(ctx, nd, paths[len(paths)-1], want); err != nil {
			return err
		}
	}
	return nil
}

// budgetVersion returns the version RL.BUDGET GET reports for path.
func budgetVersion(c *conn, path string) (uint64, error) {
	v, err := c.do(cmdTimeout, "RL.BUDGET", "GET", path)
	if err != nil {
		return 0, fmt.Errorf("RL.BUDGET GET %s: %w", path, err)
	}
	var doc struct {
		Version uint64 `json:"version"`
	}
	if err := json.Unmarshal([]byte(v.str), &doc); err != nil || doc.Version == 0 {
		return 0, fmt.Errorf("RL.BUDGET GET %s: no version in %s", path, v)
	}
	return doc.Version, nil
}

// waitVersion waits until nd reports path at version want or later.
func waitVersion(ctx context.Context, nd *node, path string, want uint64) error {
	deadline := time.Now().Add(cmdTimeout)
	for {
		if c, err := dial(nd.resp, time.Second); err == nil {
			got, err := budgetVersion(c, path)
			c.Close()
			if err == nil && got >= want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s did not apply %s version %d within %v", nd.id, path, want, cmdTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
