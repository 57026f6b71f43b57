package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// An IMPORT above the documented bound is refused with an error naming it,
// and changes nothing.
func TestOversizedImportIsRefused(t *testing.T) {
	n := startTestNode(t, testNode{Config: func(c *Config) { c.MaxBulkLen = 64 << 20 }})
	c := resptest.Dial(t, n.Server.RespAddr())
	var b strings.Builder
	b.WriteString(`{"budgets":{`)
	for i := 0; b.Len() < 9<<20; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"big/n` + strings.Repeat("x", 200) + strconv.Itoa(i) + `":{}`)
	}
	b.WriteString(`}}`)
	got := c.Do("RL.BUDGET", "IMPORT", b.String())
	if !strings.Contains(got, "at most 8388608") || !strings.HasPrefix(got, "-ERR IMPORT json is") {
		t.Fatalf("oversized IMPORT: %.200s", got)
	}
	if got := c.Do("RL.BUDGET", "LIST"); got != "[]" {
		t.Fatalf("after a refused IMPORT: %.200s", got)
	}
}
