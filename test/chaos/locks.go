package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/test/proxy"
)

// locks: N clients take one lock and, holding it, do an increment at a
// fenced resource that remembers the highest token it has seen and rejects
// lower ones. The token is the lock key's create revision. The clients take
// the same lock through three APIs that share its queue (client id modulo
// 3): clientv3's concurrency.Mutex, etcd's v3lock service, and tenure.v1
// Locks.Lock (which returns the token; the others read the key). A service
// client whose Lock fails drops its lease, since its key may still be queued.
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
	API     string        `json:"api"`
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

// lockerFactory makes a lock for one client session. Three APIs take the
// same lock (one queue: the keys <name>/<lease hex>): clientv3's Mutex (the
// plain-KV recipe), etcd's v3lock service and Tenure's native tenure.v1
// Locks service.
type lockerFactory func(cli *clientv3.Client, s *concurrency.Session, name string) heldLock

type heldLock interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
	Key() string
	// Token is the fencing token the lock API returned with the grant, 0
	// when it returns none (the client then reads the key's create
	// revision).
	Token() int64
	// Service: the lock is held through a server-side lock service; a
	// failed Lock may leave the waiter's key queued under the session's
	// lease, so the client drops the session.
	Service() bool
}

type mutexLock struct{ *concurrency.Mutex }

func (mutexLock) Token() int64  { return 0 }
func (mutexLock) Service() bool { return false }

func mutexLocker(_ *clientv3.Client, s *concurrency.Session, name string) heldLock {
	return mutexLock{concurrency.NewMutex(s, name)}
}

// v3Lock takes the lock through etcd's v3lock service.
type v3Lock struct {
	lc    v3lockpb.LockClient
	name  string
	lease clientv3.LeaseID
	key   string
}

func v3lockLocker(cli *clientv3.Client, s *concurrency.Session, name string) heldLock {
	return &v3Lock{lc: v3lockpb.NewLockClient(cli.ActiveConnection()), name: name, lease: s.Lease()}
}

func (l *v3Lock) Lock(ctx context.Context) error {
	resp, err := l.lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(l.name), Lease: int64(l.lease)})
	if err != nil {
		return err
	}
	l.key = string(resp.Key)
	if want := waiterKey(l.name, l.lease); l.key != want {
		return fmt.Errorf("%w: v3lock granted key %q to the lease of %q", errWrongKey, l.key, want)
	}
	return nil
}

func (l *v3Lock) Unlock(ctx context.Context) error {
	_, err := l.lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: []byte(l.key)})
	return err
}

func (l *v3Lock) Key() string   { return l.key }
func (l *v3Lock) Token() int64  { return 0 }
func (l *v3Lock) Service() bool { return true }

// nativeLock takes the lock through tenure.v1 Locks, which returns the
// fencing token with the grant.
type nativeLock struct {
	lc    tenurev1.LocksClient
	name  string
	lease clientv3.LeaseID
	key   string
	token int64
}

func nativeLocker(cli *clientv3.Client, s *concurrency.Session, name string) heldLock {
	return &nativeLock{lc: tenurev1.NewLocksClient(cli.ActiveConnection()), name: name, lease: s.Lease()}
}

func (l *nativeLock) Lock(ctx context.Context) error {
	resp, err := l.lc.Lock(ctx, &tenurev1.LockRequest{Name: []byte(l.name), Lease: int64(l.lease)})
	if err != nil {
		return err
	}
	l.key, l.token = string(resp.Key), resp.Token
	if want := waiterKey(l.name, l.lease); l.key != want || l.token <= 0 {
		return fmt.Errorf("%w: tenure.v1 Lock granted key %q token %d to the lease of %q", errWrongKey, l.key, l.token, want)
	}
	return nil
}

func (l *nativeLock) Unlock(ctx context.Context) error {
	_, err := l.lc.Unlock(ctx, &tenurev1.UnlockRequest{Name: []byte(l.name), Lease: int64(l.lease), Token: l.token})
	return err
}

func (l *nativeLock) Key() string   { return l.key }
func (l *nativeLock) Token() int64  { return l.token }
func (l *nativeLock) Service() bool { return true }

var errWrongKey = errors.New("lock service answered with another waiter's key")

// waiterKey is the key of lease's waiter under name (etcd's layout).
func waiterKey(name string, lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s/%x", name, int64(lease))
}

// lockAPIs are the lock clients' APIs, client id modulo their number.
var lockAPIs = []struct {
	name string
	f    lockerFactory
}{{"mutex", mutexLocker}, {"v3lock", v3lockLocker}, {"native", nativeLocker}}

func newLocks(r *run, seed uint64) *locks {
	return &locks{r: r, seed: seed, nclients: 6, ttl: 2}
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
		api := lockAPIs[id%len(lockAPIs)]
		m := api.f(cli, sess, "/lock/fenced")
		call := w.r.mono()
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := m.Lock(lctx)
		cancel()
		w.r.op()
		if errors.Is(err, errWrongKey) {
			w.r.anomaly("locks: client %d (%s): %v", id, api.name, err)
		}
		if err != nil {
			if m.Service() {
				// the waiter's key may still be queued (the member that
				// held the call died, or the outcome is unknown): drop the
				// lease so that the key goes and nobody waits behind it
				w.dropSession(cli, sess)
				sess = nil
			}
			continue
		}
		got := w.r.mono()
		a := acquisition{Client: id, API: api.name, Call: call, Got: got, Token: m.Token()}
		if a.Token == 0 {
			// the token: the lock key's create revision
			gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
			kr, err := cli.Get(gctx, m.Key())
			gcancel()
			w.r.op()
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
		}
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

// dropSession stops a session's keepalives and revokes its lease (best
// effort: otherwise it expires within the TTL).
func (w *locks) dropSession(cli *clientv3.Client, sess *concurrency.Session) {
	sess.Orphan()
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	cli.Revoke(rctx, sess.Lease())
	cancel()
	w.r.op()
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
	perAPI := map[string]int{}
	for _, a := range w.acqs {
		perAPI[a.API]++
	}
	w.r.logf("locks: acquisitions by API %v", perAPI)
	w.r.logf("locks: %d acquisitions, %d effects accepted, %d rejected, %d lost before use; paused past lease: %d (write rejected %d, accepted because no newer owner had written %d)",
		len(w.acqs), len(w.res.accepted), len(w.res.rejected), w.lost, w.paused, w.pausedNo, w.pausedOK)
	if w.paused > 0 && w.pausedNo == 0 {
		w.r.logf("locks: note: no paused write was rejected (no newer owner wrote during any pause)")
	}
}
