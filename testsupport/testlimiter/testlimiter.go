// Package testlimiter builds a limiter.Service for tests, on a fixed
// budget tree and without Raft: what the service's own tests and the
// fronts' (envoyrls, httpapi) need to run on a fixed timeline.
package testlimiter

import (
	"errors"
	"testing"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/raftfsm"
)

// cluster is a replica that never changes; writes are refused.
type cluster struct{ st raftfsm.State }

func (c *cluster) State() *raftfsm.State                  { return &c.st }
func (c *cluster) ReadState(bool) (*raftfsm.State, error) { return &c.st, nil }
func (c *cluster) Write(*raftfsm.Entry) (raftfsm.Response, error) {
	return raftfsm.Response{}, errors.New("read-only")
}

// Forward: the one replica leads.
func (c *cluster) Forward([][]byte) ([]byte, error) { return nil, raftfsm.ErrLeaderHere }

// New returns a service on a store of shards shards (0: the default),
// whose budget tree is the export document budgets ("" for none) and whose
// clock is now.
func New(t testing.TB, budgets string, shards int, now func() int64) *limiter.Service {
	t.Helper()
	tree := budget.Empty
	if budgets != "" {
		cfgs, err := budget.ParseExport([]byte(budgets))
		if err != nil {
			t.Fatal(err)
		}
		ch, err := budget.Empty.Import(cfgs, true, 1)
		if err != nil {
			t.Fatal(err)
		}
		tree = ch.Tree
	}
	return &limiter.Service{Store: engine.New(engine.Options{Shards: shards}), Cluster: &cluster{raftfsm.State{Tree: tree}},
		Clock: now, Shutdown: make(chan struct{})}
}
