//go:build race

package e2e

// raceEnabled: the race detector multiplies the cost of every memory
// access, so timing bounds are checked without it (make test runs those
// tests once more so).
const raceEnabled = true
