package envoyrls

import (
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// StatsdOptions send envoyproxy/ratelimit's stats to a statsd server as
// the peer's gostats sink does (USE_STATSD, STATSD_HOST, STATSD_PORT,
// STATSD_PROTOCOL, STATS_FLUSH_INTERVAL, EXTRA_TAGS): counters folded
// and sent once an interval, `name:value|c` lines, the tags appended to
// every name as `.__key=value`, sorted by key.
type StatsdOptions struct {
	Addr     string            // host:port
	Protocol string            // udp or tcp (gostats' default)
	Interval time.Duration     // between flushes
	Tags     map[string]string // EXTRA_TAGS
}

// ParseStatsdTags reads EXTRA_TAGS' form, key:value pairs separated by
// commas (the peer's envconfig map).
func ParseStatsdTags(s string) (map[string]string, error) {
	tags := map[string]string{}
	if s == "" {
		return tags, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || k == "" {
			return nil, &tagError{kv}
		}
		tags[k] = v
	}
	return tags, nil
}

type tagError struct{ pair string }

func (e *tagError) Error() string {
	return "tag " + strconv.Quote(e.pair) + ": must be key:value"
}

// statsdTags serializes tags as gostats does: pairs with an empty key or
// value dropped, sorted by key, '.', ':' and '|' in values as '_'.
func statsdTags(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(".__" + k + "=" + strings.Map(func(r rune) rune {
			if r == '.' || r == ':' || r == '|' {
				return '_'
			}
			return r
		}, tags[k]))
	}
	return b.String()
}

// statsdCounter is one counter: the hot path adds to it, the flush
// takes what was added since the last one.
type statsdCounter struct {
	name string // with the tags
	n    atomic.Uint64
}

func (c *statsdCounter) add(n uint64) {
	if c != nil {
		c.n.Add(n)
	}
}

// timerSamples is how many values of a timer one interval keeps; past
// it the values sent stand for all with a sample rate (`|@rate`).
const timerSamples = 512

// statsdTimer keeps the first timerSamples values of an interval.
type statsdTimer struct {
	name    string
	next    atomic.Uint64
	samples [timerSamples]atomic.Uint32
}

func (t *statsdTimer) observe(ms uint32) {
	if t == nil {
		return
	}
	if i := t.next.Add(1) - 1; i < timerSamples {
		t.samples[i].Store(ms)
	}
}

// udpPacket is gostats' UDP buffer size: lines are sent in datagrams of
// at most this many bytes, so that none is fragmented.
const udpPacket = 1432

// statsd is the sink: the stats it knows, and the flusher that sends them.
type statsd struct {
	opts StatsdOptions
	tags string
	log  *slog.Logger

	mu       sync.Mutex
	counters []*statsdCounter
	timers   []*statsdTimer

	conn   net.Conn // the flusher's only
	failed bool     // the last send failed (logged once until one succeeds)
	buf    []byte
	stop   chan struct{}
	done   chan struct{}
}

func newStatsd(o StatsdOptions, log *slog.Logger) *statsd {
	if o.Protocol == "" {
		o.Protocol = "tcp"
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if log == nil {
		log = slog.Default()
	}
	return &statsd{opts: o, tags: statsdTags(o.Tags), log: log, stop: make(chan struct{}), done: make(chan struct{})}
}

// counter registers the counter of name (without tags); called once per
// name, off the hot path.
func (s *statsd) counter(name string) *statsdCounter {
	if s == nil {
		return nil
	}
	c := &statsdCounter{name: name + s.tags}
	s.mu.Lock()
	s.counters = append(s.counters, c)
	s.mu.Unlock()
	return c
}

func (s *statsd) timer(name string) *statsdTimer {
	if s == nil {
		return nil
	}
	t := &statsdTimer{name: name + s.tags}
	s.mu.Lock()
	s.timers = append(s.timers, t)
	s.mu.Unlock()
	return t
}

// run flushes every interval until close.
func (s *statsd) run() {
	defer close(s.done)
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.flush()
		case <-s.stop:
			s.flush()
			if s.conn != nil {
				s.conn.Close()
			}
			return
		}
	}
}

func (s *statsd) close() {
	close(s.stop)
	<-s.done
}

// flush sends what the counters and timers gathered since the last
// flush: counters that did not change are not sent, as by gostats.
func (s *statsd) flush() {
	s.mu.Lock()
	counters, timers := s.counters, s.timers
	s.mu.Unlock()
	s.buf = s.buf[:0]
	for _, c := range counters {
		if v := c.n.Swap(0); v != 0 {
			s.line(c.name, v, "|c", 0)
		}
	}
	for _, t := range timers {
		n := t.next.Swap(0)
		k := min(n, timerSamples)
		for i := uint64(0); i < k; i++ {
			rate := 0.0
			if n > k {
				rate = float64(k) / float64(n)
			}
			s.line(t.name, uint64(t.samples[i].Load()), "|ms", rate)
		}
	}
	s.send()
}

// line appends one stat line, sending the datagram first when UDP's
// would grow past udpPacket.
func (s *statsd) line(name string, v uint64, kind string, rate float64) {
	start := len(s.buf)
	s.buf = append(s.buf, name...)
	s.buf = append(s.buf, ':')
	s.buf = strconv.AppendUint(s.buf, v, 10)
	s.buf = append(s.buf, kind...)
	if rate > 0 {
		s.buf = append(s.buf, "|@"...)
		s.buf = strconv.AppendFloat(s.buf, rate, 'f', 6, 64)
	}
	s.buf = append(s.buf, '\n')
	if s.udp() && len(s.buf) > udpPacket && start > 0 {
		l := append([]byte(nil), s.buf[start:]...)
		s.buf = s.buf[:start]
		s.send()
		s.buf = append(s.buf[:0], l...)
	}
}

func (s *statsd) udp() bool { return strings.HasPrefix(s.opts.Protocol, "udp") }

// send writes the buffer to the server, connecting first if need be; a
// failure drops it (the stats of that interval), is logged once until a
// send succeeds, and never blocks longer than a second.
func (s *statsd) send() {
	if len(s.buf) == 0 {
		return
	}
	defer func() { s.buf = s.buf[:0] }()
	if s.conn == nil {
		c, err := net.DialTimeout(s.opts.Protocol, s.opts.Addr, time.Second)
		if err != nil {
			s.fail(err)
			return
		}
		s.conn = c
	}
	s.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := s.conn.Write(s.buf); err != nil {
		s.conn.Close()
		s.conn = nil
		s.fail(err)
		return
	}
	s.failed = false
}

func (s *statsd) fail(err error) {
	if !s.failed {
		s.log.Warn("statsd: stats not sent; retrying at the next flush", "addr", s.opts.Addr, "protocol", s.opts.Protocol, "err", err)
	}
	s.failed = true
}
