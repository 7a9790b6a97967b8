package suite

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

var sink [][]byte

// pauseGC turns the collector off (up to watchGCLimit) until restored: 64
// MiB of garbage allocated meanwhile triggers no collection, and restore
// brings back the previous GC percent and memory limit.
func TestPauseGCHoldsTheCollectorOffUntilRestored(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))

	restore := pauseGC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 64 {
		sink = append(sink[:0], make([]byte, 1<<20))
	}
	runtime.ReadMemStats(&after)
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Errorf("GC percent %d while paused, want -1 (off)", p)
	}
	if l := debug.SetMemoryLimit(-1); l != watchGCLimit {
		t.Errorf("memory limit %d while paused, want %d", l, int64(watchGCLimit))
	}
	if after.NumGC != before.NumGC {
		t.Errorf("%d collections while paused, want none", after.NumGC-before.NumGC)
	}
	restore()
	if p := debug.SetGCPercent(150); p != 150 {
		t.Errorf("GC percent %d after restore, want 150", p)
	}
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Errorf("memory limit %d after restore, want none (MaxInt64)", l)
	}
	sink = nil
}
