package quota

import "encoding/json"

// Item is what one quota counter used in one period [Start, End),
// in Unix ns. In a QuotaAdd entry Used is an increment (negative for
// refunds); in the state it is the period's committed total, never below
// zero. Period names the kind of period and its time zone ("month UTC")
// and Limit the quota, as the proposer last charged them, for RL.QUOTA. In
// a QuotaReserve entry Used is the units wanted (negative: released) and
// Need the units a call waiting on the asking node lacks: the grant covers
// Need whole when the pool has it, though a chunk would be smaller.
type Item struct {
	Key    Key    `json:"k"`
	Start  int64  `json:"s"`
	End    int64  `json:"e"`
	Used   int64  `json:"n"`
	Limit  int64  `json:"l,omitempty"`
	Period string `json:"p,omitempty"`
	// Reserved is the units of the period granted to nodes to admit
	// against (QuotaReserve), in the state only.
	Reserved int64 `json:"r,omitempty"`
	// Grants is, in the state only, the units each node's life (its
	// reservation origin, "id@incarnation") holds granted and not given
	// back, spent or not: what a restart or a removal may return to the
	// pool. The map is replaced, never changed in place.
	Grants map[string]int64 `json:"g,omitempty"`
	// Need: see above (QuotaReserve entries only).
	Need int64 `json:"need,omitempty"`
}

// Key is a counter's key: any bytes (a client's key, a subject),
// written in JSON as base64 so that bytes that are not UTF-8 survive.
type Key string

func (k Key) MarshalJSON() ([]byte, error) { return json.Marshal([]byte(k)) }

func (k *Key) UnmarshalJSON(b []byte) error {
	var raw []byte
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*k = Key(raw)
	return nil
}
