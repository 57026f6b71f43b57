// Package peer owns the traffic between the nodes of a cluster, outside
// Raft's own transport: the send side — consumption sent to every member
// (sync.go), token leases asked of each bucket's owner (lease.go),
// concurrency slots (slots.go), and what raftfsm asks of other members
// (remote.go: forwarded writes, relayed commands, joins, probes) — and
// the one RESP client (client.go) and reply parser (reply.go) they share.
// Client commands that belong to another member (a reservation's
// settle, release and renew; a key's concurrency slots; another node's
// usage summary) are relayed through Relays (relays.go), which the
// limiter calls and which answers with typed results: no front parses
// another node's reply.
//
// The wire is RESP commands on connections authenticated as a node
// (sluice-peer:<id>), the same as the previous release's, so that a
// cluster of old and new nodes keeps working through a rolling upgrade.
package peer
