package keyspace

// A list lives in an array with room before and after it (value.lbuf):
// a push at the head takes a slot of the room before, at the tail one of
// the room after, and a trim or a pop gives slots back, so each costs
// what it adds or removes — a moving window's LPUSH and LTRIM cost the
// same for 10 entries as for 100,000. When a push finds no room at its
// end the list moves to an array three times its size, room on both
// sides (amortised O(1) a push); when a list has shrunk to a twelfth of its
// array it moves to a smaller one, so that its array stays within a few
// times its length.

// minRoom is the least room a list's new array has on each side.
const minRoom = 4

// push adds add (head first) at the list's head or at its tail, charging
// its bytes; the returned function takes it back out again (a write the
// bounds refused).
func (v *value) push(head bool, add [][]byte) (undo func()) {
	buf, h, list, bytes := v.lbuf, v.lhead, v.list, v.listBytes
	n := len(v.list)
	if head && v.lhead < len(add) || !head && v.lhead+n+len(add) > len(v.lbuf) {
		v.move(n + len(add))
	}
	if head {
		v.lhead -= len(add)
		copy(v.lbuf[v.lhead:], add)
	} else {
		copy(v.lbuf[v.lhead+n:], add)
	}
	v.list = v.lbuf[v.lhead : v.lhead+n+len(add)]
	for _, x := range add {
		v.listBytes += int64(len(x) + fieldOverhead)
	}
	return func() {
		if len(v.lbuf) > 0 && len(buf) > 0 && &v.lbuf[0] == &buf[0] {
			// The same array: the slots the push took go back to room.
			if head {
				clear(v.lbuf[v.lhead:h])
			} else {
				clear(v.lbuf[h+n : h+n+len(add)])
			}
		}
		v.lbuf, v.lhead, v.list, v.listBytes = buf, h, list, bytes
	}
}

// move puts the list in a new array of three times size (at least
// minRoom) slots, ending at the end of the middle third: a push of up to
// size-len(list) elements fits at the head, of up to size at the tail.
func (v *value) move(size int) {
	size = max(size, minRoom)
	buf := make([][]byte, 3*size)
	v.lbuf, v.lhead = buf, 2*size-len(v.list)
	copy(buf[v.lhead:], v.list)
	v.list = buf[v.lhead : v.lhead+len(v.list)]
}

// cut keeps the elements lo to hi (indexes into the list, inclusive,
// within it) and gives the others' slots and bytes back.
func (v *value) cut(lo, hi int) {
	for _, x := range v.list[:lo] {
		v.listBytes -= int64(len(x) + fieldOverhead)
	}
	for _, x := range v.list[hi+1:] {
		v.listBytes -= int64(len(x) + fieldOverhead)
	}
	clear(v.list[:lo])
	clear(v.list[hi+1:])
	v.lhead += lo
	v.list = v.lbuf[v.lhead : v.lhead+hi+1-lo]
	if len(v.lbuf) > 12*minRoom && len(v.list)*12 < len(v.lbuf) {
		v.move(len(v.list))
	}
}
