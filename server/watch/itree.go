package watch

import (
	"bytes"
	"math/rand/v2"
)

// itree is the set of synced range and from-key watchers, indexed so that an
// event's key finds the watchers whose range holds it in O(log n + matches)
// instead of a scan of every range watcher. It is a treap ordered by
// (range start, insertion sequence), each node holding the largest range end
// of its subtree (nil: unbounded, a from-key watcher).
type itree struct {
	root *inode
	n    int
	seq  uint64
}

type inode struct {
	w           *watcher
	seq         uint64
	prio        uint64
	maxEnd      []byte // nil: unbounded
	left, right *inode
}

// endOf is w's exclusive range end, nil when unbounded.
func endOf(w *watcher) []byte {
	if w.fromKey {
		return nil
	}
	return w.end
}

// endAfter reports whether exclusive end e (nil: unbounded) lies beyond key.
func endAfter(e, key []byte) bool { return e == nil || bytes.Compare(key, e) < 0 }

// maxOf returns the larger of two ends (nil is the largest).
func maxOf(a, b []byte) []byte {
	if a == nil || b == nil {
		return nil
	}
	if bytes.Compare(a, b) >= 0 {
		return a
	}
	return b
}

func (n *inode) fix() {
	m := endOf(n.w)
	if n.left != nil {
		m = maxOf(m, n.left.maxEnd)
	}
	if n.right != nil {
		m = maxOf(m, n.right.maxEnd)
	}
	n.maxEnd = m
}

// less reports whether (aKey, aSeq) is ordered before (bKey, bSeq).
func less(aKey []byte, aSeq uint64, bKey []byte, bSeq uint64) bool {
	if c := bytes.Compare(aKey, bKey); c != 0 {
		return c < 0
	}
	return aSeq < bSeq
}

// split splits t into nodes ordered before (key, seq) and the rest.
func split(t *inode, key []byte, seq uint64) (l, r *inode) {
	if t == nil {
		return nil, nil
	}
	if less(t.w.key, t.seq, key, seq) {
		t.right, r = split(t.right, key, seq)
		t.fix()
		return t, r
	}
	l, t.left = split(t.left, key, seq)
	t.fix()
	return l, t
}

// merge joins l and r, every node of l ordered before every node of r.
func merge(l, r *inode) *inode {
	switch {
	case l == nil:
		return r
	case r == nil:
		return l
	case l.prio > r.prio:
		l.right = merge(l.right, r)
		l.fix()
		return l
	default:
		r.left = merge(l, r.left)
		r.fix()
		return r
	}
}

func (t *itree) add(w *watcher) {
	t.seq++
	nd := &inode{w: w, seq: t.seq, prio: rand.Uint64()}
	nd.fix()
	w.tnode = nd
	l, r := split(t.root, w.key, nd.seq)
	t.root = merge(merge(l, nd), r)
	t.n++
}

func (t *itree) remove(w *watcher) {
	nd := w.tnode
	if nd == nil {
		return
	}
	w.tnode = nil
	t.root = t.removeFrom(t.root, nd)
	t.n--
}

func (t *itree) removeFrom(cur, nd *inode) *inode {
	if cur == nd {
		return merge(cur.left, cur.right)
	}
	if less(nd.w.key, nd.seq, cur.w.key, cur.seq) {
		cur.left = t.removeFrom(cur.left, nd)
	} else {
		cur.right = t.removeFrom(cur.right, nd)
	}
	cur.fix()
	return cur
}

// stab calls fn for every watcher whose range holds key.
func (t *itree) stab(key []byte, fn func(*watcher)) { stab(t.root, key, fn) }

func stab(n *inode, key []byte, fn func(*watcher)) {
	for n != nil && endAfter(n.maxEnd, key) {
		stab(n.left, key, fn)
		if bytes.Compare(n.w.key, key) > 0 {
			return // this node and everything to its right start after key
		}
		if endAfter(endOf(n.w), key) {
			fn(n.w)
		}
		n = n.right
	}
}

// all appends every watcher in the tree to ws.
func (t *itree) all(ws []*watcher) []*watcher {
	var walk func(*inode)
	walk = func(n *inode) {
		if n == nil {
			return
		}
		walk(n.left)
		ws = append(ws, n.w)
		walk(n.right)
	}
	walk(t.root)
	return ws
}
