package watch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func randKey(r *rand.Rand) []byte {
	k := make([]byte, r.IntN(4))
	for i := range k {
		k[i] = "\x00ab\xff"[r.IntN(4)]
	}
	return k
}

// randRangeWatcher returns a range ([key, end), key < end) or from-key
// watcher over a small alphabet, so ranges overlap, nest and share starts.
func randRangeWatcher(r *rand.Rand, id int64) *watcher {
	for {
		w := &watcher{id: id, key: randKey(r)}
		if r.IntN(5) == 0 {
			w.end, w.fromKey = []byte{0}, true
			return w
		}
		w.end = randKey(r)
		if bytes.Compare(w.key, w.end) < 0 {
			return w
		}
	}
}

// checkTree verifies the treap's order, heap and maxEnd invariants.
func checkTree(t *testing.T, tr *itree) {
	t.Helper()
	var walk func(n *inode) (count int)
	walk = func(n *inode) int {
		if n == nil {
			return 0
		}
		want := endOf(n.w)
		for _, c := range []*inode{n.left, n.right} {
			if c == nil {
				continue
			}
			if c.prio > n.prio {
				t.Fatalf("heap order broken")
			}
			want = maxOf(want, c.maxEnd)
		}
		if (want == nil) != (n.maxEnd == nil) || !bytes.Equal(want, n.maxEnd) {
			t.Fatalf("maxEnd %q, want %q", n.maxEnd, want)
		}
		if n.left != nil && !less(n.left.w.key, n.left.seq, n.w.key, n.seq) {
			t.Fatalf("left child out of order")
		}
		if n.right != nil && !less(n.w.key, n.seq, n.right.w.key, n.right.seq) {
			t.Fatalf("right child out of order")
		}
		return 1 + walk(n.left) + walk(n.right)
	}
	if c := walk(tr.root); c != tr.n {
		t.Fatalf("tree holds %d nodes, n = %d", c, tr.n)
	}
}

// TestITreeMatchesBruteForce: random adds, removes and lookups give exactly
// the watchers a scan with watcher.matches finds.
func TestITreeMatchesBruteForce(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		var tr itree
		var live []*watcher
		for step := range 3000 {
			switch op := r.IntN(10); {
			case op < 4 || len(live) == 0:
				w := randRangeWatcher(r, int64(step))
				tr.add(w)
				live = append(live, w)
			case op < 6:
				i := r.IntN(len(live))
				tr.remove(live[i])
				live = slices.Delete(live, i, i+1)
			default:
				key := randKey(r)
				var got, want []int64
				tr.stab(key, func(w *watcher) { got = append(got, w.id) })
				for _, w := range live {
					if w.matches(key) {
						want = append(want, w.id)
					}
				}
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d key %q: got %v, want %v", seed, step, key, got, want)
				}
			}
			if step%100 == 0 {
				checkTree(t, &tr)
			}
		}
		checkTree(t, &tr)
		all := tr.all(nil)
		if len(all) != len(live) {
			t.Fatalf("all() has %d watchers, want %d", len(all), len(live))
		}
		for _, w := range live {
			tr.remove(w)
			tr.remove(w) // a second remove is a no-op
		}
		if tr.root != nil || tr.n != 0 {
			t.Fatalf("tree not empty after removing everything")
		}
	}
}

// TestRangeWatchersThroughHub: range watchers added, moved to catch-up and
// back, and canceled keep receiving exactly the events in their ranges.
func TestRangeWatchersThroughHub(t *testing.T) {
	src := newFakeSource()
	h := NewHub(src, HubConfig{ChanSize: 2}, testLogger(t))
	defer h.Close()
	st := newTestStream(h)
	ranges := [][2]string{{"a", "c"}, {"b", "\x00"}, {"b", "b\x00"}, {"a", "z"}, {"c", "d"}}
	for _, rg := range ranges {
		h.create(st, createReq(rg[0], rg[1], 0))
	}
	drain(h, st)
	keys := []string{"a", "b", "c", "x", "\xff"}
	want := map[int64][]string{}
	for i := range 12 {
		k := keys[i%len(keys)]
		write(src, h, put(k, "v"))
		for id, rg := range ranges {
			w := &watcher{key: []byte(rg[0]), end: []byte(rg[1]), fromKey: rg[1] == "\x00"}
			if id != 4 && w.matches([]byte(k)) {
				want[int64(id)] = append(want[int64(id)], fmt.Sprintf("%d:%s", i+1, k))
			}
		}
		if i == 3 {
			h.cancel(st, 4) // canceled: what it gets is not checked
		}
	}
	got := map[int64][]string{}
	defer func() {
		if t.Failed() {
			t.Logf("got %v want %v", got, want)
		}
	}()
	eventually(t, "every range watcher's events", func() bool {
		for _, r := range drain(h, st) {
			for _, e := range r.Events {
				got[r.WatchId] = append(got[r.WatchId], fmt.Sprintf("%d:%s", e.Kv.ModRevision, e.Kv.Key))
			}
		}
		for id, evs := range want {
			if len(got[id]) < len(evs) {
				return false
			}
		}
		return true
	})
	for id, evs := range want {
		if fmt.Sprint(got[id]) != fmt.Sprint(evs) {
			t.Fatalf("watcher %d got %v, want %v", id, got[id], evs)
		}
	}
	if w, slow := h.Stats(); w != 4 || slow != 0 {
		t.Fatalf("stats %d watchers, %d slow", w, slow)
	}
}

// BenchmarkNotifyRangeWatchers: one event against 10,000 synced prefix
// watchers on distinct prefixes, of which one matches.
func BenchmarkNotifyRangeWatchers(b *testing.B) {
	src := newFakeSource()
	h := NewHub(src, HubConfig{ChanSize: 1 << 20}, testLogger(b))
	defer h.Close()
	st := newTestStream(h)
	for i := range 10000 {
		p := fmt.Sprintf("p%05d/", i)
		h.create(st, createReq(p, p[:len(p)-1]+"0", 0))
	}
	drain(h, st)
	_, evs := src.apply(put("p00042/x", "v"))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%1024 == 1023 {
			b.StopTimer()
			drain(h, st)
			b.StartTimer()
		}
		h.Notify(int64(i+1), evs)
	}
}
