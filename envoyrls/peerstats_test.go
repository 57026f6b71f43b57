package envoyrls

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// From test/redis/fixed_cache_impl_test.go TestNearLimit (NEAR_LIMIT_RATIO
// 0.8): each step's counts around the request and the stats after it.
func TestPeerStatsCount(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	m.EnablePeerStats(0.8)
	steps := []struct {
		key                        string
		limit, hits, before, after int64
		total, over, near, within  uint64
	}{
		{"domain.key4_value4", 15, 1, 10, 11, 1, 0, 0, 1},
		{"domain.key4_value4", 15, 1, 12, 13, 2, 0, 1, 2},
		{"domain.key4_value4", 15, 1, 15, 16, 3, 1, 1, 2},
		{"domain.key5_value5", 20, 3, 2, 5, 3, 0, 0, 3},
		{"domain.key6_value6", 8, 2, 5, 7, 2, 0, 1, 2},
		{"domain.key7_value7", 20, 3, 16, 19, 3, 0, 3, 3},
		{"domain.key8_value8", 20, 3, 19, 22, 3, 2, 1, 0},
		{"domain.key9_value9", 20, 7, 15, 22, 7, 2, 4, 0},
		{"domain.key10_value10", 10, 3, 27, 30, 3, 3, 0, 0},
	}
	p := m.peer
	for i, s := range steps {
		p.count(s.key, s.limit, s.hits, s.before, s.after, false)
		l := peerLabels(s.key)
		got := [4]uint64{}
		for j, v := range []*prometheus.CounterVec{p.totalHits, p.overLimit, p.nearLimit, p.within} {
			got[j] = uint64(testutil.ToFloat64(v.WithLabelValues(l[:]...)))
		}
		if want := [4]uint64{s.total, s.over, s.near, s.within}; got != want {
			t.Fatalf("step %d %s: total, over, near, within %v; want %v", i, s.key, got, want)
		}
	}
	if l := peerLabels("d.k_v.sub_x.deeper"); l != [3]string{"d", "k_v", "sub_x"} {
		t.Fatalf("labels %q", l)
	}
}
