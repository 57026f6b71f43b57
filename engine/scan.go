package engine

// Scan visits the store's buckets from cursor on, at most count entries,
// and returns the cursor to continue from (0 once every shard has been
// visited), as Redis's SCAN does. f gets each live bucket's space, key
// (valid only during the call) and algorithm, under its shard's lock.
//
// The cursor is a shard number and an entry number within the shard.
// Entries do not move while they live (deletes and rehashes move index
// slots, not entries), so a bucket that lives throughout a scan is
// visited exactly once; one created or forgotten meanwhile may or may not
// be.
func (s *Store) Scan(cursor uint64, count int, f func(space Space, key []byte, algo Algo)) uint64 {
	shard, pos := cursor>>32, uint32(cursor)
	for shard < uint64(len(s.shards)) {
		sh := &s.shards[shard]
		sh.mu.Lock()
		for ; pos < sh.used && count > 0; pos++ {
			if sh.isLive(pos) {
				// Leases of other members' buckets are not buckets of
				// this node's own: SCAN lists buckets.
				if e := sh.entry(pos); e.space&leaseBit == 0 {
					f(e.space, sh.key(e), sh.limits[e.lim].lim.Algo)
				}
				count--
			}
		}
		done := pos >= sh.used
		sh.mu.Unlock()
		if !done {
			break
		}
		shard, pos = shard+1, 0
	}
	if shard >= uint64(len(s.shards)) {
		return 0
	}
	return shard<<32 | uint64(pos)
}

// isLive reports whether entry i holds a bucket: its number is in the
// index, along the probe run from its home slot. A free entry's number is
// nowhere in the index, and the index always has an empty slot.
func (sh *shard) isLive(i uint32) bool {
	e := sh.entry(i)
	mask := uint32(len(sh.index) - 1)
	for pos := e.hlo & mask; ; pos = (pos + 1) & mask {
		v := sh.index[pos]
		if v == 0 {
			return false
		}
		if v&0xffffff == i+1 {
			return true
		}
	}
}

// Inspect returns the algorithm of key's bucket and the time at which it
// is full again (after which forgetting it loses nothing), or ok=false if
// there is no bucket.
func (s *Store) Inspect(space Space, key []byte) (algo Algo, idle int64, ok bool) {
	sh, _, i, ok := s.lookup(space, key)
	defer sh.mu.Unlock()
	if !ok {
		return 0, 0, false
	}
	e := sh.entry(i)
	l := &sh.limits[e.lim].lim
	return l.Algo, idleAt(l, e.st), true
}
