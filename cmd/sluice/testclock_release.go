//go:build !testclock

package main

// testClock: a release build decides limits on the real clock; a
// SLUICE_TEST_CLOCK meant for a test build is ignored, and said so.
func testClock(getenv func(string) string) (func() int64, string, error) {
	if getenv("SLUICE_TEST_CLOCK") != "" {
		return nil, "SLUICE_TEST_CLOCK is ignored: this build has no test clock (go build -tags testclock)", nil
	}
	return nil, "", nil
}
