package budget

import (
	"fmt"
	"hash/crc32"
	"math/rand"
	"sort"
	"testing"
)

// TestHAMTMatchesMap drives the trie with random sets and deletes, under
// a real hash and under one with six values (so that keys collide in every
// bit and fall to the collision lists), in single changes and in batches
// sharing one token, and checks every version against a map — the old ones
// too, after the later changes.
func TestHAMTMatchesMap(t *testing.T) {
	for name, hash := range map[string]func(string) uint64{
		"maphash":    hashString,
		"collisions": func(k string) uint64 { return uint64(crc32.ChecksumIEEE([]byte(k)) % 6) },
	} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(2))
			type version struct {
				root *hnode
				want map[string]int
			}
			var versions []version
			var root *hnode
			want := map[string]int{}
			var tok *token
			for i := 0; i < 4000; i++ {
				if rng.Intn(8) == 0 || tok == nil {
					versions = append(versions, version{root, clone(want)})
					tok = new(token) // a new edit: what came before is published
				}
				k := fmt.Sprintf("k%d", rng.Intn(300))
				if rng.Intn(3) == 0 {
					var removed bool
					root, removed = hdel(tok, root, 0, hash(k), k)
					if _, had := want[k]; had != removed {
						t.Fatalf("op %d: delete %s reported %v", i, k, removed)
					}
					delete(want, k)
				} else {
					var added bool
					root, added = hset(tok, root, 0, hash(k), k, entry{node: &Node{Version: uint64(i)}})
					if _, had := want[k]; had == added {
						t.Fatalf("op %d: set %s reported added=%v", i, k, added)
					}
					want[k] = i
				}
			}
			versions = append(versions, version{root, want})
			for vi, v := range versions {
				got := 0
				v.root.each(func(*entry) { got++ })
				if got != len(v.want) {
					t.Fatalf("version %d: %d entries, want %d", vi, got, len(v.want))
				}
				for k := 0; k < 300; k++ {
					key := fmt.Sprintf("k%d", k)
					e := find(v.root, hash(key), key)
					bv := find(v.root, hash(key), []byte(key))
					w, ok := v.want[key]
					if ok != (e != nil) || e != bv || ok && e.node.Version != uint64(w) {
						t.Fatalf("version %d: %s found %v, want %v (%d)", vi, key, e, ok, w)
					}
				}
			}
		})
	}
}

func clone(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestTreapMatchesSortedSet does the same for the treap: order, counts,
// ascend from any key, ceil, and the old versions.
func TestTreapMatchesSortedSet(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	type version struct {
		root *tnode
		want map[string]int
	}
	var versions []version
	var root *tnode
	want := map[string]int{}
	var tok *token
	for i := 0; i < 4000; i++ {
		if rng.Intn(8) == 0 || tok == nil {
			versions = append(versions, version{root, clone(want)})
			tok = new(token)
		}
		k := fmt.Sprintf("%x", rng.Intn(400))
		if rng.Intn(3) == 0 {
			root = tdel(tok, root, k)
			delete(want, k)
		} else {
			root = tset(tok, root, k, hashString(k), i)
			want[k] = i
		}
	}
	versions = append(versions, version{root, want})
	for vi, v := range versions {
		keys := make([]string, 0, len(v.want))
		for k := range v.want {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, from := range []string{"", "1", "7f", "a", "ff", "zz"} {
			var got []string
			v.root.ascend(from, func(n *tnode) bool {
				if n.n != v.want[n.key] {
					t.Fatalf("version %d: %s counts %d, want %d", vi, n.key, n.n, v.want[n.key])
				}
				got = append(got, n.key)
				return true
			})
			i := sort.SearchStrings(keys, from)
			if fmt.Sprint(got) != fmt.Sprint(keys[i:]) {
				t.Fatalf("version %d: ascend(%q) = %v, want %v", vi, from, got, keys[i:])
			}
			c, ok := v.root.ceil(from)
			if ok != (i < len(keys)) || ok && c != keys[i] {
				t.Fatalf("version %d: ceil(%q) = %q %v", vi, from, c, ok)
			}
		}
		for _, k := range keys {
			if tget(v.root, k) == nil {
				t.Fatalf("version %d: %s missing", vi, k)
			}
		}
	}
}
