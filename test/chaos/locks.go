package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/proxy"
)

// locks: lock clients take one lock and, holding it, do an increment at a
// fenced resource that remembers the highest token it has seen and rejects
// lower ones. The token is the lock key's create revision. Everything but
// the harness is a real process: the resource (resource.go) and every lock
// client (lockclient.go) are this executable started again in another role.
// The clients take the same lock through three APIs that share its queue,
// (client id + acquisition number) modulo 3: clientv3's concurrency.Mutex,
// etcd's v3lock service, and tenure.v1 Locks.Lock (which returns the token;
// the others read the key).
//
// Each lock client talks to the cluster through its own proxies in the
// harness (chained in front of the members' client proxies), and reports
// its acquisitions and effects as JSON lines. The GC pause of the article is
// real: after an acquisition, before the client's write, the scheduler of
// this workload sometimes SIGSTOPs the client process — every thread,
// keepalives included — for longer than its lease TTL plus a margin, then
// SIGCONTs it; the client then does its write with the token it had. The
// resource must reject it if a newer owner has written since. Which
// acquisitions are paused follows from the seed (and one pause is forced
// early in every run), the rest of the interleaving from the machine.
// These pauses count as the fault "clientpause".
//
// Checks: tokens of distinct acquisitions are distinct; an acquisition that
// completed before another started has the smaller token (tokens increase
// in real time; all processes stamp CLOCK_MONOTONIC); the accepted effects'
// tokens never decrease in the resource's order; the resource's count
// equals its accepted effects and the effects the clients were told were
// accepted (each one reported exactly once; effects of unknown outcome
// bound the difference); every reported answer is the resource's; a paused
// client whose lock was taken by a newer owner that wrote never lands its
// write; the lock service never answers with another waiter's key; lock
// clients never die on their own and every one makes progress.
type locks struct {
	r        *run
	seed     uint64
	nclients int
	ttl      int
	name     string

	resource *child
	rc       *resourceClient
	clients  []*child
	proxies  [][]*proxy.Proxy
	off      time.Duration // run time = CLOCK_MONOTONIC + off
	pauseMu  sync.Mutex    // one paused client at a time
	// answering is read-held from an acquisition's report to the answer
	// (through a pause); the stop write-holds it to close the clients'
	// stdin, so that a paused client is resumed and writes before it is
	// told to stop.
	answering sync.RWMutex

	mu       sync.Mutex
	acqs     map[[2]int]*acquisition // by (client, n)
	reported []lcReport              // effects, as the clients reported them
	paused   int
	pausedOK int          // paused writes accepted (no newer owner had written)
	pausedNo int          // paused writes rejected
	expired  int          // pauses at whose end the client's lease was gone
	lost     int          // lock key gone before the write
	exits    map[int]bool // clients that reported their clean exit
	killed   map[int]bool // clients killed at the end without a clean exit
	ok       bool         // the processes started
}

// acquisition is one successful lock grant as a client saw it (times in
// run time).
type acquisition struct {
	Client  int           `json:"client"`
	N       int           `json:"n"`
	API     string        `json:"api"`
	Token   int64         `json:"token"`
	Lease   int64         `json:"lease"`
	Call    time.Duration `json:"call"`
	Got     time.Duration `json:"got"`
	Paused  time.Duration `json:"paused,omitempty"` // SIGSTOP held this long before the write
	Written string        `json:"written"`          // accepted, rejected, error, skipped, lost ("" = never reported)
	Seq     int64         `json:"seq,omitempty"`    // the resource's order of the write
}

func newLocks(r *run, seed uint64) *locks {
	return &locks{r: r, seed: seed, nclients: 6, ttl: 2, name: "/lock/fenced",
		acqs: map[[2]int]*acquisition{}, exits: map[int]bool{}, killed: map[int]bool{}}
}

func (w *locks) rel(mono time.Duration) time.Duration { return mono + w.off }

// start starts the resource and the client processes.
func (w *locks) start() error {
	w.off = w.r.mono() - monoNow()
	dir := w.r.tb.TempDir()
	res, err := w.r.startChild("resource", roleResource, filepath.Join(dir, "resource.log"))
	if err != nil {
		return fmt.Errorf("starting the resource: %w", err)
	}
	w.resource = res
	var first struct{ Addr string }
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case line, ok := <-res.lines:
		if !ok {
			code, _ := res.exitCode()
			return fmt.Errorf("the resource exited (code %d) before listening: %s", code, res.logTail(20))
		}
		if err := json.Unmarshal([]byte(line), &first); err != nil || first.Addr == "" {
			return fmt.Errorf("the resource said %q, not its address", line)
		}
	case <-t.C:
		return fmt.Errorf("the resource did not report its address within 30s")
	}
	w.rc = newResourceClient(first.Addr)
	for id := 0; id < w.nclients; id++ {
		var eps []string
		var pxs []*proxy.Proxy
		for i := range w.r.c.Members {
			target := strings.TrimPrefix(w.r.c.Endpoint(i), "http://")
			p, err := proxy.New("127.0.0.1:0", target)
			if err != nil {
				return fmt.Errorf("lock client proxy: %w", err)
			}
			w.r.tb.Cleanup(func() { p.Close() })
			pxs = append(pxs, p)
			eps = append(eps, "http://"+p.Addr())
		}
		w.proxies = append(w.proxies, pxs)
		c, err := w.r.startChild(fmt.Sprintf("lock client %d", id), roleLockClient, filepath.Join(dir, fmt.Sprintf("lockclient-%d.log", id)),
			"--id", fmt.Sprint(id), "--endpoints", strings.Join(eps, ","), "--resource", first.Addr,
			"--lock", w.name, "--ttl", fmt.Sprint(w.ttl), "--seed", fmt.Sprint(w.seed))
		if err != nil {
			return fmt.Errorf("starting lock client %d: %w", id, err)
		}
		w.clients = append(w.clients, c)
	}
	return nil
}

func (w *locks) run(ctx context.Context) {
	if err := w.start(); err != nil {
		w.r.tb.Fatalf("locks: %v", err)
	}
	w.ok = true
	w.r.logf("locks: resource pid %d, lock clients pids %v", w.resource.pid(), w.pids())
	// The forced pause: client forcedClient's acquisition number forcedAcq
	// (counting its acquisitions from 1) is paused whatever its dice say,
	// so that every run that makes progress SIGSTOPs a client at least once.
	forcedClient := int(w.seed % uint64(w.nclients))
	forcedAcq := 2 + int(w.seed/7%3)
	var wg sync.WaitGroup
	for id, c := range w.clients {
		rng := rand.New(rand.NewPCG(w.seed, 0x1c0+uint64(id)))
		forced := -1
		if id == forcedClient {
			forced = forcedAcq
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.follow(ctx, id, c, rng, forced)
		}()
	}
	<-ctx.Done()
	// stop: EOF on stdin; a client finishes its turn (its Lock is
	// cancelled, a write in flight completes) and exits
	w.answering.Lock()
	for _, c := range w.clients {
		c.closeStdin()
	}
	w.answering.Unlock()
	for id, c := range w.clients {
		if !c.wait(30 * time.Second) {
			w.r.logf("locks: lock client %d did not exit within 30s of its stop; killing it", id)
			w.mu.Lock()
			w.killed[id] = true
			w.mu.Unlock()
			c.kill()
		}
	}
	wg.Wait()
}

func (w *locks) pids() []int {
	var ps []int
	for _, c := range w.clients {
		ps = append(ps, c.pid())
	}
	return ps
}

// follow reads one client's reports until it exits, and decides which of
// its acquisitions are paused.
func (w *locks) follow(ctx context.Context, id int, c *child, rng *rand.Rand, forced int) {
	nacq := 0
	for line := range c.lines {
		var rep lcReport
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			w.r.anomaly("locks: lock client %d reported %q: %v", id, line, err)
			continue
		}
		if rep.Client != id {
			w.r.anomaly("locks: lock client %d reported as client %d: %q", id, rep.Client, line)
			rep.Client = id
		}
		for k := int64(0); k < rep.Ops; k++ {
			w.r.op()
		}
		switch rep.Ev {
		case "acquired":
			nacq++
			a := &acquisition{Client: id, N: rep.N, API: rep.API, Token: rep.Token, Lease: rep.Lease, Call: w.rel(rep.Call), Got: w.rel(rep.Got)}
			w.mu.Lock()
			w.acqs[[2]int{id, rep.N}] = a
			w.mu.Unlock()
			// the dice are thrown for every acquisition, so that the
			// sequence of choices depends only on the seed
			w.answering.RLock()
			roll := rng.IntN(8)
			d := time.Duration(w.ttl)*time.Second + 2*time.Second + time.Duration(rng.IntN(2000))*time.Millisecond
			cmd := "go"
			if ctx.Err() == nil && (nacq == forced || roll == 0) {
				if w.pause(id, c, a, d, nacq == forced) {
					cmd = "resume"
				}
			}
			if err := c.send(cmd); err != nil && ctx.Err() == nil {
				w.r.logf("locks: telling lock client %d to %s: %v", id, cmd, err)
			}
			w.answering.RUnlock()
		case "effect":
			if rep.Result != resSkipped {
				rep.At, rep.Done = w.rel(rep.At), w.rel(rep.Done)
			}
			w.mu.Lock()
			w.reported = append(w.reported, rep)
			if a := w.acqs[[2]int{id, rep.N}]; a == nil {
				w.r.anomaly("locks: lock client %d reported an effect for acquisition %d it never reported", id, rep.N)
			} else {
				a.Written, a.Seq = rep.Result, rep.Seq
				if a.Paused > 0 && rep.Result != resSkipped {
					w.paused++
					switch rep.Result {
					case resAccepted:
						w.pausedOK++
					case resRejected:
						w.pausedNo++
					}
				}
			}
			w.mu.Unlock()
		case "lost":
			w.mu.Lock()
			w.lost++
			w.mu.Unlock()
		case "wrongkey":
			w.r.anomaly("locks: lock client %d (%s): %s", id, rep.API, rep.Err)
		case "exit":
			w.mu.Lock()
			w.exits[id] = true
			w.mu.Unlock()
		default:
			w.r.anomaly("locks: lock client %d reported an unknown event %q", id, line)
		}
	}
	// stdout closed: the process is gone
	c.wait(10 * time.Second)
	code, _ := c.exitCode()
	w.mu.Lock()
	killed, clean := w.killed[id], w.exits[id]
	w.mu.Unlock()
	if !killed && (code != 0 || !clean) {
		w.r.anomaly("locks: lock client %d (pid %d) exited on its own with code %d (clean exit reported: %v); its log ends:\n%s", id, c.pid(), code, clean, c.logTail(20))
	}
}

// pause holds client id's process in SIGSTOP for d while it holds a; false
// if the pause did not happen (another client is paused, or the stop
// failed).
func (w *locks) pause(id int, c *child, a *acquisition, d time.Duration, forced bool) bool {
	if forced {
		w.pauseMu.Lock()
	} else if !w.pauseMu.TryLock() {
		return false
	}
	defer w.pauseMu.Unlock()
	if err := c.stop(); err != nil {
		w.r.anomaly("locks: SIGSTOP of lock client %d: %v", id, err)
		c.cont()
		return false
	}
	w.r.fault("clientpause")
	w.r.logf("locks: SIGSTOP lock client %d (pid %d) holding token %d (lease %x) for %v", id, c.pid(), a.Token, a.Lease, d)
	start := w.r.mono()
	sleep(d)
	// is the lease gone? (a note: expiry timing is the leases check's)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	ttl, err := w.r.c.ClientAll().TimeToLive(ctx, clientv3.LeaseID(a.Lease))
	cancel()
	expired := err == nil && ttl.TTL == -1
	if err := c.cont(); err != nil {
		w.r.anomaly("locks: SIGCONT of lock client %d: %v", id, err)
	}
	w.mu.Lock()
	a.Paused = w.r.mono() - start
	if expired {
		w.expired++
	}
	w.mu.Unlock()
	w.r.logf("locks: SIGCONT lock client %d after %v; its lease expired: %v (%v)", id, a.Paused.Round(time.Millisecond), expired, err)
	return true
}

func (w *locks) check(ctx context.Context) {
	if !w.ok {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := w.rc.state(sctx)
	cancel()
	w.resource.closeStdin()
	if !w.resource.wait(10 * time.Second) {
		w.resource.kill()
	}
	w.saveLogs()
	if err != nil {
		w.r.anomaly("locks: reading the resource's state: %v", err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	acqs := make([]*acquisition, 0, len(w.acqs))
	for _, a := range w.acqs {
		acqs = append(acqs, a)
	}
	sort.Slice(acqs, func(i, j int) bool { return acqs[i].Got < acqs[j].Got })
	for i := range st.Accepted {
		st.Accepted[i].At = w.rel(st.Accepted[i].At)
	}
	for i := range st.Rejected {
		st.Rejected[i].At = w.rel(st.Rejected[i].At)
	}
	b, _ := json.MarshalIndent(struct {
		Acquisitions []*acquisition `json:"acquisitions"`
		Reported     []lcReport     `json:"reported_effects"`
		Resource     resourceState  `json:"resource"`
	}{acqs, w.reported, st}, "", " ")
	w.r.save("locks.json", b)

	if len(acqs) == 0 {
		w.r.anomaly("locks: no lock client acquired the lock during the whole run")
	}
	perClient := map[int]int{}
	for _, a := range acqs {
		perClient[a.Client]++
	}
	for id := 0; id < w.nclients; id++ {
		if perClient[id] == 0 && w.r.cfg.Duration >= time.Minute {
			w.r.anomaly("locks: lock client %d never acquired the lock in %v (starved)", id, w.r.cfg.Duration)
		}
	}
	// distinct tokens
	byToken := map[int64]*acquisition{}
	for _, a := range acqs {
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
	for _, a := range acqs {
		for _, b := range acqs {
			if a.Got < b.Call && a.Token >= b.Token && !(a.Token == b.Token && a.Client == b.Client) {
				if bad < 5 {
					w.r.anomaly("locks: client %d got token %d at %v, then client %d asked at %v and got the smaller token %d", a.Client, a.Token, a.Got, b.Client, b.Call, b.Token)
				}
				bad++
			}
		}
	}
	// the resource: no stale effect, in its own order
	all := append(append([]effect(nil), st.Accepted...), st.Rejected...)
	sort.Slice(all, func(i, j int) bool { return all[i].Seq < all[j].Seq })
	accepted := map[int64]bool{}
	for _, e := range st.Accepted {
		accepted[e.Seq] = true
	}
	var highest int64
	for _, e := range all {
		if accepted[e.Seq] {
			if e.Token < highest {
				w.r.anomaly("locks: resource accepted token %d (client %d) after %d", e.Token, e.Client, highest)
			}
			highest = max(highest, e.Token)
		} else if e.Token >= highest {
			w.r.anomaly("locks: resource rejected token %d (client %d) though the highest it had accepted was %d", e.Token, e.Client, highest)
		}
	}
	if st.Highest != highest {
		w.r.anomaly("locks: resource reports highest token %d, its accepted effects say %d", st.Highest, highest)
	}
	if st.Count != len(st.Accepted) {
		w.r.anomaly("locks: resource count %d != %d accepted effects", st.Count, len(st.Accepted))
	}
	// the clients' view: every answer a client got is the resource's, and
	// the resource has no accepted effect nobody asked for
	bySeq := map[int64]effect{}
	for _, e := range all {
		bySeq[e.Seq] = e
	}
	toldAccepted, unknown := 0, 0
	for _, rep := range w.reported {
		switch rep.Result {
		case resAccepted, resRejected:
			e, ok := bySeq[rep.Seq]
			if !ok || e.Client != rep.Client || e.Token != rep.Token || e.N != rep.N || accepted[rep.Seq] != (rep.Result == resAccepted) {
				w.r.anomaly("locks: lock client %d was told %s for token %d (its acquisition %d, resource seq %d); the resource has %+v (found %v, accepted %v)", rep.Client, rep.Result, rep.Token, rep.N, rep.Seq, e, ok, accepted[rep.Seq])
			}
			if rep.Result == resAccepted {
				toldAccepted++
			}
		case resError:
			unknown++
		}
	}
	unknown += len(w.killed) // a killed client may have written without reporting
	if st.Count < toldAccepted || st.Count > toldAccepted+unknown {
		w.r.anomaly("locks: resource count %d, but clients were told of %d accepted effects (+%d of unknown outcome)", st.Count, toldAccepted, unknown)
	}
	// a paused client never lands a write once a newer owner has written
	for _, e := range st.Accepted {
		a := byToken[e.Token]
		if a == nil || a.Paused == 0 || a.Client != e.Client {
			continue
		}
		for _, o := range st.Accepted {
			if o.Token > e.Token && o.Seq < e.Seq {
				w.r.anomaly("locks: client %d, paused %v past its lease, landed token %d at %v after token %d was written at %v", e.Client, a.Paused, e.Token, e.At, o.Token, o.At)
			}
		}
	}
	perAPI := map[string]int{}
	for _, a := range acqs {
		perAPI[a.API]++
	}
	w.r.logf("locks: acquisitions by API %v, by client %v", perAPI, perClient)
	w.r.logf("locks: %d acquisitions, %d effects accepted, %d rejected, %d of unknown outcome, %d lost before use; SIGSTOPped past the lease: %d (lease gone at SIGCONT %d; write rejected %d, accepted because no newer owner had written %d)",
		len(acqs), len(st.Accepted), len(st.Rejected), unknown, w.lost, w.paused, w.expired, w.pausedNo, w.pausedOK)
	if w.paused > 0 && w.pausedNo == 0 {
		w.r.logf("locks: note: no paused write was rejected (no newer owner wrote during any pause)")
	}
}

// saveLogs keeps the helper processes' logs with the run's artifacts.
func (w *locks) saveLogs() {
	for _, c := range append([]*child{w.resource}, w.clients...) {
		if b, err := os.ReadFile(c.logPath); err == nil && len(b) > 0 {
			w.r.save(filepath.Base(c.logPath), b)
		}
	}
}
