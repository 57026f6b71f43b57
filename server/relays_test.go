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
	"github.com/sluice-rl/sluice/testsupport/testkit"
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

// The data commands of a key run on its owner whichever node is asked:
// three clients on three nodes share one counter exactly, a hash read
// through another node is the owner's (a map in RESP3), and keys of one
// command that live apart are refused unless one {hash tag} places them.
func TestDataCommandsRunWhereTheirKeyLives(t *testing.T) {
	sc := &slotCluster{t: t, nodes: map[string]*Node{}, dirs: map[string]string{}, held: map[string]map[string]bool{}}
	ids := []string{"d1", "d2", "d3"}
	for _, id := range ids {
		sc.start(id, "", "")
	}
	sc.members(3)
	var cs []*resptest.Client
	for _, id := range ids {
		cs = append(cs, resptest.Dial(t, sc.nodes[id].Server.RespAddr()))
	}
	// Until every node ranks the members, a key may still be decided at
	// an older view: wait for the owners to agree.
	testkit.WaitFor(t, 30*time.Second, "every node to place keys alike", func() bool {
		first, _ := sc.nodes["d1"].Server.svc.DataOwner([]byte("hits"))
		for _, id := range ids[1:] {
			if o, _ := sc.nodes[id].Server.svc.DataOwner([]byte("hits")); o != first || o == "" {
				return false
			}
		}
		return true
	})
	for i := range 300 {
		if got := cs[i%3].Do("INCR", "hits"); got != fmt.Sprint(i+1) {
			t.Fatalf("INCR %d through %s: %s", i+1, ids[i%3], got)
		}
	}
	owner, _ := sc.nodes["d1"].Server.svc.DataOwner([]byte("hits"))
	for _, id := range ids {
		n := sc.nodes[id].Server.svc.Keys.Len()
		if (id == owner) != (n == 1) {
			t.Errorf("%s holds %d keys; the owner of hits is %s", id, n, owner)
		}
	}
	// A missing key answers nil through every node (a relayed null).
	for i, c := range cs {
		if got := c.Do("GET", "nosuch"); got != "nil" {
			t.Fatalf("GET of a missing key through %s: %s", ids[i], got)
		}
	}
	if got := cs[1].Do("EXPIRE", "hits", "100"); got != "1" {
		t.Fatalf("EXPIRE through d2: %s", got)
	}
	if got := cs[2].Do("TTL", "hits"); got != "100" {
		t.Fatalf("TTL through d3: %s", got)
	}
	if got := cs[0].Do("TYPE", "hits"); got != "+string" {
		t.Fatalf("TYPE through d1: %s", got)
	}
	cs[0].Do("HSET", "bucket", "tokens", "7", "ts", "1")
	cs[1].Do("HELLO", "3")
	if got := cs[1].Do("HGETALL", "bucket"); got != `{"tokens" "7" "ts" "1"}` && got != `map[tokens:7 ts:1]` {
		t.Errorf("HGETALL through d2 in RESP3: %s", got)
	}
	// Two keys on different owners are refused; one tag places them.
	var a, b string
	for i := 0; a == "" || b == ""; i++ {
		k := fmt.Sprint("k", i)
		if o, _ := sc.nodes["d1"].Server.svc.DataOwner([]byte(k)); a == "" {
			a = k
		} else if ao, _ := sc.nodes["d1"].Server.svc.DataOwner([]byte(a)); o != ao {
			b = k
		}
	}
	if got := cs[0].Do("EXISTS", a, b); !strings.HasPrefix(got, "-ERR the keys of this command live on different nodes") {
		t.Errorf("EXISTS of keys apart: %s", got)
	}
	cs[0].Do("SET", "{user:1}:a", "1")
	cs[1].Do("SET", "{user:1}:b", "1")
	if got := cs[2].Do("EXISTS", "{user:1}:a", "{user:1}:b"); got != "2" {
		t.Errorf("EXISTS of two keys of one tag: %s", got)
	}
}
