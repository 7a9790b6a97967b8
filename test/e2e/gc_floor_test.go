package e2e

import (
	"testing"

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
		c := start(t, opts)
		v, ok := scrape(t, c.DirectEndpoint(0)+"/metrics")["go_gc_gogc_percent"]
		if !ok {
			t.Fatal("go_gc_gogc_percent missing from /metrics")
		}
		return v
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
