package peer

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/bounds"
	"github.com/sluice-rl/sluice/fault"
	"github.com/sluice-rl/sluice/limiter"
)

// The receive side: the operations other members send this node — their
// consumption (RL.SYNC), token leases asked of or given back to the
// buckets it owns (RL.LEASE), concurrency slots (RL.SLOT), its usage
// summary (RL.TOPSUMMARY). They are not client commands: a connection
// authenticated as a node reaches them through Server.Serve, and every
// other connection gets Redis's unknown-command error (COMMAND does not
// list them). Each takes the node it acts for from the connection's
// login and refuses a sender that names another node, or is no member.

// Writer is where an operation's reply goes: the connection's RESP
// writer.
type Writer interface {
	WriteError(msg string)
	WriteString(str string)
	WriteBulk(bulk []byte)
	WriteBulkString(bulk string)
	WriteInt(num int)
	WriteArray(count int)
}

// Server answers the operations other members send, over the service.
type Server struct {
	Service *limiter.Service
}

// op is one operation: its name, arity as in Redis (negative: at least),
// whether its first argument names the sending node, and its handler.
type op struct {
	name   string
	arity  int
	from   bool
	handle func(s *Server, w Writer, from string, a [][]byte)
}

var ops = map[string]op{}

func init() {
	for _, o := range []op{
		{"RL.SYNC", 3, true, (*Server).sync},
		{"RL.LEASE", -3, true, (*Server).lease},
		{"RL.SLOT", -4, true, (*Server).slot},
		{"RL.TOPSUMMARY", 2, false, (*Server).topSummary},
	} {
		ops[strings.ToLower(o.name)] = o
	}
}

// Serve runs the operation args sent on a connection authenticated as
// node from, and reports whether args named one (false: nothing written).
func (s *Server) Serve(w Writer, from string, args [][]byte) bool {
	if len(args) == 0 || len(args[0]) > 16 {
		return false
	}
	o, ok := ops[strings.ToLower(string(args[0]))]
	if !ok {
		return false
	}
	switch {
	case o.arity >= 0 && len(args) != o.arity, o.arity < 0 && len(args) < -o.arity:
		w.WriteError("ERR wrong number of arguments for '" + strings.ToLower(o.name) + "' command")
	case o.from && string(args[1]) != from:
		w.WriteError("NOPERM " + o.name + " for node '" + fault.Printable(args[1]) + "' on a connection authenticated as node '" + fault.Printable([]byte(from)) + "'")
	default:
		o.handle(s, w, from, args)
	}
	return true
}

// failed replies with an operation's error; a refusal of the limiter's
// (not a member, a bad payload) is named after the operation.
func failed(w Writer, name string, err error) {
	var pe *limiter.PeerError
	if errors.As(err, &pe) {
		w.WriteError("ERR " + name + " " + pe.Error())
		return
	}
	w.WriteError(err.Error())
}

// sync applies a member's consumption (limiter.Service.ApplySync).
func (s *Server) sync(w Writer, from string, a [][]byte) {
	n, err := s.Service.ApplySync(from, a[2])
	if err != nil {
		failed(w, "RL.SYNC", err)
		return
	}
	w.WriteInt(n)
}

// lease is the owner's side of the token leases (limiter.Service.Lease):
// it answers the grants as one bulk string. With RETURN it takes back
// tokens of expired leases (ReturnLease).
func (s *Server) lease(w Writer, from string, a [][]byte) {
	svc := s.Service
	if !svc.IsMember(from) {
		failed(w, "RL.LEASE", &limiter.PeerError{From: from})
		return
	}
	ret := len(a) == 4 && strings.EqualFold(string(a[2]), "RETURN")
	if len(a) != 3 && !ret {
		w.WriteError("ERR syntax error")
		return
	}
	if ret {
		n, err := svc.ReturnLease(from, a[3])
		if err != nil {
			failed(w, "RL.LEASE", err)
			return
		}
		w.WriteInt(n)
		return
	}
	out, err := svc.Lease(from, a[2])
	if err != nil {
		failed(w, "RL.LEASE", err)
		return
	}
	w.WriteBulk(out)
}

// slotTTL bounds the TTL a copy of a hold carries, in ns: a reservation's.
var slotTTL = bounds.Int{Lo: 1, Hi: bounds.MaxTTLMs * int64(time.Millisecond)}

// ttlArg reads a copy's TTL in ns, or replies with the error.
func ttlArg(w Writer, b []byte) (int64, bool) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || !slotTTL.In(n) {
		w.WriteError("ERR " + slotTTL.Msg("ttl-ns"))
		return 0, false
	}
	return n, true
}

// slot is the receiving side of limiter's slots (limiter/slots.go): a
// copy of a hold the sender granted (COPY), the holds of a key the sender
// is to decide (HOLDS: an array of id, ns left, …), holds that ended
// (ENDED) and a renewed one (RENEWED).
func (s *Server) slot(w Writer, from string, a [][]byte) {
	svc := s.Service
	var err error
	switch sub := string(a[2]); {
	case strings.EqualFold(sub, "COPY") && len(a) == 6:
		ttl, ok := ttlArg(w, a[5])
		if !ok {
			return
		}
		if err = svc.SlotCopy(from, string(a[3]), string(a[4]), ttl); err == nil {
			w.WriteString("OK")
			return
		}
	case strings.EqualFold(sub, "HOLDS") && len(a) == 5:
		view, e := strconv.ParseUint(string(a[3]), 10, 64)
		if e != nil {
			w.WriteError("ERR view must be an unsigned integer")
			return
		}
		cs, err := svc.SlotHolds(from, view, string(a[4]))
		if err != nil {
			failed(w, "RL.SLOT", err)
			return
		}
		w.WriteArray(2 * len(cs))
		for _, c := range cs {
			w.WriteBulkString(c.ID)
			w.WriteBulkString(strconv.FormatInt(c.Expires, 10))
		}
		return
	case strings.EqualFold(sub, "ENDED"):
		ids := make([]string, 0, len(a)-3)
		for _, id := range a[3:] {
			ids = append(ids, string(id))
		}
		if err = svc.SlotsEnded(from, ids); err == nil {
			w.WriteInt(len(ids))
			return
		}
	case strings.EqualFold(sub, "RENEWED") && len(a) == 5:
		ttl, ok := ttlArg(w, a[4])
		if !ok {
			return
		}
		if err = svc.SlotRenewed(from, string(a[3]), ttl); err == nil {
			w.WriteString("OK")
			return
		}
	default:
		w.WriteError("ERR syntax error")
		return
	}
	failed(w, "RL.SLOT", err)
}

// topSummary answers this node's heavy-hitters summary of a kind, as
// JSON, for a member merging the cluster's (limiter.Service.Top).
func (s *Server) topSummary(w Writer, _ string, a [][]byte) {
	kind := limiter.TopRefused
	switch {
	case strings.EqualFold(string(a[1]), "ADMITTED"):
		kind = limiter.TopAdmitted
	case !strings.EqualFold(string(a[1]), "DENIED"):
		w.WriteError("ERR RL.TOPSUMMARY takes DENIED or ADMITTED")
		return
	}
	b, _ := json.Marshal(s.Service.TopSummary(kind))
	w.WriteBulk(b)
}
