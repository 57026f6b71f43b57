package quota

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/fault"
)

// PeriodKind is the length of a calendar quota's period.
type PeriodKind uint8

// PeriodNames are the kinds of period, in the order of PeriodKind.
var PeriodNames = []string{"hour", "day", "week", "month", "year"}

// Period kinds, in the order of PeriodNames.
const (
	Hour PeriodKind = iota
	Day
	Week
	Month
	Year
)

// Period is a calendar period in a time zone: the periods of a quota
// start at the boundaries of the zone's wall clock (a week on Monday
// 00:00, a month on the 1st), so a month is a calendar month and a day
// follows daylight saving time.
type Period struct {
	Kind PeriodKind
	zone uint32 // index in the zone registry
}

// ParsePeriod parses a period name (hour, day, week, month, year, any
// case) and an IANA time zone name ("" means UTC).
func ParsePeriod(name, zone string) (Period, error) {
	p := Period{}
	found := false
	for i, n := range PeriodNames {
		if strings.EqualFold(name, n) {
			p.Kind, found = PeriodKind(i), true
		}
	}
	if !found {
		return p, errf("quota period must be one of hour, day, week, month, year")
	}
	z, err := zoneIndex(zone)
	if err != nil {
		return p, err
	}
	p.zone = z
	return p, nil
}

// String returns the period's name.
func (p Period) String() string { return PeriodNames[p.Kind] }

// Zone returns the period's time zone name.
func (p Period) Zone() string { return zones.list.Load().names[p.zone] }

// Code packs the period into one positive integer, valid in this process
// only: the engine keeps it in a quota counter's limit, so that counters
// of different periods are different limits, and hands it back with the
// pending counts (PeriodOfCode). Between processes a period travels as
// text (MarshalText).
func (p Period) Code() int64 { return int64(p.zone)<<3 | int64(p.Kind) + 1 }

// PeriodOfCode is the inverse of Code.
func PeriodOfCode(c int64) (Period, bool) {
	c--
	kind, zone := PeriodKind(c&7), uint32(c>>3)
	n := len(zones.list.Load().names)
	if c < 0 || kind > Year || int(zone) >= n {
		return Period{}, false
	}
	return Period{Kind: kind, zone: zone}, true
}

// MarshalText writes the period as "kind zone" ("month UTC"), the form in
// which it travels between nodes.
func (p Period) MarshalText() ([]byte, error) { return []byte(p.String() + " " + p.Zone()), nil }

// UnmarshalText reads what MarshalText writes.
func (p *Period) UnmarshalText(b []byte) error {
	name, zone, _ := strings.Cut(string(b), " ")
	q, err := ParsePeriod(name, zone)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// lastBounds caches the last period computed for each period code: calls
// mostly fall in the same period as the one before.
var lastBounds [4096]atomic.Pointer[[2]int64]

// Bounds returns the period holding now (Unix ns): [start, end).
func (p Period) Bounds(now int64) (start, end int64) {
	c := p.Code()
	if c < int64(len(lastBounds)) {
		if b := lastBounds[c].Load(); b != nil && b[0] <= now && now < b[1] {
			return b[0], b[1]
		}
	}
	start, end = p.bounds(now)
	if c < int64(len(lastBounds)) {
		lastBounds[c].Store(&[2]int64{start, end})
	}
	return start, end
}

func (p Period) bounds(now int64) (start, end int64) {
	loc := zones.list.Load().locs[p.zone]
	t := time.Unix(0, now).In(loc)
	y, m, d := t.Date()
	var s, e time.Time
	switch p.Kind {
	case Hour:
		// From the start of the wall-clock hour, counted back from now so
		// that an hour repeated when clocks go back is two periods.
		into := int64(t.Minute())*int64(time.Minute) + int64(t.Second())*int64(time.Second) + int64(t.Nanosecond())
		return now - into, now - into + int64(time.Hour)
	case Day:
		s, e = time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		s, e = time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case Month:
		s, e = time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default:
		s, e = time.Date(y, 1, 1, 0, 0, 0, 0, loc), time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)
	}
	start, end = s.UnixNano(), e.UnixNano()
	// Where midnight does not exist (a zone that moves its clocks at
	// 00:00), time.Date normalises forward; the period still holds now.
	start = min(start, now)
	if end <= now {
		end = now + 1
	}
	return start, end
}

// zones interns the time zones quotas use. Only names time.LoadLocation
// accepts are kept, so the registry is bounded by the zone database.
// Readers load the current list without locking; additions copy it.
var zones = func() *zoneRegistry {
	z := &zoneRegistry{}
	z.list.Store(&zoneList{index: map[string]uint32{"UTC": 0}, names: []string{"UTC"}, locs: []*time.Location{time.UTC}})
	return z
}()

type zoneRegistry struct {
	mu   sync.Mutex // serialises additions
	list atomic.Pointer[zoneList]
	// bad remembers names the zone database does not have, so that a
	// client repeating one costs a map lookup, not a file search; it is
	// cleared when full.
	badMu sync.Mutex
	bad   map[string]struct{}
}

const maxRefusedZones = 1024

func (z *zoneRegistry) refused(name string) bool {
	z.badMu.Lock()
	defer z.badMu.Unlock()
	_, ok := z.bad[name]
	return ok
}

func (z *zoneRegistry) refuse(name string) {
	z.badMu.Lock()
	defer z.badMu.Unlock()
	if z.bad == nil || len(z.bad) >= maxRefusedZones {
		z.bad = map[string]struct{}{}
	}
	z.bad[name] = struct{}{}
}

// zoneName reports whether name is spelt like a zone of the database:
// segments of letters, digits, '_', '-' and '+' joined by '/', each
// starting with a capital letter or (after the first) a digit, at most 64
// bytes.
func zoneName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i, seg := range strings.Split(name, "/") {
		if seg == "" || !(seg[0] >= 'A' && seg[0] <= 'Z' || i > 0 && seg[0] >= '0' && seg[0] <= '9') {
			return false
		}
		for _, c := range []byte(seg) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '+') {
				return false
			}
		}
	}
	return true
}

type zoneList struct {
	index map[string]uint32
	names []string
	locs  []*time.Location
}

func errf(format string, a ...any) error { return fault.New("ERR", format, a...) }

func zoneIndex(name string) (uint32, error) {
	if name == "" {
		name = "UTC"
	}
	if i, ok := zones.list.Load().index[name]; ok {
		return i, nil
	}
	bad := errf("quota time zone '%s' is not an IANA time zone name such as UTC, Europe/Paris or America/New_York", fault.Printable([]byte(name)))
	// Only names spelt as the zone database spells them: "Local",
	// "localtime" or "./UTC" would resolve differently from machine to
	// machine, or not at all on one without a zone database.
	if !zoneName(name) || name == "Local" {
		return 0, bad
	}
	if zones.refused(name) {
		return 0, bad
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		zones.refuse(name)
		return 0, bad
	}
	zones.mu.Lock()
	defer zones.mu.Unlock()
	cur := zones.list.Load()
	if i, ok := cur.index[name]; ok {
		return i, nil
	}
	next := &zoneList{index: make(map[string]uint32, len(cur.index)+1),
		names: append(cur.names[:len(cur.names):len(cur.names)], name),
		locs:  append(cur.locs[:len(cur.locs):len(cur.locs)], loc)}
	for k, v := range cur.index {
		next.index[k] = v
	}
	i := uint32(len(cur.names))
	next.index[name] = i
	zones.list.Store(next)
	return i, nil
}
