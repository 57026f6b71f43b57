package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Result is the outcome of one run. Its JSON form (--json) is meant for
// scripts; the field names are stable:
//
//	targets         addresses the connections were spread over
//	connections     -c
//	pipeline        -P
//	mix             the command mix, as --mix reads it
//	distribution    "uniform" or "zipf s=<exponent>"
//	keyspace        -r
//	rate_limit      --rate-limit, 0 when the run was closed-loop
//	requests        replies read (the requests completed)
//	duration_s      seconds from the first write to the last reply
//	throughput_rps  requests / duration_s
//	admitted        RL.ACQUIRE allowed=1 and CL.THROTTLE limited=0 replies
//	denied          RL.ACQUIRE allowed=0 and CL.THROTTLE limited=1 replies
//	degraded        RL.ACQUIRE allowed=2 replies (admitted over a degrade limit)
//	ok              replies that are no limiting decision (+OK of RL.BUDGET SET, INCR's integer)
//	errors          error replies and replies of an unexpected shape
//	error_codes     {"<code>": count} errors by first word (ERR, NOBUDGET, …;
//	                "unexpected" for replies of the wrong shape)
//	error_texts     [{"text", "count"}] distinct error texts, most frequent first
//	latency_us      {"p50", "p90", "p99", "p999", "max", "min", "mean"} in microseconds,
//	                from the write of a request's batch to the read of its reply
//	warnings        setup problems the run went on despite, such as a refused
//	                budget tree import
//	failure         why the run ended early ("" when it did not)
//	interrupted     true when stopped by SIGINT or SIGTERM
type Result struct {
	Targets      []string         `json:"targets"`
	Connections  int              `json:"connections"`
	Pipeline     int              `json:"pipeline"`
	Mix          string           `json:"mix"`
	Distribution string           `json:"distribution"`
	KeySpace     uint64           `json:"keyspace"`
	RateLimit    int64            `json:"rate_limit"`
	Requests     int64            `json:"requests"`
	DurationS    float64          `json:"duration_s"`
	Throughput   float64          `json:"throughput_rps"`
	Admitted     int64            `json:"admitted"`
	Denied       int64            `json:"denied"`
	Degraded     int64            `json:"degraded"`
	OK           int64            `json:"ok"`
	Errors       int64            `json:"errors"`
	ErrorCodes   map[string]int64 `json:"error_codes"`
	ErrorTexts   []ErrorText      `json:"error_texts"`
	Latency      Latency          `json:"latency_us"`
	Warnings     []string         `json:"warnings"`
	Failure      string           `json:"failure"`
	Interrupted  bool             `json:"interrupted"`
}

// ErrorText is one distinct error and how many replies carried it.
type ErrorText struct {
	Text  string `json:"text"`
	Count int64  `json:"count"`
}

func newResult(c *Config) *Result {
	dist := c.Dist
	if dist == "zipf" {
		dist += " s=" + strconv.FormatFloat(c.ZipfS, 'g', -1, 64)
	}
	return &Result{
		Targets: c.Targets, Connections: c.Conns, Pipeline: c.Pipeline,
		Mix: c.Mix.String(), Distribution: dist, KeySpace: c.KeySpace, RateLimit: c.RateLimit,
		ErrorCodes: map[string]int64{}, ErrorTexts: []ErrorText{}, Warnings: []string{},
	}
}

// shownErrors is how many distinct error texts the text report prints.
const shownErrors = 5

// writeText prints res for a person.
func (res *Result) writeText(w io.Writer) {
	fmt.Fprintf(w, "targets       %s (%d connections, pipeline %d)\n", strings.Join(res.Targets, ", "), res.Connections, res.Pipeline)
	load := fmt.Sprintf("%s over %d keys, %s", res.Mix, res.KeySpace, res.Distribution)
	if res.RateLimit > 0 {
		load += fmt.Sprintf(", paced at %d requests/s", res.RateLimit)
	}
	fmt.Fprintf(w, "workload      %s\n", load)
	fmt.Fprintf(w, "throughput    %.2f requests/s (%d requests in %.3f s)\n", res.Throughput, res.Requests, res.DurationS)
	fmt.Fprintf(w, "replies       admitted %d, denied %d, degraded %d, ok %d, errors %d\n",
		res.Admitted, res.Denied, res.Degraded, res.OK, res.Errors)
	l := res.Latency
	fmt.Fprintf(w, "latency (µs)  p50 %d, p90 %d, p99 %d, p99.9 %d, max %d (mean %.1f)\n", l.P50, l.P90, l.P99, l.P999, l.Max, l.Mean)
	if len(res.ErrorCodes) > 0 {
		codes := make([]string, 0, len(res.ErrorCodes))
		for c := range res.ErrorCodes {
			codes = append(codes, c)
		}
		sort.Slice(codes, func(i, j int) bool {
			a, b := res.ErrorCodes[codes[i]], res.ErrorCodes[codes[j]]
			return a > b || a == b && codes[i] < codes[j]
		})
		parts := make([]string, len(codes))
		for i, c := range codes {
			parts[i] = fmt.Sprintf("%s %d", c, res.ErrorCodes[c])
		}
		fmt.Fprintf(w, "error codes   %s\n", strings.Join(parts, ", "))
	}
	if len(res.ErrorTexts) > 0 {
		fmt.Fprintf(w, "error texts   %d distinct, most frequent first:\n", len(res.ErrorTexts))
		for i, e := range res.ErrorTexts {
			if i == shownErrors {
				fmt.Fprintf(w, "  … %d more (see --json)\n", len(res.ErrorTexts)-shownErrors)
				break
			}
			fmt.Fprintf(w, "  %10d  %s\n", e.Count, e.Text)
		}
	}
	for _, s := range res.Warnings {
		fmt.Fprintf(w, "warning       %s\n", s)
	}
	if res.Interrupted {
		fmt.Fprintln(w, "interrupted   the figures cover the run until the signal")
	}
	if res.Failure != "" {
		fmt.Fprintf(w, "failed        %s\n", res.Failure)
	}
}

// writeJSON prints res as indented JSON, one field per line.
func (res *Result) writeJSON(w io.Writer) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
