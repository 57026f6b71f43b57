// Package glob matches names against Redis's glob patterns, as KEYS,
// SCAN's MATCH and CONFIG GET read them (Redis's stringmatchlen).
package glob

// Match matches s against a Redis glob pattern: * ? [abc] [^a] [a-z] and
// \ escapes, byte by byte. Unlike path.Match, * also matches '/', which
// budget paths contain. As in Redis, an empty s matches only a pattern
// that is empty (KEYS and SCAN read a pattern of one * as "everything"
// before they match: All). A star backtracks only to the last star, so
// the time is at most the product of the lengths, whatever the pattern.
func Match[S ~string | ~[]byte](p []byte, s S) bool {
	if len(s) == 0 {
		return len(p) == 0
	}
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		if pi < len(p) && p[pi] == '*' {
			for pi < len(p) && p[pi] == '*' {
				pi++
			}
			star, mark = pi, si
			continue
		}
		if pi < len(p) {
			if n, ok := matchOne(p[pi:], s[si]); ok {
				pi += n
				si++
				continue
			}
		}
		if star < 0 {
			return false
		}
		mark++
		pi, si = star, mark
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// All reports whether p is the pattern of every name: a single *, which
// Redis's KEYS and SCAN take to match even an empty name.
func All(p []byte) bool { return len(p) == 1 && p[0] == '*' }

// matchOne matches one byte c against the pattern element at the start of
// p (not a star) and returns the element's length.
func matchOne(p []byte, c byte) (int, bool) {
	switch p[0] {
	case '?':
		return 1, true
	case '\\':
		if len(p) > 1 {
			return 2, p[1] == c
		}
		return 1, c == '\\'
	case '[':
		i := 1
		not := i < len(p) && p[i] == '^'
		if not {
			i++
		}
		matched := false
		for i < len(p) && p[i] != ']' {
			switch {
			case p[i] == '\\' && i+1 < len(p):
				matched = matched || p[i+1] == c
				i += 2
			case i+2 < len(p) && p[i+1] == '-':
				// As in Redis, the range's end may be ']': [a-] is the
				// bytes from ']' to 'a', and the class goes on.
				lo, hi := p[i], p[i+2]
				if lo > hi {
					lo, hi = hi, lo
				}
				matched = matched || lo <= c && c <= hi
				i += 3
			default:
				matched = matched || p[i] == c
				i++
			}
		}
		if i < len(p) {
			i++ // the ']'
		}
		return i, matched != not
	}
	return 1, p[0] == c
}
