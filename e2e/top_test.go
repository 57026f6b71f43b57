package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// topKeys reads RL.TOP's reply (RESP2 flat pairs) into its fields.
type topReply struct {
	total, bound, nodes int64
	unreachable         []string
	keys                []topKey
}

type topKey struct {
	key          string
	count, error int64
}

func rlTop(t *testing.T, c *redis.Client, args ...any) topReply {
	t.Helper()
	v, err := c.Do(context.Background(), append([]any{"RL.TOP"}, args...)...).Result()
	if err != nil {
		t.Fatalf("RL.TOP %v: %v", args, err)
	}
	var r topReply
	r.total, r.bound, r.nodes = field(v, "total").(int64), field(v, "bound").(int64), field(v, "nodes").(int64)
	for _, u := range field(v, "unreachable").([]any) {
		r.unreachable = append(r.unreachable, u.(string))
	}
	for _, k := range field(v, "keys").([]any) {
		r.keys = append(r.keys, topKey{field(k, "key").(string), field(k, "count").(int64), field(k, "error").(int64)})
	}
	return r
}

// field returns the value named name of a reply that is a map (RESP3) or
// flat pairs (RESP2).
func field(v any, name string) any {
	switch x := v.(type) {
	case map[any]any:
		return x[name]
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			if x[i] == name {
				return x[i+1]
			}
		}
	}
	return nil
}

// metric reads one sample of a node's /metrics page (name with its labels
// as the page writes them), or -1.
func metric(t *testing.T, httpAddr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return -1
}

// TestTopFindsHeavyHittersAcrossThreeNodes sends a skewed load (Zipf over
// 100,000 keys) to the three nodes of a cluster of the real binary, every
// call refused, and asks one node for the cluster's top refused keys: the
// ten heaviest are found within the stated bound (each count at least the
// true count and at most error more, error ≤ total/256; no key missing
// that is heavier than a listed one by more than the bound), while each
// node holds at most its fixed number of counters.
func TestTopFindsHeavyHittersAcrossThreeNodes(t *testing.T) {
	var ms []*member
	var peers []string
	https := map[*member]string{}
	for i := 1; i <= 3; i++ {
		m := &member{id: fmt.Sprintf("n%d", i), resp: "127.0.0.1:" + freePort(t), raft: "127.0.0.1:" + freePort(t), dir: t.TempDir()}
		ms = append(ms, m)
		https[m] = "127.0.0.1:" + freePort(t)
		peers = append(peers, m.id+"="+m.raft+"="+m.resp)
	}
	for _, m := range ms {
		m.p = start(t, "--node-id", m.id, "--resp-addr", m.resp, "--raft-addr", m.raft, "--http-addr", https[m],
			"--data-dir", m.dir, "--bootstrap-peers", strings.Join(peers, ","))
		m.c = client(t, m.resp)
	}
	leader(t, ms)
	eventually(t, 20*time.Second, "every node to know every member", func() bool {
		for _, m := range ms {
			if inf := m.info(t); inf == nil || inf["members"] != "3" {
				return false
			}
		}
		return true
	})

	const keys, perNode = 100_000, 50_000
	r := rand.New(rand.NewPCG(7, 7))
	z := rand.NewZipf(r, 1.1, 1, keys-1)
	truth := map[string]int64{}
	ctx := context.Background()
	// A node counts the first 25,000 calls of each second exactly and
	// samples past them (docs/commands.md): at most 20,000 are sent in a
	// second, so that every count here is exact.
	var sec int64
	inSec := 0
	for _, m := range ms {
		for sent := 0; sent < perNode; {
			if now := time.Now(); now.Unix() != sec {
				sec, inSec = now.Unix(), 0
			} else if inSec >= 20_000 {
				time.Sleep(time.Unix(sec+1, 0).Sub(now))
				continue
			}
			inSec += 1000
			p := m.c.Pipeline()
			for i := 0; i < 1000; i++ {
				k := "k" + strconv.FormatUint(z.Uint64(), 10)
				truth[k]++
				// COST 2 > BURST 1: refused, always, on every node.
				p.Do(ctx, "RL.ACQUIRE", k, "RATE", "1", "PER", "day", "BURST", "1", "COST", "2")
			}
			cmds, err := p.Exec(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cmds {
				if v, _ := c.(*redis.Cmd).Slice(); len(v) != 6 || v[0] != int64(0) {
					t.Fatalf("%v: %v", c.Args(), v)
				}
			}
			sent += len(cmds)
		}
	}
	total := int64(3 * perNode)
	top := rlTop(t, ms[0].c, "DENIED", "COUNT", "10")
	if top.total != total || top.nodes != 3 || len(top.unreachable) != 0 {
		t.Fatalf("total %d of %d calls, nodes %d, unreachable %v", top.total, total, top.nodes, top.unreachable)
	}
	bound := total / 256
	if top.bound > bound || len(top.keys) != 10 {
		t.Fatalf("bound %d (stated at most %d), %d keys", top.bound, bound, len(top.keys))
	}
	listed := map[string]bool{}
	for _, k := range top.keys {
		listed[k.key] = true
		tr := truth[k.key]
		if k.count < tr || k.count-k.error > tr || k.error > bound {
			t.Errorf("%s: count %d error %d, true count %d, bound %d", k.key, k.count, k.error, tr, bound)
		}
	}
	type kv struct {
		k string
		n int64
	}
	var all []kv
	for k, n := range truth {
		all = append(all, kv{k, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || all[i].n == all[j].n && all[i].k < all[j].k })
	tenth := truth[top.keys[9].key]
	for _, x := range all[:10] {
		if !listed[x.k] && x.n > tenth+bound {
			t.Errorf("%s (true count %d) is missing; the tenth listed has %d, bound %d", x.k, x.n, tenth, bound)
		}
	}
	t.Logf("%d calls over %d keys; true top 10 %v; listed %v; bound %d", total, len(truth), all[:10], top.keys, bound)

	// Bounded memory: each node holds at most its fixed number of counters.
	for _, m := range ms {
		held, most := metric(t, https[m], `sluice_top_keys{by="denied"}`), metric(t, https[m], "sluice_top_keys_max")
		if held <= 0 || most <= 0 || held > most || float64(len(truth)) <= most {
			t.Errorf("%s: %v counters, at most %v, for %d distinct keys", m.id, held, most, len(truth))
		}
	}

	// A member that does not answer is named, and the rest still count.
	ms[2].p.stop()
	top = rlTop(t, ms[0].c, "COUNT", "3")
	if top.nodes != 2 || len(top.unreachable) != 1 || top.unreachable[0] != "n3" || top.total != 2*perNode {
		t.Fatalf("with n3 stopped: nodes %d, unreachable %v, total %d", top.nodes, top.unreachable, top.total)
	}
}
