package commands

import (
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// bucketOf puts every duration where Prometheus' own histogram with the
// same bounds puts it, at the bounds and between them.
func TestBucketOfMatchesPrometheus(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: prometheus.ExponentialBuckets(1e-6, 4, durBuckets)})
	var mine cmdStat
	var ns []int64
	for i, b := int64(0), int64(1000); i < durBuckets; i, b = i+1, b*4 {
		ns = append(ns, b-1, b, b+1)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 10000; i++ {
		ns = append(ns, r.Int64N(3e9))
	}
	ns = append(ns, 0, 1, 5e9)
	for _, d := range ns {
		h.Observe(float64(d) / 1e9)
		mine.add(d)
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	var got cmdTotal
	mine.fold(&got)
	var cum uint64
	for i, b := range m.Histogram.Bucket {
		cum += got.buckets[i]
		if b.GetCumulativeCount() != cum {
			t.Errorf("bucket le=%g: Prometheus %d, folded %d", b.GetUpperBound(), b.GetCumulativeCount(), cum)
		}
	}
	if got.count() != m.Histogram.GetSampleCount() {
		t.Errorf("count %d, Prometheus %d", got.count(), m.Histogram.GetSampleCount())
	}
}
