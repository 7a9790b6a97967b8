package e2e

import (
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/cluster"
)

// TestServeKeepsTheGCHeapGoalFloor: `tenure serve` starts the heap-goal
// floor (--gc-min-heap-bytes, server/gctune) by default, so a member with a
// few MiB of live heap runs with GOGC raised far above the base 200 that
// cmd/tenure sets; the flag at 0, or GOGC in the environment, leaves GOGC
// alone. Read from the member's own /metrics (go_gc_gogc_percent), so the
// test fails if the process stops starting the tuner, whatever the unit
// tests of the flag and the package say.
func TestServeKeepsTheGCHeapGoalFloor(t *testing.T) {
	if cluster.TargetFromEnv(t) != cluster.Tenure {
		t.Skip("a tenure process setting")
	}
	gogc := func(opts cluster.Options) float64 {
		t.Helper()
		opts.Size = 1
		return memberMetric(t, start(t, opts), 0, "go_gc_gogc_percent")
	}
	// The tuner sets GOGC when it starts, before the member serves, so the
	// first scrape already sees it. A 64 MiB goal over a live heap of a few
	// MiB is GOGC 1,000 or more; 200 is the base.
	if g := gogc(cluster.Options{}); g <= 200 {
		t.Errorf("default flags: GOGC %v; want the floor to raise it above the base 200", g)
	}
	if g := gogc(cluster.Options{ExtraArgs: []string{"--gc-min-heap-bytes=0"}}); g != 200 {
		t.Errorf("--gc-min-heap-bytes=0: GOGC %v; want the base 200 untouched", g)
	}
	if g := gogc(cluster.Options{Env: []string{"GOGC=150"}}); g != 150 {
		t.Errorf("GOGC=150 in the environment: GOGC %v; want the operator's 150", g)
	}
}

// TestServePrefaultsTheGCHeapFloor: with the floor on, `tenure serve`
// touches the floor's heap memory at start and keeps it as free heap
// (gctune.Tuner.Prefault), so the first seconds of load do not pay a page
// fault per new heap page. Free resident heap is what the runtime holds
// idle minus what it returned to the system (go_memstats_heap_idle_bytes −
// go_memstats_heap_released_bytes); a fresh member without the prefault
// holds a few MiB of it.
func TestServePrefaultsTheGCHeapFloor(t *testing.T) {
	if cluster.TargetFromEnv(t) != cluster.Tenure {
		t.Skip("a tenure process setting")
	}
	const floor = 64 << 20 // --gc-min-heap-bytes' default
	freeResident := func(c *cluster.Cluster) float64 {
		m := scrape(t, c.DirectEndpoint(0)+"/metrics")
		idle, ok1 := m["go_memstats_heap_idle_bytes"]
		released, ok2 := m["go_memstats_heap_released_bytes"]
		if !ok1 || !ok2 {
			t.Fatal("go_memstats_heap_idle_bytes or go_memstats_heap_released_bytes missing from /metrics")
		}
		return idle - released
	}
	// Polled sparingly and briefly: each scrape allocates about 100 KiB in
	// the member, and a member without the prefault, scraped every 20 ms,
	// reached 48 MiB of free heap after 12 s this way (its first
	// collection freed what the scrapes had allocated). The prefault itself
	// takes well under a second (354 ms on the slowest machine seen).
	c := start(t, cluster.Options{Size: 1})
	deadline := time.Now().Add(5 * time.Second)
	for {
		f := freeResident(c)
		if f >= floor*3/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%.0f MiB of free resident heap 5 s after start; want at least %d MiB (the default floor prefaulted)", f/(1<<20), floor*3/4>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	off := start(t, cluster.Options{Size: 1, ExtraArgs: []string{"--gc-min-heap-bytes=0"}})
	if f := freeResident(off); f >= floor/2 {
		t.Errorf("--gc-min-heap-bytes=0: %.0f MiB of free resident heap; the check above could not tell a prefault apart", f/(1<<20))
	}
}
