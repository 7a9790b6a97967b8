package main

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leases: clients grant a lease with a key attached, keep it alive for a
// while with KeepAliveOnce (recording, on the monotonic clock, when each
// acknowledged keepalive was sent), then stop and poll the key with
// linearizable reads until it is gone.
//
// Never early: the server counts TTL from its commit of the last renewal,
// which is after the client sent it; so a read that *returned* absent
// before (last acknowledged send + TTL) proves an early revocation.
// Lateness (reported, not judged here: faults make the cluster leaderless
// for a while): first absent read's return − (last acknowledged send + TTL),
// an upper bound that includes the poll interval. The 9395 scenario judges
// the bound on a controlled schedule.
type leases struct {
	r        *run
	seed     uint64
	nclients int

	mu       sync.Mutex
	samples  []leaseSample
	notEnded int
}

type leaseSample struct {
	ID       int64         `json:"id"`
	TTL      int64         `json:"ttl"`
	LastSend time.Duration `json:"last_ack_send"`
	Gone     time.Duration `json:"gone_seen"`
	Late     time.Duration `json:"late"`
	Renewals int           `json:"renewals"`
}

func newLeases(r *run, seed uint64) *leases { return &leases{r: r, seed: seed, nclients: 2} }

func (w *leases) run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := 0; id < w.nclients; id++ {
		cli := w.r.c.NewClient(w.r.c.Endpoints()...)
		rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				w.cycle(ctx, cli, id, rng)
			}
		}()
	}
	wg.Wait()
}

func (w *leases) cycle(ctx context.Context, cli *clientv3.Client, id int, rng *rand.Rand) {
	const ttl = 3
	send := w.r.mono()
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	lr, err := cli.Grant(gctx, ttl)
	cancel()
	w.r.op()
	if err != nil {
		return
	}
	s := leaseSample{ID: int64(lr.ID), TTL: lr.TTL, LastSend: send}
	key := "/lease/" + time.Now().Format("150405.000000") + "-" + string(rune('a'+id))
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cli.Put(pctx, key, "x", clientv3.WithLease(lr.ID))
	cancel()
	w.r.op()
	if err != nil {
		// the put may or may not have happened; revoke and move on
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cli.Revoke(rctx, lr.ID)
		cancel()
		return
	}
	// keep alive for a while
	keepFor := time.Duration(1000+rng.IntN(5000)) * time.Millisecond
	until := w.r.mono() + keepFor
	for w.r.mono() < until && ctx.Err() == nil {
		sleep(time.Duration(lr.TTL) * time.Second / 3)
		ksend := w.r.mono()
		kctx, cancel := context.WithTimeout(ctx, time.Second)
		kr, err := cli.KeepAliveOnce(kctx, lr.ID)
		cancel()
		w.r.op()
		if err == nil && kr.TTL > 0 {
			s.LastSend = ksend
			s.Renewals++
		}
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			break
		}
	}
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cli.Revoke(rctx, lr.ID)
		cancel()
		return
	}
	// stop renewing; wait for the key to go (reads keep going after the run
	// is stopped: ctx only bounds the wait loosely)
	deadline := w.r.mono() + 60*time.Second
	for {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := cli.Get(rctx, key)
		cancel()
		ret := w.r.mono()
		w.r.op()
		if err == nil && len(resp.Kvs) == 0 {
			promised := s.LastSend + time.Duration(s.TTL)*time.Second
			if ret < promised {
				w.r.anomaly("leases: lease %x (TTL %ds) revoked early: its key was gone by %v, but a keepalive sent at %v was acknowledged (expiry no earlier than %v)", lr.ID, s.TTL, ret, s.LastSend, promised)
			}
			s.Gone, s.Late = ret, ret-promised
			break
		}
		if ret > deadline {
			w.mu.Lock()
			w.notEnded++
			w.mu.Unlock()
			w.r.logf("leases: lease %x not revoked 60s after its last renewal", lr.ID)
			return
		}
		sleep(100 * time.Millisecond)
	}
	w.mu.Lock()
	w.samples = append(w.samples, s)
	w.mu.Unlock()
}

func (w *leases) check(context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, _ := json.MarshalIndent(w.samples, "", " ")
	w.r.save("leases.json", b)
	if w.notEnded > 0 {
		w.r.anomaly("leases: %d leases were still not revoked 60s after their last renewal", w.notEnded)
	}
	if len(w.samples) == 0 {
		w.r.logf("leases: no completed samples")
		return
	}
	lates := make([]time.Duration, len(w.samples))
	for i, s := range w.samples {
		lates[i] = s.Late
	}
	sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
	pct := func(p float64) time.Duration { return lates[int(p*float64(len(lates)-1))].Round(time.Millisecond) }
	w.r.logf("leases: %d expiries observed; lateness after TTL from last acknowledged keepalive: min %v p50 %v p90 %v max %v",
		len(lates), lates[0].Round(time.Millisecond), pct(0.5), pct(0.9), lates[len(lates)-1].Round(time.Millisecond))
	w.r.leaseLateness = lates
}
