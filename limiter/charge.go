package limiter

import (
	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/engine"
)

// Charge takes n tokens from every level a call charges, quotas included,
// and never refuses: a cost known once the work is done (Envoy's
// apply_on_stream_done) is counted even past the limit, as debt that later
// calls wait out (engine.MaxDebt bounds it). It answers as RL.PEEK with
// COST 0 would afterwards, admitted.
func (s *Service) Charge(c *Call, n int64, sc *Scratch) (Outcome, error) {
	return s.onLevels(c, n, sc, (*budget.Tree).Charge)
}

// onLevels runs op (a refund or a forced charge of n) on every level c
// charges, quotas included.
func (s *Service) onLevels(c *Call, n int64, sc *Scratch, op func(*budget.Tree, *engine.Store, int64, *budget.Call, int64, *budget.Scratch) (Outcome, error)) (Outcome, error) {
	if err := s.loaded(); err != nil {
		return Outcome{}, err
	}
	p, tree, err := s.resolve(c, sc)
	if err != nil {
		return Outcome{}, err
	}
	p.Quotas = s
	return op(tree, s.Store, s.Clock(), &p, n, &sc.b)
}
