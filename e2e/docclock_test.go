package e2e

// The doc test's clock: DOCTEST_NOW starts every server group it launches
// at a chosen instant, and calendar placeholders are computed from the
// servers' clock at the time each command ran.

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// docNow is DOCTEST_NOW (RFC 3339), the instant at which every server the
// doc test launches starts its clock; zero for the real clock.
var docNow = sync.OnceValues(func() (time.Time, error) {
	v := os.Getenv("DOCTEST_NOW")
	if v == "" || v == "now" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("DOCTEST_NOW=%q: not an RFC 3339 time such as 2027-02-28T23:59:30Z", v)
	}
	return t, nil
})

// docClock is the clock of one group of servers the doc test launched.
type docClock struct {
	env []string         // SLUICE_TEST_CLOCK for each node, nil for the real clock
	now func() time.Time // the servers' time, read here
}

// newDocClock returns the clock of servers launched now: from DOCTEST_NOW
// on, or the real one.
func newDocClock(t *testing.T) docClock {
	at, err := docNow()
	if err != nil {
		t.Fatal(err)
	}
	if at.IsZero() {
		return docClock{now: time.Now}
	}
	env, now := testClockAt(at)
	return docClock{env: []string{env}, now: now}
}

// calendarRE is a placeholder for a figure that depends on where the
// clock stands in a calendar period (see CONTRIBUTING.md):
//
//	{ms to end of day}                   milliseconds to the next midnight UTC
//	{ms to end of month Europe/Paris}    … to the next 1st, 00:00 in Paris
//	{unix time at end of day America/New_York}   that instant in Unix seconds
//
// Periods: hour, day, week (from Monday), month, year; the zone is an IANA
// name, UTC when left out.
var calendarRE = regexp.MustCompile(`\{(ms to|unix time at) end of (hour|day|week|month|year)(?: ([A-Za-z_]+(?:/[A-Za-z_+-]+)*))?\}`)

// A calendarPlace is one parsed calendar placeholder.
type calendarPlace struct {
	unix   bool // Unix seconds at the end, else milliseconds to it
	period string
	loc    *time.Location
}

func parseCalendar(p string) (calendarPlace, error) {
	m := calendarRE.FindStringSubmatch(p)
	if m == nil {
		return calendarPlace{}, fmt.Errorf("%q is not a calendar placeholder", p)
	}
	c := calendarPlace{unix: m[1] == "unix time at", period: m[2], loc: time.UTC}
	if m[3] != "" {
		loc, err := time.LoadLocation(m[3])
		if err != nil {
			return calendarPlace{}, fmt.Errorf("%s: %v", p, err)
		}
		c.loc = loc
	}
	return c, nil
}

// periodEnd returns the end of the calendar period holding t, computed
// here from the calendar alone (not with the server's code).
func periodEnd(period string, t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	y, mo, d := l.Date()
	switch period {
	case "hour":
		// The wall-clock hour: an hour repeated when clocks go back is two.
		into := time.Duration(l.Minute())*time.Minute + time.Duration(l.Second())*time.Second + time.Duration(l.Nanosecond())
		return t.Add(time.Hour - into)
	case "day":
		return time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
	case "week":
		back := (int(l.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, mo, d-back+7, 0, 0, 0, 0, loc)
	case "month":
		return time.Date(y, mo+1, 1, 0, 0, 0, 0, loc)
	case "year":
		return time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)
	}
	panic("calendar period " + period)
}

// matches says whether v is the placeholder's figure at some instant
// between before and after (the command's start and end on the servers'
// clock), also when a period ended meanwhile.
func (c calendarPlace) matches(v float64, before, after time.Time) bool {
	for _, end := range []time.Time{periodEnd(c.period, before, c.loc), periodEnd(c.period, after, c.loc)} {
		if c.unix {
			if int64(v) == end.Unix() {
				return true
			}
			continue
		}
		// Rounded either way, and a few ms for the servers' own reading.
		lo, hi := end.Sub(after).Milliseconds()-5, end.Sub(before).Milliseconds()+5
		if v >= float64(lo) && v <= float64(hi) {
			return true
		}
	}
	return false
}

// calendarFigure returns the figure a placeholder stands for at t, for a
// person reading a mismatch.
func (c calendarPlace) figure(t time.Time) string {
	end := periodEnd(c.period, t, c.loc)
	if c.unix {
		return strconv.FormatInt(end.Unix(), 10)
	}
	return strconv.FormatInt(end.Sub(t).Milliseconds(), 10)
}

// calendarNote says, for a mismatch, what the calendar placeholders of
// want stood for when the command ran.
func calendarNote(want []string, w matchWindow) string {
	var b strings.Builder
	for _, l := range want {
		for _, p := range calendarRE.FindAllString(l, -1) {
			if c, err := parseCalendar(p); err == nil {
				fmt.Fprintf(&b, "\n%s was %s to %s (the servers' clock read %s)", p, c.figure(w.before), c.figure(w.after), w.before.UTC().Format(time.RFC3339Nano))
			} else {
				fmt.Fprintf(&b, "\n%v", err)
			}
		}
	}
	return b.String()
}

func TestCalendarPlaceholders(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		want, got     string
		before, after string
		ok            bool
	}{
		{"5) (integer) {ms to end of day}", "5) (integer) 30000", "2027-01-15T23:59:30Z", "2027-01-15T23:59:30.1Z", true},
		{"5) (integer) {ms to end of day}", "5) (integer) 29950", "2027-01-15T23:59:30Z", "2027-01-15T23:59:30.1Z", true},
		{"5) (integer) {ms to end of day}", "5) (integer) 29000", "2027-01-15T23:59:30Z", "2027-01-15T23:59:30.1Z", false},
		// A day ended while the command ran: either side of midnight.
		{"5) (integer) {ms to end of day}", "5) (integer) 3", "2027-01-15T23:59:59.99Z", "2027-01-16T00:00:00.2Z", true},
		{"5) (integer) {ms to end of day}", "5) (integer) 86399900", "2027-01-15T23:59:59.99Z", "2027-01-16T00:00:00.2Z", true},
		{"5) (integer) {ms to end of day}", "5) (integer) 43200000", "2027-01-15T23:59:59.99Z", "2027-01-16T00:00:00.2Z", false},
		{"5) (integer) {ms to end of month}", "5) (integer) 30000", "2027-02-28T23:59:30Z", "2027-02-28T23:59:30.01Z", true},
		// Paris's 28 March 2027 lasts 23 hours.
		{"5) (integer) {ms to end of day Europe/Paris}", "5) (integer) 75630000", "2027-03-28T00:59:30Z", "2027-03-28T00:59:30Z", true},
		{"{ms to end of hour Europe/Paris} left", "30000 left", "2027-03-28T00:59:30Z", "2027-03-28T00:59:30Z", true},
		{"12) (integer) {unix time at end of day America/New_York}", "12) (integer) 1800939600", "2027-01-25T12:00:00Z", "2027-01-25T12:00:01Z", true},
		{`"resets_at":{unix time at end of week}, "x": ~100`, `"resets_at":1801440000, "x": 101`, "2027-01-27T12:00:00Z", "2027-01-27T12:00:01Z", true},
		{`"resets_at":{unix time at end of week}, "x": ~100`, `"resets_at":1801440000, "x": 200`, "2027-01-27T12:00:00Z", "2027-01-27T12:00:01Z", false},
	} {
		w := matchWindow{tol: 50, before: at(tc.before), after: at(tc.after)}
		if ok := lineMatches(tc.want, tc.got, w); ok != tc.ok {
			t.Errorf("lineMatches(%q, %q) at %s…%s = %v, want %v", tc.want, tc.got, tc.before, tc.after, ok, tc.ok)
		}
	}
	// Every calendar placeholder of the docs names a period and a zone
	// that exist.
	for _, file := range docFiles(t) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range regexp.MustCompile(`\{(?:ms to|unix time at) end of [^}]*\}`).FindAllString(string(src), -1) {
			if _, err := parseCalendar(p); err != nil {
				t.Errorf("%s: %v", file, err)
			}
		}
	}
}
