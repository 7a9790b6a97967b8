package e2e

import (
	"runtime"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/cluster"
)

// TestServeAdaptsGOMAXPROCSToLoad: `tenure serve` runs an idle member on
// one processor (--adaptive-procs, server/procs) within a few seconds of
// start, and keeps every processor with the flag off or GOMAXPROCS set in
// the environment. Read from the member's own /metrics
// (go_sched_gomaxprocs_threads), so the test fails if the process stops
// starting the controller, whatever the unit tests say.
func TestServeAdaptsGOMAXPROCSToLoad(t *testing.T) {
	if cluster.TargetFromEnv(t) != cluster.Tenure {
		t.Skip("a tenure process setting")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: GOMAXPROCS is 1 whatever the controller does")
	}
	procs := func(c *cluster.Cluster) float64 {
		t.Helper()
		return memberMetric(t, c, 0, "go_sched_gomaxprocs_threads")
	}
	c := start(t, cluster.Options{Size: 1})
	// The controller lowers after two seconds of low load (procs.DefaultLowerWindow).
	deadline := time.Now().Add(10 * time.Second)
	for procs(c) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS %v 10 s after an idle member started; want 1", procs(c))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Off: GOMAXPROCS stays what the runtime chose (the CPUs this process
	// may use) or what the environment says, through more than a window.
	for _, tc := range []struct {
		opts cluster.Options
		want float64
	}{
		{cluster.Options{Size: 1, ExtraArgs: []string{"--adaptive-procs=false"}}, float64(runtime.GOMAXPROCS(0))},
		{cluster.Options{Size: 1, Env: []string{"GOMAXPROCS=2"}}, 2},
	} {
		c := start(t, tc.opts)
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if p := procs(c); p != tc.want {
				t.Fatalf("%v %v: GOMAXPROCS %v while idle; want %v, untouched", tc.opts.ExtraArgs, tc.opts.Env, p, tc.want)
			}
		}
	}
}
