package limiter

import (
	"strconv"

	"github.com/sluice-rl/sluice/keyspace"
	"github.com/sluice-rl/sluice/script"
)

// Scripts: Redis's EVAL and EVALSHA over the data commands (package
// script). A script runs where its KEYS live, holding their shards for
// its whole run, so it is atomic with respect to them; another node
// relays it in one hop (as EVAL with its body when this node has it, so
// the owner need not have loaded it).

// Script is one EVAL or EVALSHA call, parsed.
type Script struct {
	SHA  string // EVALSHA's name, or EVAL's body's SHA-1
	Body []byte // EVAL's body; nil for EVALSHA
	Keys [][]byte
	Argv [][]byte
	// ReadOnly: EVAL_RO or EVALSHA_RO, which may not write.
	ReadOnly bool
}

var errScriptsOff = keyspace.Errf("ERR scripts are not enabled on this node")

// Eval runs sc at now where its keys live; relayed: another member sent
// it here, and it runs here if this node's member list places its keys
// here too (where).
func (s *Service) Eval(now int64, sc *Script, relayed bool) keyspace.Reply {
	if s.Scripts == nil || s.Keys == nil {
		return errScriptsOff
	}
	id, remote, refused := s.where(sc.Keys, relayed)
	if refused.IsError() {
		return refused
	}
	if sc.Body != nil {
		sha, e := s.Scripts.LoadForEval(sc.Body)
		if e.IsError() {
			return e
		}
		sc.SHA = sha
	}
	if remote {
		return s.Relays.Data(id, s.relayArgs(sc))
	}
	// The script holds its keys' shards for its run, and may touch those
	// keys alone; one that declares none holds nothing and touches none.
	tx := s.Keys.Lock(now, false, sc.Keys...)
	tx.Only(sc.Keys)
	defer tx.Unlock()
	return s.Scripts.Run(sc.SHA, sc.Keys, sc.Argv, script.Commands(tx, now, sc.ReadOnly))
}

// relayArgs writes sc as the command its keys' owner runs: EVAL with the
// body (EVAL_RO for a read-only one) when this node has it, else EVALSHA.
func (s *Service) relayArgs(sc *Script) [][]byte {
	body := sc.Body
	if body == nil {
		body = s.Scripts.Source(sc.SHA)
	}
	name, code := "EVAL", body
	if body == nil {
		name, code = "EVALSHA", []byte(sc.SHA)
	}
	if sc.ReadOnly {
		name += "_RO"
	}
	a := [][]byte{[]byte(name), code, []byte(strconv.Itoa(len(sc.Keys)))}
	a = append(a, sc.Keys...)
	return append(a, sc.Argv...)
}
