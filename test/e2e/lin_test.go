package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/lincheck"
)

func TestLinearizableUnderLeaderKill(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 120*time.Second)
	const (
		clients = 8
		target  = 1200
	)
	keys := []string{"/lin/a", "/lin/b", "/lin/c"}
	rec := lincheck.NewRecorder()
	var done atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	for id := 0; id < clients; id++ {
		cli := c.NewClient(c.Endpoint(id % len(c.Members)))
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(id)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			lastSeen := map[string]string{}
			for n := 0; runCtx.Err() == nil; n++ {
				key := keys[rng.IntN(len(keys))]
				val := fmt.Sprintf("c%d-%d", id, n)
				var in lincheck.Input
				switch p := rng.IntN(10); {
				case p < 4:
					in = lincheck.Input{Kind: lincheck.OpPut, Key: key, Value: val}
				case p < 8:
					in = lincheck.Input{Kind: lincheck.OpGet, Key: key}
				default:
					in = lincheck.Input{Kind: lincheck.OpCAS, Key: key, Expect: lastSeen[key], Value: val}
				}
				opCtx, cancel := context.WithTimeout(runCtx, time.Second)
				call := rec.Now()
				out, err := lincheck.Run(opCtx, cli, in)
				if err == nil && in.Kind == lincheck.OpGet {
					lastSeen[key] = out.Value
				}
				cancel()
				if err != nil {
					rec.RecordUnknown(id, in, call)
				} else {
					rec.Record(id, in, call, out)
				}
				if done.Add(1) >= target {
					return
				}
			}
		}()
	}
	waitOps := func(n int64) {
		eventually(t, 60*time.Second, fmt.Sprintf("%d operations", n), func() error {
			if d := done.Load(); d < n {
				return fmt.Errorf("%d done", d)
			}
			return nil
		})
	}
	waitOps(target / 3)
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(leader)
	t.Logf("killed leader %d after %d operations", leader, done.Load())
	waitOps(target / 2)
	c.Restart(leader)
	t.Logf("restarted member %d after %d operations", leader, done.Load())
	if err := c.WaitMemberReady(ctx, leader); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	h := rec.History()
	unknown := 0
	for _, op := range h {
		if op.Output.(lincheck.Output).Unknown {
			unknown++
		}
	}
	t.Logf("%d operations recorded (%d with unknown outcome)", len(h), unknown)
	if len(h) < 1000 {
		t.Errorf("only %d operations recorded, want >= 1000", len(h))
	}
	lincheck.CheckT(t, h, 60*time.Second)
}
