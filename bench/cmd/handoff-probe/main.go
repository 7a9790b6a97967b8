// Command handoff-probe shows where a lock hand-off's time goes on a running
// etcd-compatible cluster: N clients (each with its own clientv3 session,
// ten per connection, balanced over all endpoints) loop acquire → release on
// one lock, every grant and every returned unlock is timestamped, and the
// probe prints the distributions of
//
//   - handoff: from one grant to the next (the cycle every waiter queues for),
//   - grant → unlock returned: the holder's release (one raft round for the
//     native service),
//   - unlock returned → next grant: what the next owner still waits for
//     after the release is applied (for etcd's Mutex recipe: its watch event
//     and its linearizable re-read),
//
// and the Lock/Unlock RPC latencies. With -api session, where a client's
// stream stays on one member and each Lock answer names it, the hand-offs
// are also split by where the previous owner and the next one were
// connected (the leader or a follower, as the leader was at the end of the
// run): what forwarding a release to the leader and pushing a grant back to
// a follower add. -api native drives tenure.v1 Locks (Tenure only); -api
// v3lock drives etcd's v3lock service and -api mutex clientv3's
// concurrency.Mutex (any etcd-compatible server).
//
//	go run ./cmd/handoff-probe -endpoints 127.0.0.1:2379 -clients 50 -duration 6s
//
// It is a diagnostic, not a benchmark suite: numbers for the record come from
// tenure-bench (RESULTS.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/bench/internal/cluster"
)

type event struct {
	at      time.Time
	granted bool // else: an unlock returned
	client  int
}

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated client endpoints")
	clients := flag.Int("clients", 50, "clients contending for the lock")
	duration := flag.Duration("duration", 6*time.Second, "how long to loop")
	api := flag.String("api", "native", "native (tenure.v1 Locks), session (tenure.v1 Session stream), v3lock (etcd's lock service) or mutex (clientv3 concurrency.Mutex)")
	name := flag.String("lock", "handoff-probe", "lock name")
	locks := flag.Int("locks", 1, "spread the clients over this many locks (<lock>-0 …); with more than one, only the rates and RPC latencies mean anything")
	cpuProfile := flag.String("cpuprofile", "", "write the probe's own CPU profile (the client side) to this file")
	window := flag.Int("client-window", 0, "fixed HTTP/2 stream and connection window in bytes of the probe's connections, like tenure-bench -client-window (turns gRPC's BDP pings off; try 1048576); 0: gRPC's dynamic windows, clientv3's default")
	flag.Parse()
	if *clients < 1 || *locks < 1 || (*api != "native" && *api != "session" && *api != "v3lock" && *api != "mutex") {
		flag.Usage()
		os.Exit(2)
	}

	conns := make([]*clientv3.Client, (*clients+9)/10)
	for i := range conns {
		c, err := clientv3.New(cluster.ClientConfig(strings.Split(*endpoints, ","), int32(*window)))
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}

	var (
		mu                 sync.Mutex
		events             []event
		lockLat, unlockLat []time.Duration
		memberOf           = make([]uint64, *clients) // the member serving each client (0: unknown)
	)
	record := func(granted bool, client int) {
		now := time.Now()
		mu.Lock()
		events = append(events, event{now, granted, client})
		mu.Unlock()
	}

	sessions := make([]*concurrency.Session, *clients)
	for i := range sessions {
		s, err := concurrency.NewSession(conns[i%len(conns)], concurrency.WithTTL(60))
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		sessions[i] = s
	}

	var profile *os.File
	if *cpuProfile != "" {
		var err error
		if profile, err = os.Create(*cpuProfile); err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(profile); err != nil {
			log.Fatal(err)
		}
	}
	end := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for i := range sessions {
		s := sessions[i]
		lockName := *name
		if *locks > 1 {
			lockName = fmt.Sprintf("%s-%d", *name, i%*locks)
		}
		var acquire, release func(context.Context) error
		switch *api {
		case "mutex":
			m := concurrency.NewMutex(s, lockName)
			acquire, release = m.Lock, m.Unlock
		case "v3lock":
			lc := v3lockpb.NewLockClient(conns[i%len(conns)].ActiveConnection())
			var key []byte
			acquire = func(ctx context.Context) error {
				r, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(lockName), Lease: int64(s.Lease())})
				if err == nil {
					key = r.Key
				}
				return err
			}
			release = func(ctx context.Context) error {
				_, err := lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: key})
				return err
			}
		case "session":
			st, err := tenurev1.NewLocksClient(conns[i%len(conns)].ActiveConnection()).Session(context.Background())
			if err != nil {
				log.Fatal(err)
			}
			var token int64
			var id uint64
			call := func(req *tenurev1.SessionRequest) (*tenurev1.SessionResponse, error) {
				id++
				req.Id = id
				if err := st.Send(req); err != nil {
					return nil, err
				}
				r, err := st.Recv()
				if err != nil {
					return nil, err
				}
				if e := r.GetError(); e != nil {
					return nil, fmt.Errorf("session: %s (code %d)", e.Message, e.Code)
				}
				return r, nil
			}
			acquire = func(ctx context.Context) error {
				r, err := call(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Lock{Lock: &tenurev1.LockRequest{Name: []byte(lockName), Lease: int64(s.Lease())}}})
				if err == nil {
					token = r.GetLock().GetToken()
					memberOf[i] = r.GetLock().GetHeader().GetMemberId() // a stream stays on one member
				}
				return err
			}
			release = func(ctx context.Context) error {
				_, err := call(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Unlock{Unlock: &tenurev1.UnlockRequest{Name: []byte(lockName), Lease: int64(s.Lease()), Token: token}}})
				return err
			}
		default:
			lc := tenurev1.NewLocksClient(conns[i%len(conns)].ActiveConnection())
			var token int64
			acquire = func(ctx context.Context) error {
				r, err := lc.Lock(ctx, &tenurev1.LockRequest{Name: []byte(lockName), Lease: int64(s.Lease())})
				if err == nil {
					token = r.Token
				}
				return err
			}
			release = func(ctx context.Context) error {
				_, err := lc.Unlock(ctx, &tenurev1.UnlockRequest{Name: []byte(lockName), Lease: int64(s.Lease()), Token: token})
				return err
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for time.Now().Before(end) {
				t0 := time.Now()
				if err := acquire(ctx); err != nil {
					log.Fatalf("client %d: acquire: %v", i, err)
				}
				record(true, i)
				t1 := time.Now()
				if err := release(ctx); err != nil {
					log.Fatalf("client %d: release: %v", i, err)
				}
				record(false, i)
				mu.Lock()
				lockLat = append(lockLat, t1.Sub(t0))
				unlockLat = append(unlockLat, time.Since(t1))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if profile != nil {
		pprof.StopCPUProfile() // the sessions still close; profile only the loop
		if err := profile.Close(); err != nil {
			log.Fatal(err)
		}
	}

	slices.SortFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	// Only a Session stream stays on one member (memberOf); the leader is
	// taken as it is at the end of the run.
	var leader uint64
	if *api == "session" {
		var err error
		if leader, _, err = cluster.AgreedLeader(context.Background(), conns[0], strings.Split(*endpoints, ",")); err != nil {
			log.Printf("hand-offs not split by placement: %v", err)
		}
	}
	placement := func(client int) string {
		switch memberOf[client] {
		case 0:
			return "?"
		case leader:
			return "leader"
		}
		return "follower"
	}
	byPlacement := map[string][]time.Duration{}
	var handoff, toUnlock, toNext []time.Duration
	var lastGrant, lastUnlock time.Time
	owner := -1
	for _, e := range events {
		switch {
		case e.granted:
			if !lastGrant.IsZero() {
				handoff = append(handoff, e.at.Sub(lastGrant))
				if leader != 0 {
					k := "handoff " + placement(owner) + " -> " + placement(e.client)
					byPlacement[k] = append(byPlacement[k], e.at.Sub(lastGrant))
				}
				if !lastUnlock.IsZero() {
					toNext = append(toNext, e.at.Sub(lastUnlock))
				}
			}
			lastGrant, owner, lastUnlock = e.at, e.client, time.Time{}
		case e.client == owner && lastUnlock.IsZero():
			lastUnlock = e.at
			toUnlock = append(toUnlock, e.at.Sub(lastGrant))
		}
	}
	fmt.Printf("%s, %d clients, %v: %d grants (%.0f/s)\n", *api, *clients, *duration, len(lockLat), float64(len(lockLat))/duration.Seconds())
	show("handoff (grant -> grant)", handoff)
	show("grant -> unlock returned", toUnlock)
	show("unlock returned -> next grant", toNext)
	show("Lock call", lockLat)
	show("Unlock call", unlockLat)
	for _, k := range slices.Sorted(maps.Keys(byPlacement)) {
		show(k, byPlacement[k])
	}
}

func show(what string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	q := func(p int) float64 { return float64(d[len(d)*p/100].Microseconds()) / 1000 }
	fmt.Printf("  %-30s n=%6d  p10 %7.2f ms  p50 %7.2f ms  p90 %7.2f ms\n", what, len(d), q(10), q(50), q(90))
}
