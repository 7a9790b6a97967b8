package lock

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/tenure-io/tenure/server/mvcc"
)

// harness drives a Machine the way apply does: one batch per entry, every
// mvcc txn observed, commit, publish.
type harness struct {
	t      *testing.T
	fs     vfs.FS
	db     *pebble.DB
	kv     *mvcc.Store
	m      *Machine
	leases map[int64]map[string]bool
	index  uint64
	rev    int64
}

type fakeLeaseIndex struct{ h *harness }

func (f fakeLeaseIndex) Exists(id int64) bool { _, ok := f.h.leases[id]; return ok }
func (f fakeLeaseIndex) Attach(id int64, key []byte) {
	if s, ok := f.h.leases[id]; ok {
		s[string(key)] = true
	}
}
func (f fakeLeaseIndex) Detach(id int64, key []byte) { delete(f.h.leases[id], string(key)) }

type henv struct {
	h *harness
	b *pebble.Batch
}

func (e henv) Begin() *mvcc.Txn { return e.h.kv.Begin(e.b, fakeLeaseIndex{e.h}) }
func (e henv) End(t *mvcc.Txn) int64 {
	rev, evs := t.End()
	e.h.m.Observe(rev, evs)
	if rev > e.h.rev {
		e.h.rev = rev
	}
	return rev
}
func (e henv) LeaseExists(id int64) bool { _, ok := e.h.leases[id]; return ok }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, fs: vfs.NewMem(), leases: map[int64]map[string]bool{}}
	h.open()
	t.Cleanup(h.close)
	return h
}

func (h *harness) open() {
	db, err := pebble.Open("db", &pebble.Options{FS: h.fs, Logger: pebbleQuiet{}})
	if err != nil {
		h.t.Fatal(err)
	}
	kv, err := mvcc.Open(db, quiet)
	if err != nil {
		h.t.Fatal(err)
	}
	m, err := New(db, kv, quiet)
	if err != nil {
		h.t.Fatal(err)
	}
	h.db, h.kv, h.m, h.rev = db, kv, m, kv.Rev()
}

func (h *harness) close() {
	if h.kv != nil {
		h.kv.Close()
		_ = h.db.Close()
		h.kv = nil
	}
}

func (h *harness) reopen() {
	h.close()
	h.open()
}

// entry applies fn as one raft entry.
func (h *harness) entry(fn func(e henv)) {
	h.t.Helper()
	b := h.db.NewIndexedBatch()
	defer b.Close()
	h.index++
	h.m.BeginEntry(b, h.index)
	fn(henv{h, b})
	if err := h.kv.Seal(b); err != nil {
		h.t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		h.t.Fatal(err)
	}
	h.kv.Publish(h.rev)
	h.m.Publish()
}

func (h *harness) grant(ids ...int64) {
	for _, id := range ids {
		h.leases[id] = map[string]bool{}
	}
}

func (h *harness) op(op *Op) (*AcquireResult, error) {
	h.t.Helper()
	var res any
	var err error
	h.entry(func(e henv) { _, res, err = h.m.Apply(e, op.Marshal()) })
	r, _ := res.(*AcquireResult)
	return r, err
}

func (h *harness) acquire(name string, lease int64) *AcquireResult {
	h.t.Helper()
	r, err := h.op(&Op{Kind: OpAcquire, Name: []byte(name), Lease: lease, MaxWaiters: DefaultMaxWaiters})
	if err != nil {
		h.t.Fatalf("acquire %s %x: %v", name, lease, err)
	}
	return r
}

func (h *harness) put(key string, lease int64) {
	h.entry(func(e henv) {
		t := e.Begin()
		if _, err := t.Put(&pb.PutRequest{Key: []byte(key), Lease: lease}); err != nil {
			h.t.Fatal(err)
		}
		e.End(t)
	})
}

func (h *harness) del(key string) {
	h.entry(func(e henv) {
		t := e.Begin()
		if _, err := t.DeleteRange(&pb.DeleteRangeRequest{Key: []byte(key)}); err != nil {
			h.t.Fatal(err)
		}
		e.End(t)
	})
}

// endLease expires (or revokes) a lease: its keys go in one txn.
func (h *harness) endLease(id int64, c Cause) {
	h.entry(func(e henv) {
		h.m.SetCause(c)
		var keys [][]byte
		for k := range h.leases[id] {
			keys = append(keys, []byte(k))
		}
		delete(h.leases, id)
		t := e.Begin()
		t.DeleteKeys(keys)
		e.End(t)
	})
}

func (h *harness) owner(name string) Owner { return h.m.Get(name, 0).Owner }

func (h *harness) release(name string, lease, token int64) *ReleaseResult {
	h.t.Helper()
	return h.applyRelease(&Op{Kind: OpRelease, Name: []byte(name), Lease: lease, Epoch: uint64(token)})
}

func (h *harness) applyRelease(op *Op) *ReleaseResult {
	h.t.Helper()
	var res any
	var err error
	h.entry(func(e henv) { _, res, err = h.m.Apply(e, op.Marshal()) })
	if err != nil {
		h.t.Fatalf("%+v: %v", op, err)
	}
	return res.(*ReleaseResult)
}

// queueOfTwo makes lease 0x1 the owner of name and lease 0x2 its waiter,
// and watches the waiter's key.
func (h *harness) queueOfTwo(name string) (owner, next *AcquireResult, w *Waiter) {
	h.grant(0x1, 0x2)
	owner = h.acquire(name, 0x1)
	next = h.acquire(name, 0x2)
	w = h.m.WaitKey(next.Key)
	h.t.Cleanup(w.Close)
	return owner, next, w
}

// expectHandedOff checks that r removed the owner key and that the same
// apply granted next, at r's revision.
func (h *harness) expectHandedOff(name string, r *ReleaseResult, w *Waiter, next *AcquireResult) {
	h.t.Helper()
	if !r.Released || r.Rev <= next.Token {
		h.t.Fatalf("release of %s's owner: %+v", name, r)
	}
	if n, ok := recv(h.t, w); !ok || n.Kind != NoteGranted || n.Rev != r.Rev {
		h.t.Fatalf("next waiter got %+v (%v), want a grant at the release's revision %d", n, ok, r.Rev)
	}
	if o := h.owner(name); o.Key != next.Key {
		h.t.Fatalf("owner %+v, want %s", o, next.Key)
	}
}

// OpDelete (etcd's v3lock Unlock) deletes the key whatever its create
// revision and hands the lock to the next waiter in the same apply; a key
// that is gone is reported not released at the current revision.
func TestDeleteHandsOff(t *testing.T) {
	h := newHarness(t)
	_, b, w := h.queueOfTwo("d")
	r := h.applyRelease(&Op{Kind: OpDelete, Name: []byte("d"), Lease: 0x1})
	h.expectHandedOff("d", r, w, b)
	again := h.applyRelease(&Op{Kind: OpDelete, Name: []byte("d"), Lease: 0x1})
	if again.Released || again.Rev != r.Rev {
		t.Fatalf("second delete: %+v, want not released at revision %d", again, r.Rev)
	}
}

func TestParseKey(t *testing.T) {
	for _, lease := range []int64{1, 0xabc, 0x7fffffffffffffff} {
		key := KeyFor([]byte("a/b"), lease)
		name, got, ok := ParseKey([]byte(key))
		if !ok || string(name) != "a/b" || got != lease {
			t.Errorf("ParseKey(%q) = %q, %x, %v", key, name, got, ok)
		}
	}
	for _, key := range []string{"", "nolease", "/1", "n/", "n/0", "n/01", "n/ABC", "n/xyz", "n/1 ", "n\x00/1"} {
		if _, _, ok := ParseKey([]byte(key)); ok {
			t.Errorf("ParseKey(%q) accepted a key KeyFor does not make", key)
		}
	}
}

// OpRelease deletes the key only at its token, and the next waiter is
// granted in the same apply; a wrong or zero token changes nothing; a lock
// the machine does not track (plain-KV keys only) is released alike.
func TestReleaseAtToken(t *testing.T) {
	h := newHarness(t)
	a, b, w := h.queueOfTwo("r")
	for _, tok := range []int64{0, a.Token - 1, a.Token + 1, b.Token} {
		if r := h.release("r", 0x1, tok); r.Released {
			t.Fatalf("released at token %d, the key's is %d", tok, a.Token)
		}
	}
	if o := h.owner("r"); o.Key != a.Key {
		t.Fatalf("owner %+v after refused releases, want %s", o, a.Key)
	}
	h.expectHandedOff("r", h.release("r", 0x1, a.Token), w, b)

	// A key no service call registered.
	h.put(KeyFor([]byte("plain"), 0x1), 0x1)
	tok := h.kv.Rev()
	if r := h.release("plain", 0x1, tok); !r.Released {
		t.Fatalf("plain-KV key not released at its token %d", tok)
	}
	if resp, err := h.kv.Range(&pb.RangeRequest{Key: []byte(KeyFor([]byte("plain"), 0x1))}); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("plain-KV key still there: %v %v", resp, err)
	}
}

func recv(t *testing.T, w *Waiter) (Note, bool) {
	t.Helper()
	select {
	case n := <-w.C():
		return n, true
	default:
		return Note{}, false
	}
}

func TestFIFOAndOneWakeupPerHandoff(t *testing.T) {
	h := newHarness(t)
	const n = 6
	ids := []int64{0x10, 0x20, 0x30, 0x40, 0x50, 0x60}
	h.grant(ids...)
	waiters := map[int64]*Waiter{}
	tokens := map[int64]int64{}
	for i, id := range ids {
		waiters[id] = h.m.WaitKey(KeyFor([]byte("job"), id))
		r := h.acquire("job", id)
		tokens[id] = r.Token
		if r.Granted != (i == 0) {
			t.Fatalf("acquire %d: granted=%v", i, r.Granted)
		}
		if r.Waiters != i+1 {
			t.Fatalf("acquire %d: waiters=%d", i, r.Waiters)
		}
	}
	// The first owner was granted by its own acquire: one note to its waiter.
	if n, ok := recv(t, waiters[ids[0]]); !ok || n.Kind != NoteGranted {
		t.Fatalf("first owner note = %+v %v", n, ok)
	}
	last := tokens[ids[0]]
	for i := 0; i < n-1; i++ {
		before := h.m.Wakeups()
		h.del(KeyFor([]byte("job"), ids[i]))
		if got := h.m.Wakeups() - before; got != 1 {
			t.Fatalf("hand-off %d woke %d waiters, want exactly 1", i, got)
		}
		next := ids[i+1]
		nt, ok := recv(t, waiters[next])
		if !ok || nt.Kind != NoteGranted || nt.Token != tokens[next] {
			t.Fatalf("hand-off %d: next waiter got %+v %v", i, nt, ok)
		}
		for _, other := range ids[i+2:] {
			if nt, ok := recv(t, waiters[other]); ok {
				t.Fatalf("waiter %x woken out of turn: %+v", other, nt)
			}
		}
		if o := h.owner("job"); o.Token != tokens[next] || o.Token <= last {
			t.Fatalf("owner %+v after hand-off %d (last token %d)", o, i, last)
		}
		last = tokens[next]
	}
}

func TestPlainKVKeysShareTheQueue(t *testing.T) {
	h := newHarness(t)
	h.grant(1, 2, 3)
	// A clientv3 Mutex user got there first, before the lock was known.
	h.put("m/1", 1)
	h.put("unrelated", 0)
	h.put("m/2", 2)
	r := h.acquire("m", 3)
	if r.Granted || r.Owner.Key != "m/1" || r.Waiters != 3 {
		t.Fatalf("acquire behind plain keys: %+v", r)
	}
	w := h.m.WaitKey("m/3")
	h.del("m/1")
	if o := h.owner("m"); o.Key != "m/2" {
		t.Fatalf("owner after plain delete = %+v", o)
	}
	if _, ok := recv(t, w); ok {
		t.Fatal("third waiter woken early")
	}
	h.del("m/2")
	if n, ok := recv(t, w); !ok || n.Kind != NoteGranted {
		t.Fatalf("lock-service waiter not granted after plain keys: %+v", n)
	}
}

func TestWaiterLeaseExpiryNeverGranted(t *testing.T) {
	h := newHarness(t)
	h.grant(1, 2, 3)
	h.acquire("l", 1)
	w2 := h.m.WaitKey(KeyFor([]byte("l"), 2))
	r2 := h.acquire("l", 2)
	h.acquire("l", 3)
	h.endLease(2, CauseLeaseExpired)
	n, ok := recv(t, w2)
	if !ok || n.Kind != NoteRemoved || n.Cause != CauseLeaseExpired || n.Token != r2.Token {
		t.Fatalf("expired waiter note = %+v %v", n, ok)
	}
	h.del(KeyFor([]byte("l"), 1))
	if n, ok := recv(t, w2); ok {
		t.Fatalf("expired waiter told %+v", n)
	}
	if o := h.owner("l"); o.Lease != 3 {
		t.Fatalf("owner = %+v, want lease 3", o)
	}
}

func TestHandoffOnOwnerExpiryAndRevoke(t *testing.T) {
	for _, c := range []Cause{CauseLeaseExpired, CauseLeaseRevoked} {
		t.Run(c.String(), func(t *testing.T) {
			h := newHarness(t)
			h.grant(1, 2)
			h.acquire("l", 1)
			w := h.m.WaitKey(KeyFor([]byte("l"), 2))
			sub := h.m.Subscribe("l")
			h.acquire("l", 2)
			h.endLease(1, c)
			if n, ok := recv(t, w); !ok || n.Kind != NoteGranted {
				t.Fatalf("waiter after owner %s: %+v", c, n)
			}
			lost := <-sub.C()
			for lost.Kind != NoteLost {
				lost = <-sub.C()
			}
			if lost.Cause != c || lost.Lease != 1 {
				t.Fatalf("lost note = %+v", lost)
			}
		})
	}
}

func TestLockDelayOnlyAfterExpiry(t *testing.T) {
	h := newHarness(t)
	h.grant(1, 2, 3)
	if _, err := h.op(&Op{Kind: OpSetDelay, Name: []byte("d"), DelayMs: 5000}); err != nil {
		t.Fatal(err)
	}
	var started []Note
	h.m.SetDelayHook(func(n Note) { started = append(started, n) })
	h.acquire("d", 1)
	h.acquire("d", 2)
	h.acquire("d", 3)
	// Explicit unlock: no delay.
	h.del(KeyFor([]byte("d"), 1))
	if o := h.owner("d"); o.Lease != 2 || len(started) != 0 {
		t.Fatalf("after unlock: owner %+v, delays %v", o, started)
	}
	// Expiry: the next grant waits.
	w := h.m.WaitKey(KeyFor([]byte("d"), 3))
	h.endLease(2, CauseLeaseExpired)
	st := h.m.Get("d", 0)
	if st.Owner.Key != "" || st.Blocked == 0 || len(started) != 1 {
		t.Fatalf("after expiry: %+v, delays %v", st, started)
	}
	if _, ok := recv(t, w); ok {
		t.Fatal("granted during lock-delay")
	}
	// Survives a restart.
	h.reopen()
	if st := h.m.Get("d", 0); st.Blocked != started[0].Epoch || st.Owner.Key != "" || st.DelayMs != 5000 {
		t.Fatalf("after reopen: %+v", st)
	}
	w = h.m.WaitKey(KeyFor([]byte("d"), 3))
	// A stale end (wrong epoch) changes nothing; the right one grants.
	if _, err := h.op(&Op{Kind: OpEndDelay, Name: []byte("d"), Epoch: started[0].Epoch + 100}); err != nil {
		t.Fatal(err)
	}
	if h.owner("d").Key != "" {
		t.Fatal("stale end-delay granted")
	}
	if _, err := h.op(&Op{Kind: OpEndDelay, Name: []byte("d"), Epoch: started[0].Epoch}); err != nil {
		t.Fatal(err)
	}
	if n, ok := recv(t, w); !ok || n.Kind != NoteGranted || n.Lease != 3 {
		t.Fatalf("after delay: %+v %v", n, ok)
	}
}

func TestAcquireErrorsAndLimits(t *testing.T) {
	h := newHarness(t)
	h.grant(1, 2, 3)
	if _, err := h.op(&Op{Kind: OpAcquire, Name: []byte("x"), Lease: 0}); !errors.Is(err, ErrLeaseRequired) {
		t.Fatalf("lease 0: %v", err)
	}
	if _, err := h.op(&Op{Kind: OpAcquire, Name: []byte("x"), Lease: 99}); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("missing lease: %v", err)
	}
	if _, err := h.op(&Op{Kind: OpAcquire, Name: nil, Lease: 1}); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("empty name: %v", err)
	}
	if _, err := h.op(&Op{Kind: OpSetDelay, Name: []byte("x"), DelayMs: MaxDelayMs + 1}); !errors.Is(err, ErrDelayTooLong) {
		t.Fatalf("delay too long: %v", err)
	}
	h.acquire("x", 1)
	// TryLock on a held lock: no key written, owner reported.
	r, err := h.op(&Op{Kind: OpAcquire, Name: []byte("x"), Lease: 2, Flags: FlagTry})
	if err != nil || r.Granted || r.Token != 0 || r.Owner.Lease != 1 || r.Waiters != 1 {
		t.Fatalf("try on held lock: %+v %v", r, err)
	}
	// Re-acquire with the same lease is the same key and token.
	r1 := h.acquire("x", 1)
	if !r1.Granted || r1.Waiters != 1 {
		t.Fatalf("re-acquire: %+v", r1)
	}
	if _, err := h.op(&Op{Kind: OpAcquire, Name: []byte("x"), Lease: 2, MaxWaiters: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.op(&Op{Kind: OpAcquire, Name: []byte("x"), Lease: 3, MaxWaiters: 2}); !errors.Is(err, ErrTooManyWaiters) {
		t.Fatalf("over the waiter limit: %v", err)
	}
}

func TestReloadRebuildsQueues(t *testing.T) {
	h := newHarness(t)
	for i := int64(1); i <= 5; i++ {
		h.grant(i)
		h.acquire("r", i)
	}
	h.del(KeyFor([]byte("r"), 1))
	h.endLease(3, CauseLeaseExpired)
	before := h.m.Get("r", 10)
	h.reopen()
	after := h.m.Get("r", 10)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("reload changed state:\n%+v\n%+v", before, after)
	}
	// Empty locks without a delay are forgotten past the idle cap (no
	// unbounded registry).
	h.m.idleMax = 0
	h.del(KeyFor([]byte("r"), 2))
	h.endLease(4, CauseLeaseRevoked)
	h.endLease(5, CauseLeaseExpired)
	if st := h.m.Get("r", 0); st.Known {
		t.Fatalf("empty lock still registered: %+v", st)
	}
}

// registered lists the names the machine tracks.
func (h *harness) registered() []string {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	var names []string
	for n := range h.m.locks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Idle locks (no key, no delay) stay registered up to the cap: a lock taken
// and released again is neither re-read nor re-registered. Past the cap the
// smallest names are forgotten, and a member that restarts rebuilds the
// same registry from the store (records and keys), so all members keep
// forgetting the same locks at the same entries.
func TestIdleLocksStayRegisteredUpToTheCap(t *testing.T) {
	h := newHarness(t)
	h.m.idleMax = 3
	h.grant(0x1)
	for _, name := range []string{"l4", "l1", "l5", "l0", "l3", "l2"} {
		r := h.acquire(name, 0x1)
		if !r.Granted {
			t.Fatalf("%s not granted", name)
		}
		h.del(r.Key)
		if n := len(h.registered()); n > 3 {
			t.Fatalf("%d idle locks registered, cap 3", n)
		}
	}
	if got, want := fmt.Sprint(h.registered()), "[l3 l4 l5]"; got != want {
		t.Fatalf("registered %s, want %s (the smallest names forgotten first)", got, want)
	}
	reads := h.m.ranges.Load()
	for i := 0; i < 3; i++ {
		r := h.acquire("l4", 0x1)
		if !r.Granted {
			t.Fatalf("cycle %d: idle lock not granted", i)
		}
		h.del(r.Key)
	}
	if n := h.m.ranges.Load(); n != reads {
		t.Fatalf("an idle registered lock was read from the store %d times", n-reads)
	}

	before := h.registered()
	h.reopen()
	h.m.idleMax = 3
	if after := h.registered(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("restart rebuilt registry %v, running member had %v", after, before)
	}
	// Both go on evicting alike: one more idle lock forgets l3.
	r := h.acquire("l9", 0x1)
	h.del(r.Key)
	if got, want := fmt.Sprint(h.registered()), "[l4 l5 l9]"; got != want {
		t.Fatalf("after restart registered %s, want %s", got, want)
	}
	// A lock with keys is never evicted, however small its name.
	h.grant(0x2)
	h.acquire("a", 0x2)
	for _, name := range []string{"m1", "m2", "m3", "m4"} {
		r := h.acquire(name, 0x1)
		h.del(r.Key)
	}
	if o := h.owner("a"); o.Key != KeyFor([]byte("a"), 0x2) {
		t.Fatalf("held lock lost its owner %+v after idle evictions", o)
	}
	if reg := h.registered(); !slices.Contains(reg, "a") {
		t.Fatalf("held lock a evicted: %v", reg)
	}
}

func TestOpRoundTrip(t *testing.T) {
	op := &Op{Kind: OpAcquire, ReqID: 7, Name: []byte("a/b"), Lease: -5, Value: []byte("v"), Flags: FlagTry, MaxWaiters: 3, DelayMs: 9, Epoch: 11, Origin: 13}
	got, err := Unmarshal(op.Marshal())
	if err != nil || fmt.Sprint(got) != fmt.Sprint(op) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	// An entry written before Origin existed has no trailing origin.
	legacy := op.Marshal()
	legacy = legacy[:len(legacy)-8]
	old, err := Unmarshal(legacy)
	want := *op
	want.Origin = 0
	if err != nil || fmt.Sprint(old) != fmt.Sprint(&want) {
		t.Fatalf("entry without an origin: %+v %v, want %+v", old, err, &want)
	}
	if _, err := Unmarshal(append(op.Marshal(), 0)); err == nil {
		t.Fatal("op with a trailing byte decoded")
	}
	if _, err := Unmarshal(op.Marshal()[:10]); err == nil {
		t.Fatal("truncated op decoded")
	}
}

func FuzzUnmarshal(f *testing.F) {
	f.Add((&Op{Kind: OpAcquire, Name: []byte("x")}).Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := Unmarshal(b)
		if err != nil {
			return
		}
		if _, err := Unmarshal(op.Marshal()); err != nil {
			t.Fatal(err)
		}
	})
}

type pebbleQuiet struct{}

func (pebbleQuiet) Infof(string, ...any)      {}
func (pebbleQuiet) Errorf(f string, a ...any) { fmt.Printf("pebble: "+f+"\n", a...) }
func (pebbleQuiet) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

// A lock forgotten when its last key went is remembered as empty: using it
// again reads nothing from the store. A put under its prefix in between
// (a plain-KV Mutex key) drops that knowledge, and the queue is read again.
func TestForgottenLockSkipsQueueReadUntilAPutUnderIt(t *testing.T) {
	h := newHarness(t)
	h.m.idleMax = 0 // forget a lock as soon as its last key goes
	h.grant(0x1, 0x2)
	name := "idle"
	for i := 0; i < 3; i++ {
		r := h.acquire(name, 0x1)
		if !r.Granted {
			t.Fatalf("cycle %d: not granted", i)
		}
		h.del(r.Key)
		if h.m.Get(name, 0).Known {
			t.Fatalf("cycle %d: lock not forgotten after its last key went", i)
		}
	}
	if n := h.m.ranges.Load(); n != 1 {
		t.Fatalf("queue read %d times over 3 cycles, want 1 (then the empty cache)", n)
	}

	h.put(name+"/2", 0x2) // a plain-KV waiter arrives while the lock is forgotten
	r := h.acquire(name, 0x1)
	if r.Granted {
		t.Fatal("granted over a key already under the prefix")
	}
	if o := h.owner(name); o.Key != name+"/2" {
		t.Fatalf("owner = %q, want the plain key %s/2", o.Key, name)
	}
	if n := h.m.ranges.Load(); n != 2 {
		t.Fatalf("queue read %d times, want 2: the put must drop the cached emptiness", n)
	}

	// Nested prefixes: a put under "a/b/" also holds a key under "a/".
	h.grant(0x3)
	r = h.acquire("a", 0x3)
	h.del(r.Key)
	h.put("a/b/c", 0x3)
	if r := h.acquire("a", 0x1); r.Granted {
		t.Fatal(`granted "a" over a key under a/ (a/b/c)`)
	}
}

// The cache is bounded: when full it starts over, and a miss only costs the
// range read.
func TestEmptyLockCacheIsBounded(t *testing.T) {
	h := newHarness(t)
	h.m.emptyCap = 4
	h.m.idleMax = 0
	h.grant(0x1)
	for i := 0; i < 10; i++ {
		r := h.acquire(fmt.Sprintf("l%d", i), 0x1)
		h.del(r.Key)
		if len(h.m.empty) > 4 {
			t.Fatalf("empty cache holds %d names, cap 4", len(h.m.empty))
		}
	}
	if r := h.acquire("l0", 0x1); !r.Granted {
		t.Fatal("evicted lock not granted")
	}
}

// KeyFor matches clientv3's Mutex key (fmt's %x of the lease ID), negative
// IDs included.
func TestKeyForMatchesClientv3(t *testing.T) {
	for _, l := range []int64{1, 0x694d7a5b1c2d3e4f, -5, 255} {
		if got, want := KeyFor([]byte("n/x"), l), fmt.Sprintf("%s/%x", "n/x", l); got != want {
			t.Fatalf("KeyFor(%d) = %q, want %q", l, got, want)
		}
	}
}

// An acquire by a lease whose key is already queued (or granted) keeps the
// key's place, token and value but rewrites it: the mod revision it reports
// is its own and is the key's, so a delete that compares an earlier call's
// mod revision (Locks.abandon) cannot remove the key this call waits on.
func TestReacquireMovesModRevisionOnly(t *testing.T) {
	h := newHarness(t)
	h.grant(0x1, 0x2)
	owner := h.acquire("re", 0x1)
	first, err := h.op(&Op{Kind: OpAcquire, Name: []byte("re"), Lease: 0x2, Value: []byte("first"), MaxWaiters: DefaultMaxWaiters})
	if err != nil {
		t.Fatal(err)
	}
	if first.ModRev != first.Token {
		t.Fatalf("a new key's mod revision %d, want its create revision %d", first.ModRev, first.Token)
	}
	for _, r := range []struct {
		lease int64
		prev  *AcquireResult
	}{{0x2, first}, {0x1, owner}} {
		again := h.acquire("re", r.lease)
		if again.Token != r.prev.Token || again.Key != r.prev.Key || again.Granted != r.prev.Granted {
			t.Fatalf("re-acquire by %x: %+v, want the same key, token and grant as %+v", r.lease, again, r.prev)
		}
		if again.ModRev <= r.prev.ModRev {
			t.Fatalf("re-acquire by %x: mod revision %d, want above the earlier call's %d", r.lease, again.ModRev, r.prev.ModRev)
		}
		resp, err := h.kv.Range(&pb.RangeRequest{Key: []byte(again.Key)})
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("range %s: %v %v", again.Key, resp, err)
		}
		if kv := resp.Kvs[0]; kv.ModRevision != again.ModRev || kv.CreateRevision != again.Token || kv.Lease != r.lease {
			t.Fatalf("stored %+v, want mod revision %d, create revision %d, lease %x", kv, again.ModRev, again.Token, r.lease)
		}
		if r.lease == 0x2 && string(resp.Kvs[0].Value) != "first" {
			t.Fatalf("re-acquire changed the value to %q, want the first call's %q", resp.Kvs[0].Value, "first")
		}
	}
	if st := h.m.Get("re", 10); st.Owner.Key != owner.Key || st.Waiters != 2 || st.Queue[1].Key != first.Key {
		t.Fatalf("queue after re-acquires: %+v, want owner %s and two keys", st, owner.Key)
	}
}
