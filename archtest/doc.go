// Package archtest holds the test of the module's import graph: the layers
// its packages sit in (engine at the bottom; then the tree, quotas,
// reservations, usage, faults and access; the limiter and the Raft state
// machine; the fronts; the node's wiring; the binaries), no import back up
// a layer, no front importing another, the RESP front imported only by the
// node's wiring, libraries in internal/ importing nothing of the module,
// test helpers (testsupport/) and the Go SDK (clients/go) imported by
// tests alone, and the protocol module (protocol/) on the standard library
// alone. A package added to the module must be placed in the table of
// archtest_test.go.
package archtest
