package quota

import (
	"strings"
	"testing"
	"time"
)

func at(t *testing.T, zone, clock string) int64 {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := time.ParseInLocation("2006-01-02 15:04", clock, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixNano()
}

func TestPeriodBoundsFollowTheZonesCalendar(t *testing.T) {
	cases := []struct {
		period, zone, now, start, end string // start and end in the zone
		hours                         float64
	}{
		{"month", "UTC", "2026-02-14 10:00", "2026-02-01 00:00", "2026-03-01 00:00", 28 * 24},
		{"month", "UTC", "2026-12-31 23:59", "2026-12-01 00:00", "2027-01-01 00:00", 31 * 24},
		{"year", "UTC", "2028-07-01 00:00", "2028-01-01 00:00", "2029-01-01 00:00", 366 * 24},
		// 2026-11-22 is a Sunday: its week began on Monday the 16th.
		{"week", "UTC", "2026-11-22 23:00", "2026-11-16 00:00", "2026-11-23 00:00", 7 * 24},
		{"week", "UTC", "2026-11-23 00:00", "2026-11-23 00:00", "2026-11-30 00:00", 7 * 24},
		{"day", "UTC", "2026-11-22 00:00", "2026-11-22 00:00", "2026-11-23 00:00", 24},
		// Daylight saving time: Paris's last Sunday of March has 23 hours,
		// and its March has one hour less.
		{"day", "Europe/Paris", "2026-03-29 12:00", "2026-03-29 00:00", "2026-03-30 00:00", 23},
		{"month", "Europe/Paris", "2026-03-29 12:00", "2026-03-01 00:00", "2026-04-01 00:00", 31*24 - 1},
		{"day", "America/New_York", "2026-11-01 12:00", "2026-11-01 00:00", "2026-11-02 00:00", 25},
		// An hour in a zone half an hour off UTC starts at half past, UTC.
		{"hour", "Asia/Kolkata", "2026-11-22 10:59", "2026-11-22 10:00", "2026-11-22 11:00", 1},
		// A month in Tokyo starts while UTC is still in the previous one.
		{"month", "Asia/Tokyo", "2026-12-01 03:00", "2026-12-01 00:00", "2027-01-01 00:00", 31 * 24},
	}
	for _, c := range cases {
		p, err := ParsePeriod(c.period, c.zone)
		if err != nil {
			t.Fatal(err)
		}
		now := at(t, c.zone, c.now)
		s, e := p.Bounds(now)
		if s != at(t, c.zone, c.start) || e != at(t, c.zone, c.end) || float64(e-s) != c.hours*float64(time.Hour) {
			t.Errorf("%s %s at %s: [%s, %s) (%.0fh)", c.period, c.zone, c.now,
				time.Unix(0, s).UTC(), time.Unix(0, e).UTC(), float64(e-s)/float64(time.Hour))
		}
	}
	// The hour New York repeats when clocks go back is two periods.
	p, _ := ParsePeriod("hour", "America/New_York")
	first := time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC).UnixNano()  // 01:30 EDT
	second := time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC).UnixNano() // 01:30 EST
	s1, e1 := p.Bounds(first)
	s2, e2 := p.Bounds(second)
	if e1 != s2 || e1-s1 != int64(time.Hour) || e2-s2 != int64(time.Hour) || s1 != first-int64(30*time.Minute) {
		t.Errorf("repeated hour: [%d, %d) then [%d, %d)", s1, e1, s2, e2)
	}
	// Codes travel in a limit and come back.
	q, _ := ParsePeriod("week", "Europe/Paris")
	if back, ok := PeriodOfCode(q.Code()); !ok || back != q || back.Zone() != "Europe/Paris" || back.String() != "week" {
		t.Errorf("code round trip: %v %v", back, ok)
	}
	if _, ok := PeriodOfCode(1 << 40); ok {
		t.Error("an unknown zone's code decoded")
	}
}

func TestQuotaZonesAreDatabaseNames(t *testing.T) {
	for _, z := range []string{"UTC", "Europe/Paris", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "Etc/GMT-14", "EST5EDT"} {
		if _, err := ParsePeriod("day", z); err != nil {
			t.Errorf("%s: %v", z, err)
		}
	}
	for _, z := range []string{"Local", "localtime", "posixrules", "./UTC", "Europe//Paris", "./././Europe/Paris", "/etc/localtime",
		"../UTC", "utc", "Europe/Paris ", "Mars/Olympus", strings.Repeat("A", 65)} {
		if _, err := ParsePeriod("day", z); err == nil {
			t.Errorf("%q accepted", z)
		}
	}
	// Refused names are remembered, within a bound.
	if !zones.refused("Mars/Olympus") || zones.refused("Europe/Paris") {
		t.Fatal("the refused names are not the ones remembered")
	}
	for i := 0; i < 3*maxRefusedZones; i++ {
		ParsePeriod("day", "Nowhere/Town"+strings.Repeat("x", i%50)+string(rune('A'+i%26)))
	}
	if n := len(zones.bad); n > maxRefusedZones {
		t.Fatalf("%d refused names kept", n)
	}
}
