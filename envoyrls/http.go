package envoyrls

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a POST /json body.
const maxJSONBody = 1 << 20

// JSONHandler serves envoyproxy/ratelimit's POST /json: a
// RateLimitRequest in protobuf's JSON form, answered with the
// RateLimitResponse in the same form; 429 when over the limit, 400 (with
// no body but the status text) for a request that does not parse or that
// the service refuses, as the peer answers.
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
		var req rlsv3.RateLimitRequest
		if err == nil && len(body) > maxJSONBody {
			err = fmt.Errorf("body over %d bytes", maxJSONBody)
		}
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		var resp *rlsv3.RateLimitResponse
		if err == nil {
			resp, err = s.answer(&req)
		}
		if err != nil {
			http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// Dump writes the loaded rules as envoyproxy/ratelimit's /rlconfig does,
// one line per rule with a limit ("domain.key_value.key: unit=MINUTE
// requests_per_unit=20, shadow_mode: false, quota_mode: false"), sorted.
func (c *Config) Dump() string {
	if c == nil {
		return ""
	}
	var lines []string
	for _, d := range c.domains {
		lines = d.rules.dump(lines)
	}
	sort.Strings(lines)
	return strings.Join(lines, "")
}

func (set ruleSet) dump(lines []string) []string {
	for _, kr := range set {
		rules := append([]*Rule(nil), kr.patterns...)
		for _, r := range kr.exact {
			rules = append(rules, r)
		}
		if kr.any != nil {
			rules = append(rules, kr.any)
		}
		for _, r := range rules {
			if l := r.Limit; l != nil {
				lines = append(lines, fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
					r.metric, l.Unit, l.RequestsPerUnit, r.ShadowMode, r.QuotaMode))
			}
			lines = r.children.dump(lines)
		}
	}
	return lines
}
