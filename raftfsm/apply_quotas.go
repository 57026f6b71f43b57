package raftfsm

// Quota entries change the committed quota counters in place (quota.go)
// and tell the quota observer; they publish no new State.
func init() {
	registerCommand(QuotaAdd, (*Entry).asQuotaCounts, (*FSM).applyQuotaCounts)
	registerCommand(QuotaReserve, (*Entry).asQuotaReservation, (*FSM).applyQuotaReservation)
	registerCommand(QuotaReset, (*Entry).asQuotaResets, (*FSM).applyQuotaResets)
	registerCommand(QuotaSet, (*Entry).asQuotaSets, (*FSM).applyQuotaSets)
	registerCommand(QuotaReturn, (*Entry).asQuotaReturn, (*FSM).applyQuotaReturn)
}

// quotaCounts is QuotaAdd's payload: a node's batch of quota counts
// (negative: refunds). Origin and Seq number the batch, so that a batch
// retried after an uncertain outcome is counted once; Now is the
// proposer's clock, by which ended periods are purged.
type quotaCounts struct {
	Origin string
	Seq    uint64
	Now    int64
	Items  []QuotaItem
}

func (e *Entry) asQuotaCounts() (quotaCounts, error) {
	for _, q := range e.Quotas {
		if q.Key == "" || q.End <= q.Start || q.Used > maxQuotaUsed || q.Used < -maxQuotaUsed {
			return quotaCounts{}, badPayload("malformed quota item")
		}
	}
	return quotaCounts{Origin: e.Origin, Seq: e.Seq, Now: e.Now, Items: e.Quotas}, nil
}

func (f *FSM) applyQuotaCounts(p quotaCounts, _ uint64) Response {
	if p.Origin != "" && p.Seq <= f.quotas.LastSeq(p.Origin) {
		return Response{} // a retried batch, counted already
	}
	for _, q := range p.Items {
		f.quotas.add(q)
	}
	if p.Origin != "" {
		f.quotas.setSeq(p.Origin, p.Seq) // after the counts: see QuotaSeq
	}
	f.quotas.purgeSome(p.Now)
	if o := f.quotaObs.Load(); o != nil {
		(*o).QuotaAdded(p.Origin, p.Seq, p.Items)
	}
	return Response{N: len(p.Items)}
}

// quotaReservation is QuotaReserve's payload: units a node (Origin, its
// id and incarnation) asks to admit against (an item's Used), or gives
// back (Used negative).
type quotaReservation struct {
	Origin string
	Items  []QuotaItem
}

func (e *Entry) asQuotaReservation() (quotaReservation, error) {
	if e.Origin == "" || len(e.Quotas) == 0 {
		return quotaReservation{}, badPayload("reservation without origin or items")
	}
	for _, q := range e.Quotas {
		if q.Key == "" || q.End <= q.Start || q.Limit <= 0 || q.Used == 0 || q.Used > maxQuotaUsed || q.Used < -maxQuotaUsed || q.Need < 0 || q.Need > maxQuotaUsed {
			return quotaReservation{}, badPayload("malformed quota reservation")
		}
	}
	return quotaReservation{Origin: e.Origin, Items: e.Quotas}, nil
}

func (f *FSM) applyQuotaReservation(p quotaReservation, _ uint64) Response {
	members := max(len(f.state.Load().Members), 1)
	grants := make([]int64, len(p.Items))
	for i, q := range p.Items {
		grants[i] = f.quotas.reserve(p.Origin, q, members)
	}
	if o := f.quotaObs.Load(); o != nil {
		(*o).QuotaReserved(p.Origin, p.Items, grants)
	}
	return Response{N: len(p.Items)}
}

// quotaResets is QuotaReset's payload: counters to forget, and when the
// proposer made the reset.
type quotaResets struct {
	Keys []QuotaKey
	Now  int64
}

func (e *Entry) asQuotaResets() (quotaResets, error) {
	if len(e.Keys) == 0 {
		return quotaResets{}, badPayload("quota reset without keys")
	}
	return quotaResets{Keys: e.Keys, Now: e.Now}, nil
}

func (f *FSM) applyQuotaResets(p quotaResets, _ uint64) Response {
	n := 0
	for _, k := range p.Keys {
		if f.quotas.reset(string(k)) {
			n++
		}
	}
	if o := f.quotaObs.Load(); o != nil {
		(*o).QuotaReset(p.Keys, p.Now)
	}
	return Response{N: n}
}

// quotaSets is QuotaSet's payload: counters and the count each has in its
// period from now on, and when the proposer set them.
type quotaSets struct {
	Items []QuotaItem
	Now   int64
}

func (e *Entry) asQuotaSets() (quotaSets, error) {
	if len(e.Quotas) == 0 {
		return quotaSets{}, badPayload("quota set without items")
	}
	for _, q := range e.Quotas {
		if q.Key == "" || q.End <= q.Start || q.Used < 0 || q.Used > maxQuotaUsed || q.Period == "" {
			return quotaSets{}, badPayload("malformed quota item")
		}
	}
	return quotaSets{Items: e.Quotas, Now: e.Now}, nil
}

// applyQuotaSets replaces each counter with one that has counted Used in
// the item's period, and tells the observer as a reset of those counters,
// so that every node drops its pending count and the units it was granted
// (a set is a reset to a count other than 0).
func (f *FSM) applyQuotaSets(p quotaSets, _ uint64) Response {
	keys := make([]QuotaKey, 0, len(p.Items))
	for _, q := range p.Items {
		f.quotas.reset(string(q.Key))
		f.quotas.add(q)
		keys = append(keys, q.Key)
	}
	if o := f.quotaObs.Load(); o != nil {
		(*o).QuotaReset(keys, p.Now)
	}
	return Response{N: len(p.Items)}
}

// quotaReturn is QuotaReturn's payload: a node life that is over (Origin,
// "id@incarnation"), and for each counter it may have spent from, the
// most it may have spent there this period (an item's Used: the spend
// mark it wrote to disk before admitting). With All, the life's grants of
// every other counter go back whole.
type quotaReturn struct {
	Origin string
	Items  []QuotaItem
	All    bool
}

func (e *Entry) asQuotaReturn() (quotaReturn, error) {
	if e.Origin == "" || len(e.Quotas) == 0 && !e.Replace {
		return quotaReturn{}, badPayload("quota return without origin or items")
	}
	for _, q := range e.Quotas {
		if q.Key == "" || q.Used < 0 || q.Used > maxQuotaUsed {
			return quotaReturn{}, badPayload("malformed quota return")
		}
	}
	return quotaReturn{Origin: e.Origin, Items: e.Quotas, All: e.Replace}, nil
}

// applyQuotaReturn gives back to the pool the units a life that is over
// held and cannot have spent (quotaTable.returnGrants); N is the units.
func (f *FSM) applyQuotaReturn(p quotaReturn, _ uint64) Response {
	return Response{N: int(f.quotas.returnGrants(p.Origin, p.Items, p.All))}
}
