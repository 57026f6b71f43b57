package quota

import (
	"testing"

	"github.com/sluice-rl/sluice/engine"
)

const t0 = int64(1_790_000_000) * 1e9

// The syncer's decisions that no cluster test reaches on purpose.
func TestQuotaSyncerResetsAndSnapshotSettling(t *testing.T) {
	st := engine.New(engine.Options{Shards: 2})
	q := &Syncer{Store: st, started: t0}
	lim, _ := engine.NewQuotaLimit(10, 1)
	count := func(key string, n int64) {
		st.Acquire(t0, engine.Request{Space: engine.SpaceQuota, Key: []byte(key), Limit: &lim, Cost: n, PeriodStart: t0, PeriodEnd: t0 + 1e12}, 0, false)
	}
	count("a", 3)
	// A reset made before this process started is a replay: it must not
	// wipe counts made since.
	q.QuotaReset([]Key{"a"}, t0-1)
	if st.QuotaCount([]byte("a"), t0) != 3 {
		t.Fatal("a replayed reset dropped new counts")
	}
	q.QuotaReset([]Key{"a"}, t0)
	if st.QuotaCount([]byte("a"), t0) != 0 {
		t.Fatal("a new reset left the counts")
	}
	// A batch applied through a snapshot (the observer never hears of it)
	// is settled once the replica's last batch number reaches it.
	count("b", 4)
	q.inflight = &inflight{Batch: Batch{Seq: 7, Quotas: []Item{{Key: "b", Start: t0, End: t0 + 1e12, Used: 4}}}, done: make(chan struct{})}
	q.settleApplied(6)
	if st.QuotaCount([]byte("b"), t0) != 4 {
		t.Fatal("settled before it was applied")
	}
	q.settleApplied(7)
	q.settleApplied(8)
	if st.QuotaCount([]byte("b"), t0) != 0 || !q.inflight.settled {
		t.Fatalf("after the snapshot: %d left", st.QuotaCount([]byte("b"), t0))
	}
	// The observer hearing of it afterwards changes nothing.
	q.QuotaAdded("", 7, q.inflight.Quotas)
	if st.QuotaCount([]byte("b"), t0) != 0 {
		t.Fatal("settled twice")
	}
}
