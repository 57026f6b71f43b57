//go:build testclock

package main

import (
	"fmt"
	"strings"
	"time"
)

// testClock is the node's limit clock in a build with the testclock tag
// (the end-to-end tests build so): $SLUICE_TEST_CLOCK, "T" or "T@R" in
// RFC 3339, makes the clock read T at the real instant R (by default when
// the process starts) and run on from there at the real clock's speed.
// Nodes given the same T@R share one clock, whenever each starts. Only
// the time limits are decided at moves: Raft's timing, deadlines and logs
// keep the real clock. Release builds have no such setting.
func testClock(getenv func(string) string) (func() int64, string, error) {
	v := getenv("SLUICE_TEST_CLOCK")
	if v == "" {
		return nil, "", nil
	}
	at, real, hasReal := strings.Cut(v, "@")
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return nil, "", fmt.Errorf("SLUICE_TEST_CLOCK: %q is not an RFC 3339 time such as 2027-02-28T23:59:30Z (optionally @ the real time it is read at)", v)
	}
	r := time.Now()
	if hasReal {
		if r, err = time.Parse(time.RFC3339Nano, real); err != nil {
			return nil, "", fmt.Errorf("SLUICE_TEST_CLOCK: %q after @ is not an RFC 3339 time", real)
		}
	}
	offset := t.UnixNano() - r.UnixNano()
	return func() int64 { return time.Now().UnixNano() + offset }, "test clock: limits are decided as if it were " + v, nil
}
