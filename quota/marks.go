package quota

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Marks is a node's durable record of what each of its lives may have
// spent of the quota units granted to it: a file in its data directory
// that a life appends a spend mark to (and fsyncs) before it admits past
// the previous one. A restarted node reads it to give back to the cluster
// what its previous lives held and cannot have spent (QuotaReturn).
//
// Each line is a JSON object: {"life":origin} when a life begins (before
// it asks for any units), or {"o":origin,"m":item} where item's Key and
// Start name a counter's period and its Used is the mark. A torn last line
// (a crash while writing) is skipped: it was never synced, so nothing was
// admitted on it.
type Marks struct {
	path string

	mu    sync.Mutex
	f     *os.File
	lines int
	// kept is the lines the last rewrite kept: the file is rewritten
	// again once it has doubled (or passed compactLines).
	kept int
}

// Life is what a node life recorded: its origin and its last mark of
// each counter's period.
type Life struct {
	Origin string
	Marks  []Item
}

type markLine struct {
	Life   string `json:"life,omitempty"`
	Origin string `json:"o,omitempty"`
	Mark   *Item  `json:"m,omitempty"`
}

// MarksFile is the name of the file in a node's data directory.
const MarksFile = "quota-marks.jsonl"

// compactLines is how many lines the file may grow to before it is
// rewritten with only the marks that still matter (or twice the lines
// the last rewrite kept, if more).
const compactLines = 20000

// OpenMarks opens (or creates) the marks file in dir and returns the lives
// it records. A file it cannot read whole yields no lives and an error
// alongside a usable Marks: nothing is given back by a partial record.
func OpenMarks(dir string) (*Marks, []Life, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	m := &Marks{path: filepath.Join(dir, MarksFile)}
	lives, lines, readErr := readMarks(m.path)
	if readErr != nil {
		// The lives recorded are not returned (their units count as
		// spent until their periods end); the file is set aside, and
		// this life's marks start a new one that the next can read.
		lives, lines = nil, 0
		if err := os.Rename(m.path, m.path+".unreadable"); err != nil {
			return nil, nil, err
		}
	}
	f, err := os.OpenFile(m.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	m.f, m.lines = f, lines
	return m, lives, readErr
}

// readMarks parses the file at path (none: no lives).
func readMarks(path string) ([]Life, int, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	type lk struct {
		key   Key
		start int64
	}
	var order []string
	marks := map[string]map[lk]Item{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		var l markLine
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue // a torn write: never synced, never relied on
		}
		o := l.Life
		if o == "" {
			o = l.Origin
		}
		if o == "" {
			continue
		}
		lm, ok := marks[o]
		if !ok {
			lm = map[lk]Item{}
			marks[o] = lm
			order = append(order, o)
		}
		if l.Mark != nil {
			k := lk{l.Mark.Key, l.Mark.Start}
			if cur, ok := lm[k]; !ok || l.Mark.Used > cur.Used {
				lm[k] = *l.Mark
			}
		}
	}
	if err := sc.Err(); err != nil {
		// Marks past this point are unknown: returning grants by the
		// marks read so far could give back units that were spent.
		return nil, 0, fmt.Errorf("reading %s: %w", path, err)
	}
	lives := make([]Life, 0, len(order))
	for _, o := range order {
		l := Life{Origin: o}
		for _, it := range marks[o] {
			l.Marks = append(l.Marks, it)
		}
		lives = append(lives, l)
	}
	return lives, n, nil
}

// Begin records that life origin begins; call it before it asks for units.
func (m *Marks) Begin(origin string) error {
	return m.append([]markLine{{Life: origin}})
}

// Write records marks of life origin (each item's Key, Start and Used)
// and syncs them to disk.
func (m *Marks) Write(origin string, marks []Item) error {
	lines := make([]markLine, len(marks))
	for i := range marks {
		lines[i] = markLine{Origin: origin, Mark: &marks[i]}
	}
	return m.append(lines)
}

func (m *Marks) append(lines []markLine) error {
	var buf []byte
	for _, l := range lines {
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		buf = append(append(buf, b...), '\n')
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return errors.New("quota marks file closed")
	}
	if _, err := m.f.Write(buf); err != nil {
		return err
	}
	if err := m.f.Sync(); err != nil {
		return err
	}
	m.lines += len(lines)
	return nil
}

// Crowded reports whether the file has grown enough to be rewritten.
func (m *Marks) Crowded() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lines > max(compactLines, 2*m.kept)
}

// Rewrite replaces the file with the given lives (each with the marks
// that still matter), atomically: a crash leaves the old file or the new.
func (m *Marks) Rewrite(lives []Life) error {
	var buf []byte
	n := 0
	for _, l := range lives {
		ls := []markLine{{Life: l.Origin}}
		for i := range l.Marks {
			ls = append(ls, markLine{Origin: l.Origin, Mark: &l.Marks[i]})
		}
		for _, x := range ls {
			b, err := json.Marshal(x)
			if err != nil {
				return err
			}
			buf = append(append(buf, b...), '\n')
			n++
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return errors.New("quota marks file closed")
	}
	tmp := m.path + ".tmp"
	if err := writeSynced(tmp, buf); err != nil {
		return err
	}
	if err := os.Rename(tmp, m.path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(m.path)); err == nil {
		d.Sync()
		d.Close()
	}
	f, err := os.OpenFile(m.path, os.O_WRONLY|os.O_APPEND, 0o644)
	m.f.Close()
	m.f, m.lines, m.kept = f, n, n
	if err != nil {
		// Marks cannot be written any more: calls wait for marks that do
		// not come and are refused (the units count as spent).
		m.f = nil
		return fmt.Errorf("reopening %s: %w", m.path, err)
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Close closes the file.
func (m *Marks) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return nil
	}
	err := m.f.Close()
	m.f = nil
	return err
}
