package suite

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	tenurev1 "github.com/tenure-io/tenure/api/tenurev1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"

	"github.com/tenure-io/tenure/bench/internal/cluster"
)

// Lock variants (the API a lock suite drives on a system).
const (
	LockNative   = "tenure.v1 Locks"
	LockSession  = "tenure.v1 Session"
	LockV3       = "v3lock"
	LockMutex    = "Mutex"
	LockZK       = "lock recipe"
	LockRedis    = "SET NX PX + Lua unlock"
	LockAdvisory = "pg_advisory_lock"
)

// RedisRetry is how long a Redis client waits before retrying a SET NX that
// found the lock taken (randomised in [RedisRetry, 2×RedisRetry)): Redis
// has no wait queue, so a waiter polls.
const RedisRetry = time.Millisecond

// LockBench is a lock suite: Clients clients, each with its own session
// (lease, ZooKeeper session, Redis or PostgreSQL connection), loop
// acquire → release on Locks locks (client i uses lock i mod Locks) for a
// fixed duration. Result.RPS is completed cycles per second; P50/P99 are the
// acquire latencies (time from calling Lock to holding the lock, so with
// many clients on one lock it includes the queue wait).
type LockBench struct {
	Name, Heading, Goal string
	Clients, Locks      int
	ShortDur, FullDur   time.Duration
}

func (s *LockBench) ID() string      { return s.Name }
func (s *LockBench) Title() string   { return s.Heading }
func (s *LockBench) Target() string  { return s.Goal }
func (s *LockBench) Primary() Metric { return Throughput }
func (s *LockBench) Unit() string    { return "cycles/s" }
func (s *LockBench) Note() string {
	return "p50/p99 are acquire latencies (from calling Lock to holding the lock; with many clients on one lock that includes the queue wait)."
}

func (s *LockBench) Refs() []Ref {
	return []Ref{
		{Kind: "etcd", Variant: LockV3, Column: "× etcd v3lock"},
		{Kind: "etcd", Variant: LockMutex, Column: "× etcd Mutex"},
		{Kind: cluster.KindZooKeeper, Variant: LockZK, Column: "× ZooKeeper"},
	}
}

func (s *LockBench) Variants(kind string) []string {
	switch kind {
	case "tenure":
		return []string{LockSession, LockNative, LockV3, LockMutex}
	case "etcd":
		return []string{LockV3, LockMutex}
	case cluster.KindZooKeeper:
		return []string{LockZK}
	case cluster.KindRedis:
		return []string{LockRedis}
	case cluster.KindPostgres:
		return []string{LockAdvisory}
	}
	return nil
}

// Duration of one run in a mode.
func (s *LockBench) Duration(m Mode) time.Duration {
	if m == Full {
		return s.FullDur
	}
	return s.ShortDur
}

// LockSuites are the lock suites of issues 4 and 5.
func LockSuites() []Suite {
	return []Suite{
		&LockBench{Name: "lock-1", Heading: "lock acquire → release, 1 client, 1 lock",
			Goal: "tracked; beat ZooKeeper (issue 5)", Clients: 1, Locks: 1, ShortDur: 8 * time.Second, FullDur: 30 * time.Second},
		&LockBench{Name: "lock-50x1", Heading: "lock hand-offs, 50 clients on 1 lock (every cycle is a hand-off)",
			Goal:    "Tenure's lock service (tenure.v1 Session stream or unary Locks) ≥ 4.0× etcd v3lock; tenure Mutex ≥ 1.0× etcd Mutex; beat ZooKeeper (issues 4, 5)",
			Clients: 50, Locks: 1, ShortDur: 10 * time.Second, FullDur: 30 * time.Second},
		&LockBench{Name: "lock-50x50", Heading: "lock cycles, 50 clients on 50 locks (one lock per client)",
			Goal:    "Tenure's lock service (tenure.v1 Session stream or unary Locks) ≥ 2.0× etcd v3lock; tenure Mutex ≥ 1.0× etcd Mutex; beat ZooKeeper (issues 4, 5)",
			Clients: 50, Locks: 50, ShortDur: 10 * time.Second, FullDur: 30 * time.Second},
	}
}

// locker is one client's session on one lock.
type locker interface {
	Acquire(ctx context.Context) error
	Release(ctx context.Context) error
	Close()
}

func lockName(i int) string { return fmt.Sprintf("bench-lock-%02d", i) }

func (s *LockBench) Run(ctx context.Context, env *Env) (Result, error) {
	dur := s.Duration(env.Mode)
	mk, closeAll, err := s.factory(ctx, env)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	lockers := make([]locker, s.Clients)
	defer func() {
		for _, l := range lockers {
			if l != nil {
				l.Close()
			}
		}
	}()
	for i := range lockers {
		if lockers[i], err = mk(ctx, i, lockName(i%s.Locks)); err != nil {
			return Result{}, fmt.Errorf("%s %s: client %d: %w", s.Name, env.Variant, i, err)
		}
	}
	// Run until the deadline; acquisitions still pending then are waited for
	// (bounded) so no waiter is abandoned mid-queue, but only cycles completed
	// before the deadline count.
	runCtx, cancel := context.WithTimeout(ctx, dur+60*time.Second)
	defer cancel()
	outs := make([]lockOut, s.Clients)
	start := time.Now()
	end := start.Add(dur)
	var wg sync.WaitGroup
	for i := range lockers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o := &outs[i]
			o.errs = map[string]int{}
			l := lockers[i]
			for time.Now().Before(end) && runCtx.Err() == nil {
				t0 := time.Now()
				if err := l.Acquire(runCtx); err != nil {
					o.errs["acquire: "+firstLine(err.Error())]++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				t1 := time.Now()
				if err := l.Release(runCtx); err != nil {
					o.errs["release: "+firstLine(err.Error())]++
					continue
				}
				if t1.Before(end) {
					o.lat = append(o.lat, t1.Sub(t0))
				}
				if time.Now().Before(end) {
					o.cycles++
				}
			}
		}(i)
	}
	wg.Wait()
	res, cycles := lockResult(outs, dur)
	res.Command = fmt.Sprintf("tenure-bench lock suite %s: %d clients, %d lock(s), %v, variant %q", s.Name, s.Clients, s.Locks, dur, env.Variant)
	if cycles == 0 {
		return res, fmt.Errorf("%s %s: no cycle completed (errors: %v)", s.Name, env.Variant, res.ErrDist)
	}
	return res, nil
}

// lockOut is what one lock client measured: the acquire latencies of the
// acquisitions made before the deadline, the cycles (acquire and release)
// completed before it, and its errors by message.
type lockOut struct {
	lat    []time.Duration
	cycles int
	errs   map[string]int
}

// lockResult aggregates the clients' outcomes of a run of length dur:
// Errors and ErrDist always; RPS (cycles per second of dur), P50/P99/Avg
// over every client's acquire latencies and Raw only if a cycle completed
// (cycles is returned so the caller can fail the run otherwise).
func lockResult(outs []lockOut, dur time.Duration) (res Result, cycles int) {
	var lat []time.Duration
	for _, o := range outs {
		lat = append(lat, o.lat...)
		cycles += o.cycles
		for k, v := range o.errs {
			if res.ErrDist == nil {
				res.ErrDist = map[string]int{}
			}
			res.ErrDist[k] += v
			res.Errors += v
		}
	}
	if cycles == 0 {
		return res, 0
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	res.RPS = float64(cycles) / dur.Seconds()
	res.P50 = pct(lat, 0.50)
	res.P99 = pct(lat, 0.99)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	if len(lat) > 0 {
		res.Avg = sum / time.Duration(len(lat))
	}
	res.Raw = fmt.Sprintf("cycles %d in %v; acquire p50 %v p99 %v; errors %v", cycles, dur, res.P50, res.P99, res.ErrDist)
	return res, cycles
}

// pct returns the q-quantile of sorted (ascending): the sample at 0-based
// index round(q·n), clamped to the last one. This is, up to rounding, the
// rule of etcd's pkg/report, which the benchmark-tool suites' numbers come
// from (the first sample i with i/n ≥ q, index ⌈q·n⌉): with 100 samples p50
// is the 51st and p99 the 100th in both. 0 for no samples.
func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted)) + 0.5)
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 160 {
		l = l[:160]
	}
	return l
}

type makeLocker func(ctx context.Context, i int, name string) (locker, error)

// factory returns the constructor of one client's locker for env.Variant,
// and a function closing what the clients share (gRPC connections).
func (s *LockBench) factory(ctx context.Context, env *Env) (makeLocker, func(), error) {
	switch env.Variant {
	case LockNative, LockSession, LockV3, LockMutex:
		if env.Cluster == nil {
			return nil, nil, fmt.Errorf("variant %s needs an etcd-compatible cluster", env.Variant)
		}
		// Clients share connections as in the other suites (10 clients per
		// clientv3.Client, each balancing over all 3 members); each client
		// has its own session (lease kept alive by clientv3).
		conns := (s.Clients + 9) / 10
		clis := make([]*clientv3.Client, conns)
		closeAll := func() {
			for _, c := range clis {
				if c != nil {
					c.Close()
				}
			}
		}
		for i := range clis {
			c, err := clientv3.New(env.Cluster.ClientConfig())
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			clis[i] = c
		}
		return func(ctx context.Context, i int, name string) (locker, error) {
			cli := clis[i%conns]
			sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
			if err != nil {
				return nil, err
			}
			switch env.Variant {
			case LockNative:
				return &nativeLocker{c: tenurev1.NewLocksClient(cli.ActiveConnection()), sess: sess, name: []byte(name)}, nil
			case LockSession:
				st, err := tenurev1.NewLocksClient(cli.ActiveConnection()).Session(ctx)
				if err != nil {
					_ = sess.Close()
					return nil, err
				}
				return &sessionLocker{st: st, sess: sess, name: []byte(name)}, nil
			case LockV3:
				return &v3Locker{c: v3lockpb.NewLockClient(cli.ActiveConnection()), sess: sess, name: []byte(name)}, nil
			default:
				return &mutexLocker{m: concurrency.NewMutex(sess, name), sess: sess}, nil
			}
		}, closeAll, nil
	case LockZK:
		if env.Ext == nil || env.Ext.Kind != cluster.KindZooKeeper {
			return nil, nil, errors.New("variant lock recipe needs ZooKeeper")
		}
		return func(ctx context.Context, i int, name string) (locker, error) {
			return newZKLocker(env.Ext.Addrs, "/"+name)
		}, func() {}, nil
	case LockRedis:
		if env.Ext == nil || env.Ext.Kind != cluster.KindRedis {
			return nil, nil, errors.New("variant SET NX needs Redis")
		}
		return func(ctx context.Context, i int, name string) (locker, error) {
			c := redis.NewClient(&redis.Options{Addr: env.Ext.Addrs[0], PoolSize: 1, MinIdleConns: 1})
			if err := c.Ping(ctx).Err(); err != nil {
				c.Close()
				return nil, err
			}
			return &redisLocker{c: c, name: name, token: fmt.Sprintf("client-%d-%d", i, rand.Uint64())}, nil
		}, func() {}, nil
	case LockAdvisory:
		if env.Ext == nil || env.Ext.Kind != cluster.KindPostgres {
			return nil, nil, errors.New("variant pg_advisory_lock needs PostgreSQL")
		}
		return func(ctx context.Context, i int, name string) (locker, error) {
			c, err := pgx.Connect(ctx, env.Ext.Addrs[0])
			if err != nil {
				return nil, err
			}
			h := fnv.New64a()
			h.Write([]byte(name))
			return &pgLocker{c: c, key: int64(h.Sum64() >> 1)}, nil
		}, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown lock variant %q", env.Variant)
}

type nativeLocker struct {
	c     tenurev1.LocksClient
	sess  *concurrency.Session
	name  []byte
	token int64
}

func (l *nativeLocker) Acquire(ctx context.Context) error {
	r, err := l.c.Lock(ctx, &tenurev1.LockRequest{Name: l.name, Lease: int64(l.sess.Lease())})
	if err != nil {
		return err
	}
	l.token = r.Token
	return nil
}

func (l *nativeLocker) Release(ctx context.Context) error {
	_, err := l.c.Unlock(ctx, &tenurev1.UnlockRequest{Name: l.name, Lease: int64(l.sess.Lease()), Token: l.token})
	return err
}

func (l *nativeLocker) Close() { _ = l.sess.Close() }

// sessionLocker runs the same calls as nativeLocker on one tenure.v1
// Session stream per client (one request at a time: the loop is serial).
type sessionLocker struct {
	st    tenurev1.Locks_SessionClient
	sess  *concurrency.Session
	name  []byte
	token int64
	id    uint64
}

func (l *sessionLocker) call(req *tenurev1.SessionRequest) (*tenurev1.SessionResponse, error) {
	l.id++
	req.Id = l.id
	if err := l.st.Send(req); err != nil {
		return nil, err
	}
	r, err := l.st.Recv()
	if err != nil {
		return nil, err
	}
	if e := r.GetError(); e != nil {
		return nil, fmt.Errorf("session: %s (code %d)", e.Message, e.Code)
	}
	return r, nil
}

func (l *sessionLocker) Acquire(ctx context.Context) error {
	r, err := l.call(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Lock{Lock: &tenurev1.LockRequest{Name: l.name, Lease: int64(l.sess.Lease())}}})
	if err != nil {
		return err
	}
	l.token = r.GetLock().GetToken()
	return nil
}

func (l *sessionLocker) Release(ctx context.Context) error {
	_, err := l.call(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Unlock{Unlock: &tenurev1.UnlockRequest{Name: l.name, Lease: int64(l.sess.Lease()), Token: l.token}}})
	return err
}

func (l *sessionLocker) Close() {
	_ = l.st.CloseSend()
	_ = l.sess.Close()
}

type v3Locker struct {
	c    v3lockpb.LockClient
	sess *concurrency.Session
	name []byte
	key  []byte
}

func (l *v3Locker) Acquire(ctx context.Context) error {
	r, err := l.c.Lock(ctx, &v3lockpb.LockRequest{Name: l.name, Lease: int64(l.sess.Lease())})
	if err != nil {
		return err
	}
	l.key = r.Key
	return nil
}

func (l *v3Locker) Release(ctx context.Context) error {
	_, err := l.c.Unlock(ctx, &v3lockpb.UnlockRequest{Key: l.key})
	return err
}

func (l *v3Locker) Close() { _ = l.sess.Close() }

type mutexLocker struct {
	m    *concurrency.Mutex
	sess *concurrency.Session
}

func (l *mutexLocker) Acquire(ctx context.Context) error { return l.m.Lock(ctx) }
func (l *mutexLocker) Release(ctx context.Context) error { return l.m.Unlock(ctx) }
func (l *mutexLocker) Close()                            { _ = l.sess.Close() }

type zkLocker struct {
	c    *zk.Conn
	lock *zk.Lock
}

func newZKLocker(addrs []string, path string) (*zkLocker, error) {
	c, ev, err := zk.Connect(addrs, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(cluster.NopZKLogger))
	if err != nil {
		return nil, err
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-ev:
			if e.State == zk.StateHasSession {
				go func() {
					for range ev {
					}
				}()
				return &zkLocker{c: c, lock: zk.NewLock(c, path, zk.WorldACL(zk.PermAll))}, nil
			}
		case <-deadline:
			c.Close()
			return nil, errors.New("zookeeper: no session within 10s")
		}
	}
}

// Acquire runs go-zookeeper's Lock (the sequential-ephemeral recipe: create
// <path>/lock-N, watch the predecessor).
func (l *zkLocker) Acquire(ctx context.Context) error { return l.bounded(ctx, l.lock.Lock) }
func (l *zkLocker) Release(ctx context.Context) error { return l.bounded(ctx, l.lock.Unlock) }
func (l *zkLocker) Close()                            { l.c.Close() }

// bounded runs a go-zookeeper lock call, which takes no context, so that
// the run's deadline still ends it: when ctx is done first the session is
// closed and the caller returns without waiting for the call (a Lock that
// never returned once hung a whole benchmark run, past its -run-timeout;
// the buffered channel lets the call's goroutine finish whenever it does).
func (l *zkLocker) bounded(ctx context.Context, call func() error) error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		l.c.Close()
		return ctx.Err()
	}
}

// unlockScript deletes the key only if it still holds this client's token.
var unlockScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

type redisLocker struct {
	c     *redis.Client
	name  string
	token string
}

func (l *redisLocker) Acquire(ctx context.Context) error {
	for {
		ok, err := l.c.SetNX(ctx, l.name, l.token, 30*time.Second).Result()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		d := RedisRetry + time.Duration(rand.Int64N(int64(RedisRetry)))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
}

func (l *redisLocker) Release(ctx context.Context) error {
	n, err := unlockScript.Run(ctx, l.c, []string{l.name}, l.token).Int()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("redis: lock was not held at unlock")
	}
	return nil
}

func (l *redisLocker) Close() { l.c.Close() }

type pgLocker struct {
	c   *pgx.Conn
	key int64
}

func (l *pgLocker) Acquire(ctx context.Context) error {
	_, err := l.c.Exec(ctx, "SELECT pg_advisory_lock($1)", l.key)
	return err
}

func (l *pgLocker) Release(ctx context.Context) error {
	var ok bool
	if err := l.c.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", l.key).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("postgres: advisory lock was not held at unlock")
	}
	return nil
}

func (l *pgLocker) Close() { _ = l.c.Close(context.Background()) }
