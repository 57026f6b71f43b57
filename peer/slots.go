package peer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limiter"
	"github.com/sluice-rl/sluice/reserve"
)

// SlotPeers is limiter.SlotPeers over RESP (RL.SLOT, commands/slot.go):
// copies and questions go at once and are awaited; ended and renewed holds
// are queued and sent to every other member in batches from one goroutine.
type SlotPeers struct {
	n      *Node
	client *Client
	notes  chan slotNote
	failed prometheus.Counter
}

type slotNote struct {
	id  string
	ttl int64 // 0: ended
}

const (
	// slotPeerTimeout bounds one question or copy: members answer from
	// memory, so a second means unreachable.
	slotPeerTimeout = time.Second
	// slotNotesQueue bounds the ended and renewed holds not yet sent; past
	// it a note is dropped, and the copies it was for count until their
	// TTL (more slots held than there are, never fewer).
	slotNotesQueue = 65536
	// slotNotesBatch bounds the ids of one RL.SLOT ENDED.
	slotNotesBatch = 1000
)

func newSlotPeers(n *Node, client *Client) *SlotPeers {
	p := &SlotPeers{n: n, client: client, notes: make(chan slotNote, slotNotesQueue),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_slot_messages_failed_total",
			Help: "RL.SLOT messages about concurrency slots another member did not answer or refused."})}
	n.Registry.MustRegister(p.failed)
	go p.run()
	return p
}

func (p *SlotPeers) Self() string { return p.n.Raft.ID() }

func (p *SlotPeers) do(member string, args ...string) ([]byte, error) {
	m, ok := p.n.Raft.State().Members[member]
	if !ok || m.RespAddr == "" {
		return nil, errors.New("not a member")
	}
	b := make([][]byte, 0, len(args)+2)
	b = append(b, []byte("RL.SLOT"), []byte(p.Self()))
	for _, a := range args {
		b = append(b, []byte(a))
	}
	ctx, cancel := context.WithTimeout(context.Background(), slotPeerTimeout)
	defer cancel()
	raw, err := p.client.DoContext(ctx, m.RespAddr, b)
	if err == nil {
		err = replyError(raw)
	}
	if err != nil {
		p.failed.Inc()
	}
	return raw, err
}

func (p *SlotPeers) Copy(member, key, id string, ttl int64) error {
	_, err := p.do(member, "COPY", key, id, strconv.FormatInt(ttl, 10))
	return err
}

func (p *SlotPeers) Holds(member string, view uint64, key string) ([]reserve.Copy, error) {
	raw, err := p.do(member, "HOLDS", strconv.FormatUint(view, 10), key)
	if err != nil {
		if strings.HasPrefix(string(raw), "-"+limiter.ErrViewDiffers.Error()) {
			return nil, limiter.ErrViewDiffers
		}
		return nil, err
	}
	rep, perr := ParseReply(raw)
	f, ok := rep.Strings()
	if perr != nil || !ok || len(f)%2 != 0 {
		return nil, errors.New("unexpected reply to RL.SLOT HOLDS")
	}
	cs := make([]reserve.Copy, 0, len(f)/2)
	for i := 0; i < len(f); i += 2 {
		ttl, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return nil, errors.New("unexpected reply to RL.SLOT HOLDS")
		}
		cs = append(cs, reserve.Copy{ID: f[i], Expires: ttl})
	}
	return cs, nil
}

func (p *SlotPeers) Ended(ids []string) {
	for _, id := range ids {
		p.note(slotNote{id: id})
	}
}

func (p *SlotPeers) Renewed(id string, ttl int64) { p.note(slotNote{id: id, ttl: ttl}) }

func (p *SlotPeers) note(n slotNote) {
	select {
	case p.notes <- n:
	default:
		p.failed.Inc()
	}
}

// run sends the queued notes to every other member: each ENDED batch and
// RENEWED as it comes, the members in parallel.
func (p *SlotPeers) run() {
	for {
		var batch []slotNote
		select {
		case <-p.n.Stop:
			p.client.Close()
			return
		case n := <-p.notes:
			batch = append(batch, n)
		}
	more:
		for len(batch) < slotNotesBatch {
			select {
			case n := <-p.notes:
				batch = append(batch, n)
			default:
				break more
			}
		}
		var ended []string
		var renewed []slotNote
		for _, n := range batch {
			if n.ttl == 0 {
				ended = append(ended, n.id)
			} else {
				renewed = append(renewed, n)
			}
		}
		self := p.Self()
		var wg sync.WaitGroup
		for id := range p.n.Raft.State().Members {
			if id == self {
				continue
			}
			wg.Add(1)
			go func(m string) {
				defer wg.Done()
				if len(ended) > 0 {
					p.do(m, append([]string{"ENDED"}, ended...)...)
				}
				for _, r := range renewed {
					p.do(m, "RENEWED", r.id, strconv.FormatInt(r.ttl, 10))
				}
			}(id)
		}
		wg.Wait()
	}
}
