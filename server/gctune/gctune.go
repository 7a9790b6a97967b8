package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Percent returns the GOGC that puts the heap goal at floor bytes for a
// live heap of live bytes, never below base (nor below 1). A live heap
// under 4 MiB counts as 4 MiB: the runtime's goal is never below 4 MiB ×
// GOGC/100 (its minimum heap, scaled), so a GOGC computed for a smaller
// live heap would put the goal above the floor.
func Percent(live, floor uint64, base int) int {
	if base < 0 {
		return base // GOGC=off stays off
	}
	live = max(live, runtimeMinHeap)
	if floor <= live {
		return base
	}
	// goal = live * (1 + p/100) >= floor  ⇔  p >= (floor-live)*100/live
	p := (floor - live) * 100 / live
	if (floor-live)*100%live != 0 {
		p++
	}
	return max(int(min(p, maxPercent)), base, 1)
}

// runtimeMinHeap is the Go runtime's heap minimum at GOGC=100.
const runtimeMinHeap = 4 << 20

// maxPercent bounds GOGC (a floor over a tiny heap would ask for more).
const maxPercent = 100_000

// Tuner adjusts GOGC after each collection until Stop.
type Tuner struct {
	floor uint64
	base  int

	mu      sync.Mutex
	stopped bool
	set     int // the GOGC last set

	runs atomic.Uint64 // tune calls (tests wait on it)
}

// sentinel is allocated for each cycle; its cleanup runs after the
// collection that found it unreachable. Large enough and with a pointer, so
// it is not a tiny allocation batched with others.
type sentinel struct {
	_ *Tuner
	_ [16]byte
}

// Start begins tuning toward a heap goal of at least floor bytes. It
// returns a Tuner that does nothing when floor is 0 or GOGC is off.
func Start(floor uint64) *Tuner {
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	t := &Tuner{floor: floor, base: base, set: base}
	if floor == 0 || base < 0 {
		t.stopped = true
		return t
	}
	t.tune()
	t.arm()
	return t
}

// Base is the GOGC the process had when the tuner started.
func (t *Tuner) Base() int { return t.base }

// Active reports whether the tuner adjusts GOGC (floor set, GOGC not off,
// not stopped).
func (t *Tuner) Active() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.stopped
}

// Stop ends tuning and restores the base GOGC.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	debug.SetGCPercent(t.base)
	t.set = t.base
}

func (t *Tuner) arm() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(t *Tuner) {
		if t.tune() {
			t.arm()
		}
	}, t)
}

// tune sets GOGC for the live heap the last collection measured; it
// reports false once the tuner is stopped. It runs on the runtime's
// cleanup goroutine, right after a collection, so a heap that grew fast
// gets its GOGC lowered before the next goal is far off.
func (t *Tuner) tune() bool {
	defer t.runs.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	var live uint64
	if s[0].Value.Kind() == metrics.KindUint64 {
		live = s[0].Value.Uint64()
	}
	p := Percent(live, t.floor, t.base)
	// SetGCPercent recomputes the goal at once; skip changes under 1/16
	// so a live heap that wobbles does not reset it every cycle.
	if d := p - t.set; d > t.set/16 || -d > t.set/16 {
		debug.SetGCPercent(p)
		t.set = p
	}
	return true
}

// Prefault touches the floor's worth of heap memory once, in the
// background, and returns it to the heap as free memory that the process
// keeps; the returned channel closes when that is done (at once for an
// inactive tuner).
//
// Why: with the floor, a member's heap grows to the floor before its
// first collection, and until then every span it allocates sits on pages
// the process has never touched, so each 4 KiB page costs a page fault on
// first use. On a virtual machine where a fault is expensive (about 21 µs
// measured on the AMD EPYC machines of 2026-12-06), that was 7 faults per
// lock hand-off per member and 5.8% of the members' CPU for the first ten
// seconds or so of load. Paying for them at start, off the request path,
// is what a JVM's AlwaysPreTouch does. It helps only until the process
// has collected twice: from then on the runtime's scavenger returns free
// pages above its own goal (derived from the pages in use), and the heap
// faults them back in at the scavenger's pace, prefaulted or not.
func (t *Tuner) Prefault() <-chan struct{} {
	done := make(chan struct{})
	if !t.Active() {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		// A collection while the block is live may see a heap above the
		// floor and set the base GOGC; the collection after it frees the
		// block, and the tuner raises GOGC again.
		touch(t.floor)
		runtime.GC() // frees the touched block; its pages stay with the heap
	}()
	return done
}

// touch allocates n bytes and writes one byte in each page of them.
func touch(n uint64) {
	b := make([]byte, n)
	for i := 0; i < len(b); i += pageSize {
		b[i] = 1
	}
	runtime.KeepAlive(b)
}

var pageSize = os.Getpagesize()
