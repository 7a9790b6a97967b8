package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/cluster"
)

// TestServeAdaptsGOMAXPROCSToLoad: `tenure serve` runs an idle member on
// one processor (--adaptive-procs, server/procs) within a few seconds of
// start, goes back to all of them for a wide watch fan-out, and keeps every
// processor with the flag off or GOMAXPROCS set in the environment. Read
// from the member's own /metrics (go_sched_gomaxprocs_threads), so the test
// fails if the process stops starting the controller, whatever the unit
// tests say.
func TestServeAdaptsGOMAXPROCSToLoad(t *testing.T) {
	if cluster.TargetFromEnv(t) != cluster.Tenure {
		t.Skip("a tenure process setting")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: GOMAXPROCS is 1 whatever the controller does")
	}
	if os.Getenv("GOMAXPROCS") != "" {
		// The members inherit it, and an operator's GOMAXPROCS turns the
		// controller off (TestStartProcsDefersToGOMAXPROCSInTheEnvironment).
		t.Skip("GOMAXPROCS is set in the environment the members inherit")
	}
	procs := func(c *cluster.Cluster) float64 {
		t.Helper()
		return memberMetric(t, c, 0, "go_sched_gomaxprocs_threads")
	}
	c := start(t, cluster.Options{Size: 1})
	// The controller lowers after two seconds of low load (procs.DefaultLowerWindow).
	waitProcs := func(want float64, within time.Duration, what string) {
		t.Helper()
		eventually(t, within, fmt.Sprintf("GOMAXPROCS %v after %s", want, what), func() error {
			if p := procs(c); p != want {
				return fmt.Errorf("GOMAXPROCS %v", p)
			}
			return nil
		})
	}
	waitProcs(1, 10*time.Second, "an idle member started")

	// A revision for 300 watchers raises it at once (the watch hub's
	// procs.Boost): one put is far too little CPU for a 50 ms tick to do
	// it, and the raise holds for the controller's 2 s window.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := c.Client(0)
	const watchers = 300
	for range watchers {
		wch := cli.Watch(ctx, "wide", clientv3.WithCreatedNotify())
		if r, ok := <-wch; !ok || !r.Created {
			t.Fatalf("watch not created: %v", r.Err())
		}
	}
	waitProcs(1, 10*time.Second, "creating 300 watchers")
	if _, err := cli.Put(ctx, "wide", "x"); err != nil {
		t.Fatal(err)
	}
	waitProcs(float64(runtime.GOMAXPROCS(0)), 1500*time.Millisecond, "a put to a key with 300 watchers")
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
