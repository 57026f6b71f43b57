package server

import (
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluice-rl/sluice/reserve"
)

// expireEvery is how often open reservations are checked for expiry: a
// slot held by a client that died frees at most this long after its TTL.
const expireEvery = 100 * time.Millisecond

// startReservations gives the service its reservation store (ids carry
// this node's id; the counter starts at random, so a restarted node does
// not hand out its earlier ids, and each id has a random half, so that no
// client can name another's reservation) and expires reservations on a
// ticker.
func (n *Node) startReservations(cfg *Config) {
	svc := n.Server.svc
	svc.Holds = reserve.New(n.Raft.ID(), cfg.MaxReservations, rand.Uint64()>>1)
	svc.Holds.SetTags(rand.Uint64)
	svc.ReserveTTL = int64(cfg.ReservationTTL)
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_reservations_total",
		Help: "Reservations by event: reserved, settled, released, expired (settled at their estimate after their TTL)."}, []string{"event"})
	for _, e := range []string{"reserved", "settled", "released", "expired"} {
		events.WithLabelValues(e) // at 0 from the start
	}
	inFlight := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_reservations_in_flight",
		Help: "Open reservations by budget: the first path segment of the budget node, or inline."}, []string{"budget"})
	svc.Reserved = func(e, budget string) {
		events.WithLabelValues(e).Inc()
		if e == "reserved" {
			inFlight.WithLabelValues(budget).Inc()
		} else {
			inFlight.WithLabelValues(budget).Dec()
		}
	}
	n.Server.env.Metrics.Registry.MustRegister(events, inFlight,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_reservations_open", Help: "Open reservations (RL.RESERVE) on this node."},
			func() float64 { return float64(svc.Holds.Len()) }))
	go func() {
		t := time.NewTicker(expireEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				svc.ExpireReservations(svc.Clock())
			case <-n.stop:
				return
			}
		}
	}()
}
