package main

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in whole microseconds from 1µs to 60s with three
// significant figures: a value is off by at most 0.1%, and one histogram
// takes about 140 KB whatever the number of requests.
const (
	histLowest  = 1
	histHighest = 60_000_000
	histSigFigs = 3
)

func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(histLowest, histHighest, histSigFigs)
}

// record adds one latency, clamped into the histogram's range so that no
// sample is silently dropped: below 1µs counts as 1µs, above 60s as 60s.
func record(h *hdrhistogram.Histogram, d time.Duration) {
	us := (d.Nanoseconds() + 500) / 1000
	if us < histLowest {
		us = histLowest
	} else if us > histHighest {
		us = histHighest
	}
	_ = h.RecordValue(us) // in range by construction
}

// Latency is the summary of a histogram, in microseconds.
type Latency struct {
	P50  int64   `json:"p50"`
	P90  int64   `json:"p90"`
	P99  int64   `json:"p99"`
	P999 int64   `json:"p999"`
	Max  int64   `json:"max"`
	Min  int64   `json:"min"`
	Mean float64 `json:"mean"`
}

// summarize reads the percentiles of h; an empty histogram gives zeros
// (its mean would be NaN, which JSON cannot carry).
func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		P50:  h.ValueAtQuantile(50),
		P90:  h.ValueAtQuantile(90),
		P99:  h.ValueAtQuantile(99),
		P999: h.ValueAtQuantile(99.9),
		Max:  h.Max(),
		Min:  h.Min(),
		Mean: h.Mean(),
	}
}
