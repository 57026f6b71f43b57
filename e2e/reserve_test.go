package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	sl "github.com/sluice-rl/sluice/clients/go"
)

// reserve sends RL.RESERVE and returns its seven fields.
func reserve(ctx context.Context, c *redis.Client, args ...any) ([]any, error) {
	v, err := c.Do(ctx, append([]any{"RL.RESERVE"}, args...)...).Slice()
	if err == nil && len(v) != 7 {
		err = fmt.Errorf("RL.RESERVE replied %d fields: %v", len(v), v)
	}
	return v, err
}

// 50 clients reserving against CONCURRENCY 5 never have more than 5 in
// flight: each counts itself in after its reservation is granted and out
// before it releases, so what the clients count is at most what the
// server holds.
func TestConcurrencyLimitHoldsAcrossClients(t *testing.T) {
	p := single(t)
	c := client(t, p.Resp)
	waitReady(t, c)
	const clients, rounds = 50, 6
	l := holdSlots(t, []string{p.Resp}, clients, rounds, 30*time.Second, "gpu", "CONCURRENCY", 5, "COST", 1, "TTL", 30000, "WAIT", 20000)
	t.Logf("%d reservations granted, at most %d in flight", l.granted, l.most)
	if l.most > 5 {
		t.Fatalf("%d in flight, limit 5", l.most)
	}
	if l.granted < clients {
		t.Fatalf("only %d of %d reservations granted", l.granted, clients*rounds)
	}
	if v, err := reserve(context.Background(), c, "gpu", "CONCURRENCY", 5, "COST", 1); err != nil || v[0].(int64) != 1 {
		t.Fatalf("after every release, a slot: %v %v", v, err)
	}
}

// slotLoad is what holdSlots saw: reservations granted, the most the
// clients held at once, and how many each node issued.
type slotLoad struct {
	granted, most int64
	issuers       map[string]int
}

// holdSlots runs clients, client i on addrs[i % len(addrs)], each sending
// RL.RESERVE args rounds times (readTimeout bounds a reply), holding each
// granted reservation for 2 ms and releasing it. Each counts itself in
// after its reservation is granted and out before it releases, so what the
// clients count is at most what the server holds.
func holdSlots(t *testing.T, addrs []string, clients, rounds int, readTimeout time.Duration, args ...any) slotLoad {
	t.Helper()
	var inFlight, most, granted atomic.Int64
	var mu sync.Mutex
	issuers := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := 0; i < clients; i++ {
		addr := addrs[i%len(addrs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: readTimeout, PoolSize: 1})
			defer cl.Close()
			ctx := context.Background()
			for r := 0; r < rounds; r++ {
				v, err := reserve(ctx, cl, args...)
				if err != nil {
					errs <- fmt.Errorf("RL.RESERVE on %s: %v", addr, err)
					return
				}
				id := v[6].(string)
				if id == "" {
					continue // WAIT ran out on a slow machine: refused, holding nothing
				}
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				granted.Add(1)
				_, issuer, _ := strings.Cut(id, "@")
				mu.Lock()
				issuers[issuer]++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the work
				inFlight.Add(-1)
				if ok, err := cl.Do(ctx, "RL.RELEASE", id).Int(); err != nil || ok != 1 {
					errs <- fmt.Errorf("RL.RELEASE %s on %s: %d %v", id, addr, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return slotLoad{granted: granted.Load(), most: most.Load(), issuers: issuers}
}

// A client that dies holding 3 of 3 slots gets nothing back until its
// reservations' TTL, and the slots are free again within TTL + 1 s.
func TestDeadClientsSlotsComeBackAfterTTL(t *testing.T) {
	p := single(t)
	c := client(t, p.Resp)
	waitReady(t, c)
	const ttl = 2 * time.Second
	conn, err := net.Dial("tcp", p.Resp)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	for i := 0; i < 3; i++ {
		fmt.Fprintf(conn, "RL.RESERVE job CONCURRENCY 3 COST 1 TTL %d\r\n", ttl.Milliseconds())
		var id string
		for line := 0; line < 9; line++ { // *7, six fields (the 6th a bulk: 2 lines), then the id's 2 lines
			s, err := rd.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if line == 8 {
				id = strings.TrimSpace(s)
			}
		}
		if id == "" {
			t.Fatalf("reservation %d of the client to kill was refused", i)
		}
	}
	conn.Close() // the client dies holding three slots
	killed := time.Now()
	ctx := context.Background()
	v, err := reserve(ctx, c, "job", "CONCURRENCY", 3, "COST", 1, "TTL", 60000)
	if err != nil || v[0].(int64) != 0 || v[6].(string) != "" || v[3].(int64) <= 0 || v[3].(int64) > ttl.Milliseconds() {
		t.Fatalf("right after the kill, a fourth: %v %v", v, err)
	}
	// The promise is the server's: no call it takes later than TTL + 1 s
	// after the reservations were made finds a dead client's slot still
	// held. A call sent after that instant and refused breaks it; a loaded
	// machine that delays the calls themselves does not.
	got := 0
	deadline := killed.Add(ttl + time.Second)
	eventually(t, ttl+30*time.Second, "the dead client's three slots", func() bool {
		sent := time.Now()
		v, err := reserve(ctx, c, "job", "CONCURRENCY", 3, "COST", 1, "TTL", 60000)
		switch {
		case err == nil && v[6].(string) != "":
			got++
		case sent.After(deadline):
			t.Fatalf("a reservation sent %v after the kill (TTL %v) was refused: %v %v", sent.Sub(killed).Round(time.Millisecond), ttl, v, err)
		}
		return got == 3
	})
}

// At --max-reservations further reservations are refused with a clear
// error and charge nothing; expiry makes room again. (100 an hour: no token
// refills between the calls on a loaded machine, as 100 a second did
// every 10 ms.)
func TestReservationCapOnTheBinary(t *testing.T) {
	p := single(t, "--max-reservations", "3", "--reservation-ttl", "1s")
	c := client(t, p.Resp)
	waitReady(t, c)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if v, err := reserve(ctx, c, "k", "RATE", 100, "PER", "hour", "COST", 1); err != nil || v[6].(string) == "" {
			t.Fatalf("reservation %d: %v %v", i, v, err)
		}
	}
	_, err := reserve(ctx, c, "k", "RATE", 100, "PER", "hour", "COST", 1)
	if err == nil || !strings.Contains(err.Error(), "--max-reservations") {
		t.Fatalf("past the cap: %v", err)
	}
	if v, _ := c.Do(ctx, "RL.PEEK", "k", "RATE", 100, "PER", "hour", "COST", 0).Slice(); len(v) != 6 || v[1].(int64) > 97 {
		t.Fatalf("peek: %v", v)
	}
	eventually(t, 5*time.Second, "room after expiry", func() bool {
		v, err := reserve(ctx, c, "k", "RATE", 100, "PER", "hour", "COST", 1, "TTL", 60000)
		return err == nil && v[6].(string) != ""
	})
	// The metrics saw three reservations expire and one open now.
	eventually(t, 5*time.Second, "the reservation metrics", func() bool {
		resp, err := http.Get("http://" + p.HTTP + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := string(b)
		return strings.Contains(m, `sluice_reservations_total{event="expired"} 3`) &&
			strings.Contains(m, `sluice_reservations_total{event="reserved"} 4`) &&
			strings.Contains(m, `sluice_reservations_in_flight{budget="inline"} 1`) &&
			strings.Contains(m, "sluice_reservations_open 1")
	})
}

// The Go client reserves, settles, releases and renews on the real
// binary, in both forms.
func TestGoClientReservations(t *testing.T) {
	p := single(t)
	c := client(t, p.Resp)
	waitReady(t, c)
	ctx := context.Background()
	if err := c.Do(ctx, "RL.BUDGET", "SET", "llm", "RATE", 1000, "PER", "minute", "SCOPE", "user", "CONCURRENCY", 1).Err(); err != nil {
		t.Fatal(err)
	}
	cl := sl.New(c, sl.Timeout(5*time.Second)) // what it does with answers, not the deadline
	r, err := cl.ReserveInline(ctx, "k", &sl.Limit{Rate: 100, Per: time.Minute}, 40, sl.TTL(time.Minute))
	if err != nil || !r.Allowed || r.ID == "" || r.Remaining != 60 {
		t.Fatalf("inline reserve: %+v %v", r, err)
	}
	d, err := cl.Settle(ctx, r.ID, 10)
	if err != nil || d.Remaining < 90 || d.LimitedBy != "k" {
		t.Fatalf("settle: %+v %v", d, err)
	}
	if _, err := cl.Settle(ctx, r.ID, 10); !sl.IsNoReservation(err) {
		t.Fatalf("second settle: %v", err)
	}
	b, err := cl.Reserve(ctx, "llm", 5, sl.Key("acme"))
	if err != nil || !b.Allowed || b.ID == "" {
		t.Fatalf("budget reserve: %+v %v", b, err)
	}
	full, err := cl.Reserve(ctx, "llm", 5, sl.Key("acme"))
	if err != nil || full.Allowed || full.ID != "" || full.LimitedBy != "concurrency:llm#acme" {
		t.Fatalf("past the concurrency limit: %+v %v", full, err)
	}
	if ok, err := cl.Renew(ctx, b.ID, time.Minute); !ok || err != nil {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if ok, err := cl.Release(ctx, b.ID); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if ok, err := cl.Release(ctx, b.ID); ok || err != nil {
		t.Fatalf("second release: %v %v", ok, err)
	}
	if _, err := cl.Acquire(ctx, "llm", sl.TTL(time.Second)); err == nil {
		t.Fatal("Acquire took a TTL")
	}
}

// An id is valid on every node of a cluster: reserved on one node, it is
// renewed on a second, settled on a third, and a second settle anywhere
// finds it gone (the issuing node answers, through whichever node was
// asked). The settle's reply is the issuing node's bucket after it.
func TestReservationSettlesOnAnotherNode(t *testing.T) {
	ms, _ := threeNodes(t)
	ctx := context.Background()
	for _, m := range ms {
		waitReady(t, m.c)
	}
	// A day's rate: nothing refills while the test runs. A node admits
	// from its lease of the bucket, so what is left is counted from the
	// reply, not from the limit.
	v, err := reserve(ctx, ms[0].c, "llm:acme", "RATE", 3000, "PER", "day", "COST", 40, "TTL", 60000)
	if err != nil || v[0].(int64) != 1 {
		t.Fatalf("RL.RESERVE on %s: %v %v", ms[0].id, v, err)
	}
	left := v[1].(int64)
	id := v[6].(string)
	if !strings.HasSuffix(id, "@"+ms[0].id) {
		t.Fatalf("the id %q does not name the issuing node %s", id, ms[0].id)
	}
	if n, err := ms[1].c.Do(ctx, "RL.RENEW", id, "TTL", 120000).Int64(); err != nil || n != 1 {
		t.Fatalf("RL.RENEW on %s: %v %v", ms[1].id, n, err)
	}
	s, err := ms[2].c.Do(ctx, "RL.SETTLE", id, "ACTUAL", 10).Slice()
	if err != nil || len(s) != 6 || s[0].(int64) != 1 || s[1].(int64) != left+30 || s[5].(string) != "llm:acme" {
		t.Fatalf("RL.SETTLE on %s: %v %v (want %d left: 40 reserved, 10 used)", ms[2].id, s, err, left+30)
	}
	for _, m := range ms {
		err := m.c.Do(ctx, "RL.SETTLE", id, "ACTUAL", 10).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NORESERVATION no open reservation") {
			t.Fatalf("a second RL.SETTLE on %s: %v", m.id, err)
		}
		if n, err := m.c.Do(ctx, "RL.RELEASE", id).Int64(); err != nil || n != 0 {
			t.Fatalf("RL.RELEASE of a settled reservation on %s: %v %v", m.id, n, err)
		}
	}
	err = ms[1].c.Do(ctx, "RL.SETTLE", "00000000000000010000000000000000@n9", "ACTUAL", 1).Err()
	if err == nil || !strings.Contains(err.Error(), "which is not a member of this cluster") {
		t.Fatalf("an id of no member: %v", err)
	}
}
