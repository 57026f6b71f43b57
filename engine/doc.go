// Package engine owns sluice's limiter state: the limiting algorithms and
// the sharded in-memory store of buckets they run on.
//
// The package does no I/O and starts no goroutines. Time is always an
// argument (Unix nanoseconds), in the habit of golang.org/x/time/rate, so
// every algorithm can be driven along a fixed timeline in tests.
//
// Arithmetic is exact. A continuous limit of RATE tokens per WINDOW
// nanoseconds has an emission interval T = WINDOW/RATE that is rarely a whole
// number of nanoseconds, so the theoretical arrival time of the GCRA family is
// kept as whole nanoseconds plus a remainder in units of 1/RATE ns, and
// products such as BURST×WINDOW are formed in 128 bits. A limit of one token
// per day and one of 100000 tokens per second therefore admit exactly the
// textbook number of requests over any span, with no drift.
//
// A bucket that has refilled to full carries no information (a new bucket
// would behave identically), so the store forgets such buckets: idle keys
// cost no memory, and Sweep reclaims them in small steps.
//
// DESIGN.md follows one call through the package (its three decision
// modes: a bucket decided here, from a lease, or against a calendar
// quota), describes token leases, and says how to add an algorithm: one
// file implementing the family interface and one line in the registry
// (algos.go).
package engine
