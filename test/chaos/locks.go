package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/test/proxy"
)

// locks: N clients take one lock and, holding it, do an increment at a
// fenced resource that remembers the highest token it has seen and rejects
// lower ones. The token is the lock key's create revision.
//
// Each lock client talks to the cluster through its own proxies (chained in
// front of the members' client proxies). A client "pause" is the GC pause
// of the article, done honestly for an in-process client: the goroutine
// stops doing anything and its proxies are blackholed, so its keepalives
// stop too; it resumes after longer than its lease and then tries its write
// with the token it had — the resource must reject it if a newer owner has
// written since.
//
// Checks: tokens of distinct acquisitions are distinct; an acquisition that
// completed before another started has the smaller token (tokens increase
// in real time); the accepted effects' tokens never decrease and the
// resource count equals the accepted effects; a paused client whose lease
// expired and whose lock was taken by a newer owner that wrote never lands
// its write.
type locks struct {
	r        *run
	seed     uint64
	nclients int
	ttl      int
	locker   lockerFactory

	mu       sync.Mutex
	acqs     []acquisition
	res      fencedResource
	paused   int
	pausedOK int // paused writes accepted (no newer owner had written)
	pausedNo int // paused writes rejected
	lost     int // lock key gone before the write
	proxies  [][]*proxy.Proxy
}

// acquisition is one successful lock grant as a client saw it.
type acquisition struct {
	Client  int           `json:"client"`
	Token   int64         `json:"token"`
	Call    time.Duration `json:"call"`
	Got     time.Duration `json:"got"`
	Paused  bool          `json:"paused"`
	Written string        `json:"written"` // accepted, rejected, lost, error
}

// fencedResource is the "small resource" of the article: it applies an
// increment only if the token is at least the highest it has seen.
type fencedResource struct {
	mu       sync.Mutex
	highest  int64
	count    int
	accepted []effect
	rejected []effect
}

type effect struct {
	Client int           `json:"client"`
	Token  int64         `json:"token"`
	At     time.Duration `json:"at"`
}

func (f *fencedResource) increment(e effect) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.Token < f.highest {
		f.rejected = append(f.rejected, e)
		return false
	}
	f.highest = e.Token
	f.count++
	f.accepted = append(f.accepted, e)
	return true
}

// lockerFactory makes a lock for one client session. The clientv3 Mutex is
// the only implementation until Tenure's lock service (v3lock) lands; a
// service-backed lockerFactory plugs in here.
type lockerFactory func(s *concurrency.Session, name string) heldLock

type heldLock interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
	Key() string
}

func mutexLocker(s *concurrency.Session, name string) heldLock { return concurrency.NewMutex(s, name) }

func newLocks(r *run, seed uint64) *locks {
	return &locks{r: r, seed: seed, nclients: 4, ttl: 2, locker: mutexLocker}
}

// newClientProxies puts a private proxy in front of every member's client
// endpoint for one client.
func (w *locks) newClient(id int) (*clientv3.Client, []*proxy.Proxy) {
	var eps []string
	var pxs []*proxy.Proxy
	for i := range w.r.c.Members {
		target := strings.TrimPrefix(w.r.c.Endpoint(i), "http://")
		p, err := proxy.New("127.0.0.1:0", target)
		if err != nil {
			w.r.tb.Fatalf("lock client proxy: %v", err)
		}
		w.r.tb.Cleanup(func() { p.Close() })
		pxs = append(pxs, p)
		eps = append(eps, "http://"+p.Addr())
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, DialTimeout: 2 * time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		w.r.tb.Fatalf("lock client: %v", err)
	}
	w.r.tb.Cleanup(func() { cli.Close() })
	return cli, pxs
}

func (w *locks) run(ctx context.Context) {
	var wg sync.WaitGroup
	var pauseMu sync.Mutex // at most one paused client at a time
	for id := 0; id < w.nclients; id++ {
		cli, pxs := w.newClient(id)
		w.proxies = append(w.proxies, pxs)
		rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.client(ctx, id, cli, pxs, rng, &pauseMu)
		}()
	}
	wg.Wait()
}

func (w *locks) client(ctx context.Context, id int, cli *clientv3.Client, pxs []*proxy.Proxy, rng *rand.Rand, pauseMu *sync.Mutex) {
	var sess *concurrency.Session
	defer func() {
		if sess != nil {
			sess.Orphan()
		}
	}()
	for ctx.Err() == nil {
		if sess == nil {
			// grant with a deadline (NewSession's own grant would wait
			// out a partition), then let the session keep it alive
			gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			lr, err := cli.Grant(gctx, int64(w.ttl))
			cancel()
			w.r.op()
			if err != nil {
				sleep(100 * time.Millisecond)
				continue
			}
			s, err := concurrency.NewSession(cli, concurrency.WithLease(lr.ID), concurrency.WithTTL(w.ttl), concurrency.WithContext(ctx))
			if err != nil {
				continue
			}
			sess = s
		}
		select {
		case <-sess.Done():
			sess = nil
			continue
		default:
		}
		m := w.locker(sess, "/lock/fenced")
		call := w.r.mono()
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := m.Lock(lctx)
		cancel()
		w.r.op()
		if err != nil {
			continue
		}
		got := w.r.mono()
		// the token: the lock key's create revision
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		kr, err := cli.Get(gctx, m.Key())
		gcancel()
		w.r.op()
		a := acquisition{Client: id, Call: call, Got: got}
		if err != nil || len(kr.Kvs) == 0 {
			// cannot learn the token (or the key is gone): give up the turn
			a.Written = "lost"
			w.mu.Lock()
			w.lost++
			w.mu.Unlock()
			w.unlock(ctx, m)
			continue
		}
		a.Token = kr.Kvs[0].CreateRevision
		// pause past the lease sometimes (one client at a time)
		if rng.IntN(8) == 0 && pauseMu.TryLock() {
			a.Paused = true
			d := time.Duration(w.ttl)*time.Second + 2*time.Second + time.Duration(rng.IntN(2000))*time.Millisecond
			w.r.logf("locks: client %d holds token %d and pauses for %v (keepalives stop)", id, a.Token, d)
			w.r.fault("clientpause")
			for _, p := range pxs {
				p.Blackhole()
			}
			sleep(d)
			for _, p := range pxs {
				p.Heal()
			}
			pauseMu.Unlock()
		} else {
			sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
		}
		ok := w.res.increment(effect{Client: id, Token: a.Token, At: w.r.mono()})
		w.r.op()
		a.Written = map[bool]string{true: "accepted", false: "rejected"}[ok]
		w.mu.Lock()
		if a.Paused {
			w.paused++
			if ok {
				w.pausedOK++
			} else {
				w.pausedNo++
			}
		}
		w.acqs = append(w.acqs, a)
		w.mu.Unlock()
		w.unlock(ctx, m)
		if a.Paused {
			// the session's lease most likely expired while paused
			sess.Orphan()
			sess = nil
		}
	}
}

func (w *locks) unlock(ctx context.Context, m heldLock) {
	uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	m.Unlock(uctx)
	cancel()
	w.r.op()
}

func (w *locks) check(context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b, _ := json.MarshalIndent(struct {
		Acquisitions []acquisition `json:"acquisitions"`
		Accepted     []effect      `json:"accepted"`
		Rejected     []effect      `json:"rejected"`
	}{w.acqs, w.res.accepted, w.res.rejected}, "", " ")
	w.r.save("locks.json", b)
	// distinct tokens
	byToken := map[int64]acquisition{}
	for _, a := range w.acqs {
		// the same client seeing its own key again (its Unlock failed, so
		// its next Lock found the key it still owns) continues one hold
		if o, dup := byToken[a.Token]; dup && o.Client != a.Client {
			w.r.anomaly("locks: two acquisitions with token %d (client %d at %v and client %d at %v)", a.Token, o.Client, o.Got, a.Client, a.Got)
		}
		byToken[a.Token] = a
	}
	// tokens increase in real time: a grant that completed before another
	// was requested has the smaller token
	bad := 0
	for _, a := range w.acqs {
		for _, b := range w.acqs {
			if a.Got < b.Call && a.Token >= b.Token && !(a.Token == b.Token && a.Client == b.Client) {
				if bad < 5 {
					w.r.anomaly("locks: client %d got token %d at %v, then client %d asked at %v and got the smaller token %d", a.Client, a.Token, a.Got, b.Client, b.Call, b.Token)
				}
				bad++
			}
		}
	}
	// the resource: no stale effect, count matches
	var prev int64
	for _, e := range w.res.accepted {
		if e.Token < prev {
			w.r.anomaly("locks: resource accepted token %d after %d", e.Token, prev)
		}
		prev = e.Token
	}
	if w.res.count != len(w.res.accepted) {
		w.r.anomaly("locks: resource count %d != %d accepted effects", w.res.count, len(w.res.accepted))
	}
	// a paused client never lands a write once a newer owner has written
	for _, e := range w.res.accepted {
		a := byToken[e.Token]
		if !a.Paused {
			continue
		}
		for _, o := range w.res.accepted {
			if o.Token > e.Token && o.At < e.At {
				w.r.anomaly("locks: paused client %d landed token %d at %v after token %d was written at %v", e.Client, e.Token, e.At, o.Token, o.At)
			}
		}
	}
	w.r.logf("locks: %d acquisitions, %d effects accepted, %d rejected, %d lost before use; paused past lease: %d (write rejected %d, accepted because no newer owner had written %d)",
		len(w.acqs), len(w.res.accepted), len(w.res.rejected), w.lost, w.paused, w.pausedNo, w.pausedOK)
	if w.paused > 0 && w.pausedNo == 0 {
		w.r.logf("locks: note: no paused write was rejected (no newer owner wrote during any pause)")
	}
}
