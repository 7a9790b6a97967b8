package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// elections: candidates campaign through concurrency.Election, lead for a
// while and resign; observers follow with Observe.
//
// Checks: at most one leader per term (a win is identified by its leader
// key's create revision: two wins never share it); a win that completed
// before another campaign began has the smaller revision; what each
// observer sees never goes back to an older term; at the end, with one
// candidate holding leadership, every observer converges on it.
type elections struct {
	r      *run
	seed   uint64
	ncand  int
	nobs   int
	prefix string

	mu   sync.Mutex
	wins []win
	obs  []*observer
}

type win struct {
	Cand int           `json:"cand"`
	Val  string        `json:"val"`
	Rev  int64         `json:"rev"`
	Call time.Duration `json:"call"`
	Got  time.Duration `json:"got"`
}

type observer struct {
	mu   sync.Mutex
	seen []int64
	last int64
	val  string
}

func newElections(r *run, seed uint64) *elections {
	return &elections{r: r, seed: seed, ncand: 3, nobs: 2, prefix: "/elect/main"}
}

func (w *elections) run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := 0; id < w.ncand; id++ {
		cli := w.r.c.NewClient(w.r.c.Endpoints()...)
		rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.candidate(ctx, cli, id, rng)
		}()
	}
	for id := 0; id < w.nobs; id++ {
		cli := w.r.c.NewClient(w.r.c.Endpoints()...)
		o := &observer{}
		w.obs = append(w.obs, o)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.observe(ctx, cli, o)
		}()
	}
	wg.Wait()
}

func (w *elections) candidate(ctx context.Context, cli *clientv3.Client, id int, rng *rand.Rand) {
	for n := 0; ctx.Err() == nil; n++ {
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		lr, err := cli.Grant(gctx, 2)
		cancel()
		w.r.op()
		if err != nil {
			sleep(100 * time.Millisecond)
			continue
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithLease(lr.ID), concurrency.WithContext(ctx))
		if err != nil {
			continue
		}
		e := concurrency.NewElection(sess, w.prefix)
		val := fmt.Sprintf("cand%d-%d", id, n)
		call := w.r.mono()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = e.Campaign(cctx, val)
		cancel()
		w.r.op()
		if err == nil {
			w.mu.Lock()
			w.wins = append(w.wins, win{Cand: id, Val: val, Rev: e.Rev(), Call: call, Got: w.r.mono()})
			w.mu.Unlock()
			sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			e.Resign(rctx)
			cancel()
			w.r.op()
		}
		sess.Orphan()
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cli.Revoke(rctx, lr.ID)
		cancel()
	}
}

func (w *elections) observe(ctx context.Context, cli *clientv3.Client, o *observer) {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(5), concurrency.WithContext(ctx))
	for err != nil && ctx.Err() == nil {
		sleep(200 * time.Millisecond)
		sess, err = concurrency.NewSession(cli, concurrency.WithTTL(5), concurrency.WithContext(ctx))
	}
	if err != nil {
		return
	}
	defer sess.Orphan()
	e := concurrency.NewElection(sess, w.prefix)
	for ctx.Err() == nil {
		for resp := range e.Observe(ctx) {
			if len(resp.Kvs) == 0 {
				continue
			}
			kv := resp.Kvs[0]
			o.mu.Lock()
			if kv.CreateRevision < o.last {
				w.r.anomaly("elections: observer saw leader revision %d after %d", kv.CreateRevision, o.last)
			}
			o.last = max(o.last, kv.CreateRevision)
			o.val = string(kv.Value)
			o.seen = append(o.seen, kv.CreateRevision)
			o.mu.Unlock()
		}
		sleep(100 * time.Millisecond) // Observe ended (error or no session): start again
	}
}

func (w *elections) check(ctx context.Context) {
	w.mu.Lock()
	b, _ := json.MarshalIndent(w.wins, "", " ")
	w.r.save("elections.json", b)
	byRev := map[int64]win{}
	for _, a := range w.wins {
		if o, dup := byRev[a.Rev]; dup {
			w.r.anomaly("elections: two leaders for term %d: %s and %s", a.Rev, o.Val, a.Val)
		}
		byRev[a.Rev] = a
	}
	bad := 0
	for _, a := range w.wins {
		for _, b := range w.wins {
			if a.Got < b.Call && a.Rev >= b.Rev {
				if bad < 5 {
					w.r.anomaly("elections: %s won term %d at %v, then %s campaigned at %v and won the older term %d", a.Val, a.Rev, a.Got, b.Val, b.Call, b.Rev)
				}
				bad++
			}
		}
	}
	nwins := len(w.wins)
	w.mu.Unlock()

	// convergence: one candidate takes and holds leadership; every
	// observer (restarted on a healed cluster) must report it.
	cli := w.r.c.NewClient(w.r.c.Endpoints()...)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		w.r.anomaly("elections: session on a healed cluster: %v", err)
		return
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, w.prefix)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := e.Campaign(cctx, "final"); err != nil {
		w.r.anomaly("elections: final campaign on a healed cluster: %v", err)
		return
	}
	final := e.Rev()
	converged := 0
	octx, ocancel := context.WithCancel(cctx)
	defer ocancel()
	for i := 0; i < w.nobs; i++ {
		ocli := w.r.c.NewClient(w.r.c.Endpoint(i % len(w.r.c.Members)))
		osess, err := concurrency.NewSession(ocli, concurrency.WithTTL(10))
		if err != nil {
			w.r.anomaly("elections: observer session: %v", err)
			continue
		}
		ch := concurrency.NewElection(osess, w.prefix).Observe(octx)
		ok := false
		for resp := range ch {
			if len(resp.Kvs) > 0 && resp.Kvs[0].CreateRevision == final && string(resp.Kvs[0].Value) == "final" {
				ok = true
				break
			}
		}
		osess.Close()
		if ok {
			converged++
		} else {
			w.r.anomaly("elections: observer %d did not converge on the final leader (term %d) within 20s", i, final)
		}
	}
	e.Resign(cctx)
	w.r.logf("elections: %d wins, unique terms, %d/%d observers converged on term %d", nwins, converged, w.nobs, final)
}
