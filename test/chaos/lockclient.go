package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"go.uber.org/zap"

	"github.com/tenure-io/tenure/api/tenurev1"
)

// A lock client process (TENURE_CHAOS_ROLE=lockclient): it takes one lock
// over and over and, holding it, increments the fenced resource (another
// process) with its fencing token. Its acquisition number n picks the lock
// API, (id+n) modulo 3: clientv3's concurrency.Mutex, etcd's v3lock service
// or tenure.v1 Locks.Lock — three APIs over one queue. It talks to the
// cluster through the endpoints it is given (the harness's proxies for this
// client).
//
// Protocol with the harness: one JSON line (lcReport) on stdout per event.
// After each acquisition it reports "acquired" and waits for one line on
// stdin before its write: "go", or "resume" when the harness has held it in
// SIGSTOP meanwhile (a GC pause: every thread, keepalives included, stopped
// past its lease). Either way it then does its write with the token it
// holds, exactly as a paused client would; after a "resume" it also gives up
// its session, whose lease has most likely expired. EOF on stdin or SIGTERM
// ends it: it stops taking the lock, finishes its turn and reports "exit".

// lcReport is one line a lock client reports. Times are CLOCK_MONOTONIC
// (monoNow).
type lcReport struct {
	Ev     string        `json:"ev"` // acquired, effect, lost, wrongkey, exit
	Client int           `json:"client"`
	N      int           `json:"n"` // acquisition attempt number
	API    string        `json:"api,omitempty"`
	Token  int64         `json:"token,omitempty"`
	Lease  int64         `json:"lease,omitempty"`
	Call   time.Duration `json:"call,omitempty"` // Lock sent
	Got    time.Duration `json:"got,omitempty"`  // Lock returned (and the token known)
	At     time.Duration `json:"at,omitempty"`   // increment sent
	Done   time.Duration `json:"done,omitempty"` // increment answered
	Result string        `json:"result,omitempty"`
	Seq    int64         `json:"seq,omitempty"`
	Err    string        `json:"err,omitempty"`
	Ops    int64         `json:"ops,omitempty"` // requests since the previous report
}

// Effect results a lock client reports.
const (
	resAccepted = "accepted"
	resRejected = "rejected"
	resError    = "error"   // no answer: the outcome is unknown
	resSkipped  = "skipped" // stopped before writing
)

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
}

type mutexLock struct{ *concurrency.Mutex }

func (mutexLock) Token() int64 { return 0 }

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

func (l *v3Lock) Key() string  { return l.key }
func (l *v3Lock) Token() int64 { return 0 }

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

func (l *nativeLock) Key() string  { return l.key }
func (l *nativeLock) Token() int64 { return l.token }

var errWrongKey = errors.New("lock service answered with another waiter's key")

// waiterKey is the key of lease's waiter under name (etcd's layout).
func waiterKey(name string, lease clientv3.LeaseID) string {
	return fmt.Sprintf("%s/%x", name, int64(lease))
}

// lockAPIs are the lock clients' APIs, (client id + acquisition number)
// modulo their number.
var lockAPIs = []struct {
	name string
	f    lockerFactory
}{{"mutex", mutexLocker}, {"v3lock", v3lockLocker}, {"native", nativeLocker}}

// lockClient is the state of the lock client process.
type lockClient struct {
	id       int
	name     string
	ttl      int
	cli      *clientv3.Client
	res      *resourceClient
	rng      *rand.Rand
	out      *json.Encoder
	cmds     <-chan string // stdin lines; closed at EOF
	ops      int64
	sess     *concurrency.Session
	exitCode int
}

func lockClientMain(args []string) int {
	fs := flag.NewFlagSet("lockclient", flag.ContinueOnError)
	id := fs.Int("id", 0, "client id")
	endpoints := fs.String("endpoints", "", "comma-separated client URLs")
	resource := fs.String("resource", "", "the fenced resource's host:port")
	name := fs.String("lock", "/lock/fenced", "lock name")
	ttl := fs.Int("ttl", 2, "session lease TTL in seconds")
	seed := fs.Uint64("seed", 0, "seed of the client's own choices (work time)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *endpoints == "" || *resource == "" {
		fmt.Fprintln(os.Stderr, "lockclient: --endpoints and --resource are required")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		defer cancel() // EOF: the harness is done with us
		s := bufio.NewScanner(os.Stdin)
		for s.Scan() {
			cmds <- s.Text()
		}
	}()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: strings.Split(*endpoints, ","), DialTimeout: 2 * time.Second,
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockclient:", err)
		return 1
	}
	defer cli.Close()
	c := &lockClient{
		id: *id, name: *name, ttl: *ttl, cli: cli, res: newResourceClient(*resource),
		rng: rand.New(rand.NewPCG(*seed, uint64(*id))), out: json.NewEncoder(os.Stdout), cmds: cmds,
	}
	for n := 0; ctx.Err() == nil; n++ {
		c.turn(ctx, n)
	}
	if c.sess != nil {
		c.dropSession()
	}
	c.report(lcReport{Ev: "exit"})
	return c.exitCode
}

func (c *lockClient) report(r lcReport) {
	r.Client = c.id
	r.Ops, c.ops = c.ops, 0
	if err := c.out.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "lockclient: reporting:", err)
		c.exitCode = 1
	}
}

// turn is one attempt: session, lock, token, the harness's go, the write,
// unlock.
func (c *lockClient) turn(ctx context.Context, n int) {
	if c.sess != nil {
		select {
		case <-c.sess.Done():
			c.sess = nil
		default:
		}
	}
	if c.sess == nil {
		// grant with a deadline (NewSession's own grant would wait out a
		// partition), then let the session keep it alive
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		lr, err := c.cli.Grant(gctx, int64(c.ttl))
		cancel()
		c.ops++
		if err != nil {
			sleep(100 * time.Millisecond)
			return
		}
		s, err := concurrency.NewSession(c.cli, concurrency.WithLease(lr.ID), concurrency.WithTTL(c.ttl), concurrency.WithContext(ctx))
		if err != nil {
			return
		}
		c.sess = s
	}
	api := lockAPIs[(c.id+n)%len(lockAPIs)]
	m := api.f(c.cli, c.sess, c.name)
	call := monoNow()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := m.Lock(lctx)
	cancel()
	c.ops++
	if errors.Is(err, errWrongKey) {
		c.report(lcReport{Ev: "wrongkey", N: n, API: api.name, Lease: int64(c.sess.Lease()), Err: err.Error()})
	}
	if err != nil {
		// the waiter's key may still be queued (the member that held the
		// call died, the outcome is unknown, or Mutex's own clean-up
		// failed): drop the lease so that the key goes, nobody waits
		// behind it, and the next turn (maybe through another API)
		// starts clean
		c.dropSession()
		return
	}
	token := m.Token()
	if token == 0 {
		// the token: the lock key's create revision
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		kr, err := c.cli.Get(gctx, m.Key())
		cancel()
		c.ops++
		if err != nil || len(kr.Kvs) == 0 {
			// cannot learn the token (or the key is gone): give up the turn
			c.report(lcReport{Ev: "lost", N: n, API: api.name, Lease: int64(c.sess.Lease())})
			c.unlock(m)
			return
		}
		token = kr.Kvs[0].CreateRevision
	}
	got := monoNow()
	c.report(lcReport{Ev: "acquired", N: n, API: api.name, Token: token, Lease: int64(c.sess.Lease()), Call: call, Got: got})
	// The harness answers at once, or after holding this process in
	// SIGSTOP. A stop or a vanished harness: no write.
	var cmd string
	t := time.NewTimer(time.Minute)
	select {
	case cmd = <-c.cmds:
	case <-t.C:
		fmt.Fprintln(os.Stderr, "lockclient: no word from the harness for a minute after an acquisition")
		c.exitCode = 1
	}
	t.Stop()
	if cmd != "go" && cmd != "resume" {
		c.report(lcReport{Ev: "effect", N: n, Token: token, Result: resSkipped})
		c.unlock(m)
		return
	}
	if cmd == "go" {
		sleep(time.Duration(c.rng.IntN(30)) * time.Millisecond) // the work
	}
	// The write, with the token this client holds (or held, before a pause):
	// never cancelled by a stop, so that its outcome is known.
	at := monoNow()
	ictx, icancel := context.WithTimeout(context.Background(), 5*time.Second)
	res, err := c.res.increment(ictx, c.id, n, token)
	icancel()
	done := monoNow()
	rep := lcReport{Ev: "effect", N: n, Token: token, At: at, Done: done, Seq: res.Seq}
	switch {
	case err != nil:
		rep.Result, rep.Err = resError, err.Error()
	case res.Accepted:
		rep.Result = resAccepted
	default:
		rep.Result = resRejected
	}
	c.report(rep)
	c.unlock(m)
	if cmd == "resume" && c.sess != nil {
		// the session's lease most likely expired while stopped
		c.sess.Orphan()
		c.sess = nil
	}
}

// unlock releases m; if that fails, the session goes too (its lease takes
// the key along), so that the next turn starts clean whatever the API.
func (c *lockClient) unlock(m heldLock) {
	uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := m.Unlock(uctx)
	cancel()
	c.ops++
	if err != nil && c.sess != nil {
		c.dropSession()
	}
}

// dropSession stops the session's keepalives and revokes its lease (best
// effort: otherwise it expires within the TTL).
func (c *lockClient) dropSession() {
	if c.sess == nil {
		return
	}
	c.sess.Orphan()
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	c.cli.Revoke(rctx, c.sess.Lease())
	cancel()
	c.ops++
	c.sess = nil
}
