package limiter

// Charge takes n tokens from every level a call charges, quotas included,
// and never refuses: a cost known once the work is done (Envoy's
// apply_on_stream_done) is counted even past the limit, as debt that later
// calls wait out (engine.MaxDebt bounds it). It answers as RL.PEEK with
// COST 0 would afterwards, admitted.
func (s *Service) Charge(c *Call, n int64, sc *Scratch) (Outcome, error) {
	p, tree, err := s.resolve(c, sc)
	if err != nil {
		return Outcome{}, err
	}
	p.Quotas = s
	return tree.Charge(s.Store, s.Clock(), &p, n, &sc.b)
}
