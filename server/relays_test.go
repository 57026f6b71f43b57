package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/testsupport/resptest"
)

// httpReserve posts body to /v1/reserve on node id, retrying LOADING and
// TRYAGAIN (503); it returns whether a reservation was granted, and its id.
func (sc *slotCluster) httpReserve(id, body string) (bool, string) {
	sc.t.Helper()
	for try := 0; ; try++ {
		code, out := postJSON(sc.t, sc.nodes[id].Server.HTTPAddr(), "/v1/reserve", body)
		switch {
		case code == http.StatusServiceUnavailable && try < 100:
			time.Sleep(50 * time.Millisecond)
		case code == http.StatusOK && out["allowed"] == float64(1):
			rid, _ := out["id"].(string)
			return true, rid
		case code == http.StatusTooManyRequests:
			return false, ""
		default:
			sc.t.Fatalf("/v1/reserve %s on %s: %d %v", body, id, code, out)
		}
	}
}

func postJSON(t *testing.T, addr, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return resp.StatusCode, out
}

// Over HTTP as over RESP, a reservation runs where its key's concurrency
// slots are decided, whichever node is asked (limiter.Service.Reservation
// relays it, peer.Relays encodes it as RL.RESERVE): 12 keys filled to
// CONCURRENCY 2 through the three nodes' HTTP fronts and RESP, then a
// third slot of every key asked of every node's HTTP front is refused;
// each reservation settles through another node's HTTP front, and the
// slots are free again.
func TestConcurrencyOverHTTPHoldsAcrossNodes(t *testing.T) {
	sc := &slotCluster{t: t, nodes: map[string]*Node{}, dirs: map[string]string{}, held: map[string]map[string]bool{}}
	ids := []string{"h1", "h2", "h3"}
	for _, id := range ids {
		sc.start(id, "", "")
	}
	sc.members(3)
	body := func(k string) string {
		return fmt.Sprintf(`{"key":%q,"concurrency":2,"cost":1,"ttl_ms":600000}`, k)
	}
	keys := slotKeys()[:12]
	granted := map[string][]string{}
	for i, k := range keys {
		// One slot over RESP, one over HTTP on the next node.
		if !sc.reserve(ids[i%3], k) {
			t.Fatalf("%s: RL.RESERVE refused on an empty key", k)
		}
		ok, rid := sc.httpReserve(ids[(i+1)%3], body(k))
		if !ok {
			t.Fatalf("%s: the second slot refused over HTTP on %s", k, ids[(i+1)%3])
		}
		granted[k] = append(granted[k], rid)
	}
	for _, k := range keys {
		for _, id := range ids {
			if ok, rid := sc.httpReserve(id, body(k)); ok {
				t.Errorf("%s granted a third slot of %s over HTTP (%s)", id, k, rid)
			}
		}
	}
	// A relayed reservation is decided with the caller's own limits: the
	// one it charged on the key's owner is the bucket the same limits
	// name there over RESP.
	const k = "rt:1"
	owner := sc.nodes["h1"].Server.svc.Store.Ranking(engine.SpaceInline, []byte(k), nil)[0]
	other := ids[0]
	if other == owner {
		other = ids[1]
	}
	code, out := postJSON(t, sc.nodes[other].Server.HTTPAddr(), "/v1/reserve",
		`{"key":"rt:1","rate":10,"per":"1h30m","burst":20,"algo":"gcra","concurrency":2,"cost":3,"ttl_ms":600000}`)
	if code != http.StatusOK || out["remaining"] != float64(17) {
		t.Fatalf("/v1/reserve with limits on %s (owner %s): %d %v", other, owner, code, out)
	}
	c := resptest.Dial(t, sc.nodes[owner].Server.RespAddr())
	if got := c.Do("RL.RESERVE", k, "RATE", "10", "PER", "90m", "BURST", "20", "ALGO", "gcra", "CONCURRENCY", "2", "COST", "3", "TTL", "600000"); !strings.HasPrefix(got, "[1 14 20 ") {
		t.Fatalf("RL.RESERVE with the same limits on the owner %s: %s (want 14 left of the one bucket)", owner, got)
	}

	for i, k := range keys {
		rid := granted[k][0]
		code, out := postJSON(t, sc.nodes[ids[(i+2)%3]].Server.HTTPAddr(), "/v1/settle", fmt.Sprintf(`{"id":%q,"actual":1}`, rid))
		if code != http.StatusOK || out["allowed"] != float64(1) {
			t.Fatalf("/v1/settle %s on %s: %d %v", rid, ids[(i+2)%3], code, out)
		}
		// The settled slot is free again, from any node.
		if ok, _ := sc.httpReserve(ids[(i+2)%3], body(k)); !ok {
			t.Errorf("%s: no slot after one of two was settled", k)
		}
	}
}
