// Package testsupport holds, in its subpackages, what tests across the
// module share and nothing that the binary builds: testkit (polling, a
// settable clock, building the binary), testnode and testraft (nodes and
// Raft groups inside a test process), testlimiter (a limiter.Service on a
// one-node cluster), resptest (a raw RESP client that renders replies
// exactly), testport and testdns (ports and a resolver for tests), and
// clienttest (the Go client's tests against a real node). Only _test
// files and other packages here import them; production libraries live
// in internal/ (flagx, respclient) and import no other package of the
// module. The layering test in archtest keeps it so.
package testsupport
