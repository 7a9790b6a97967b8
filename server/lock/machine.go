package lock

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/btree"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/tenure-io/tenure/server/mvcc"
	"github.com/tenure-io/tenure/server/storage"
)

// Limits and defaults.
const (
	DefaultMaxWaiters = 10000
	MaxDelayMs        = 60_000
	MaxNameBytes      = 1024
)

// Errors. The API edge maps them to gRPC codes.
var (
	ErrLeaseRequired  = errors.New("tenure: lock: a lease is required (lease 0 would make an owner nobody can expire)")
	ErrInvalidName    = errors.New("tenure: lock: invalid lock name")
	ErrTooManyWaiters = errors.New("tenure: lock: too many waiters on this lock; a coordinator is not a queue — shard the work or use a real queue")
	ErrWaiterRemoved  = errors.New("tenure: lock: the waiter's key was deleted before the lock was granted (lease expired or revoked, or key deleted)")
	ErrDelayTooLong   = errors.New("tenure: lock: lock-delay must be between 0 and 60s")
	ErrUnknownLock    = errors.New("tenure: lock: unknown lock")
)

// Cause says why a key left a queue.
type Cause uint8

// Causes.
const (
	CauseDeleted      Cause = iota // explicit delete: unlock, resign, plain Delete
	CauseLeaseExpired              // the key's lease expired
	CauseLeaseRevoked              // the key's lease was revoked
)

func (c Cause) String() string {
	switch c {
	case CauseLeaseExpired:
		return "lease-expired"
	case CauseLeaseRevoked:
		return "lease-revoked"
	default:
		return "released"
	}
}

// NoteKind classifies a Note.
type NoteKind uint8

// Note kinds.
const (
	NoteGranted      NoteKind = iota + 1 // Key owns the lock at Token
	NoteLost                             // owner Key (Token) no longer owns it (Cause)
	NoteRemoved                          // waiter Key (Token) left the queue before a grant (Cause)
	NoteUpdated                          // the owner's key was rewritten (Value; Proclaim)
	NoteDelayStarted                     // the owner's lease expired: no grant for DelayMs (Epoch)
)

// Note is what one apply decided about one lock, published after commit.
type Note struct {
	Kind    NoteKind
	Lock    string
	Key     string
	Token   int64 // create revision of Key
	Lease   int64
	Rev     int64 // revision at which it happened
	Cause   Cause
	Epoch   uint64 // NoteDelayStarted: raft index at which the delay began
	DelayMs int64
	Value   []byte
	// Origin and ReqID (NoteGranted): the member whose call acquired Key
	// and that call's request (Op.ReqID), when the key was last written by
	// an OpAcquire; 0 for plain-KV keys.
	Origin, ReqID uint64
}

// Owner describes a lock's current holder.
type Owner struct {
	Key   string
	Token int64
	Lease int64
}

// ReleaseResult is the outcome of OpRelease.
type ReleaseResult struct {
	Released bool  // the key held the token and is gone
	Rev      int64 // the revision of the delete, or the current one
}

// AcquireResult is the outcome of OpAcquire.
type AcquireResult struct {
	Key     string
	Token   int64 // create revision of Key (0 when a TryLock did not enqueue)
	ModRev  int64 // mod revision this call wrote to Key (Locks.abandon compares it)
	Granted bool
	Rev     int64
	Owner   Owner // zero when nobody holds the lock
	Waiters int   // keys in the queue, the owner included
	Blocked bool  // a lock-delay is running
}

// Env is what apply lends the machine for one entry.
type Env interface {
	Begin() *mvcc.Txn      // a write txn on the entry's batch
	End(t *mvcc.Txn) int64 // ends t; the machine observes its events (Observe)
	LeaseExists(id int64) bool
}

type entry struct {
	key        string
	rev, lease int64
	origin     uint64 // member of the call that last acquired key (routing only)
	reqID      uint64 // that call's Op.ReqID
	prev, next *entry
}

type queue struct {
	name       string
	head, tail *entry
	n          int
	byKey      map[string]*entry
	granted    *entry
	grantRev   int64
	delayMs    int64
	blocked    uint64 // raft index at which the running lock-delay began; 0: none
	sticky     bool   // registered explicitly (Observe): kept while empty
}

// idle: nothing keeps the lock registered but recent use.
func (q *queue) idle() bool { return q.head == nil && q.delayMs == 0 && q.blocked == 0 && !q.sticky }

func (q *queue) push(e *entry) {
	e.prev = q.tail
	if q.tail != nil {
		q.tail.next = e
	} else {
		q.head = e
	}
	q.tail = e
	q.byKey[e.key] = e
	q.n++
}

func (q *queue) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		q.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		q.tail = e.prev
	}
	e.prev, e.next = nil, nil
	delete(q.byKey, e.key)
	q.n--
}

// Machine is the lock and election state machine. Apply-side methods
// (BeginEntry, SetCause, Observe, Apply, Publish, Reload) are called by the
// apply goroutine only; the read methods may be called from anywhere.
type Machine struct {
	kv *mvcc.Store
	db storage.Iterable
	lg *slog.Logger

	mu     sync.Mutex
	locks  map[string]*queue
	b      *pebble.Batch
	index  uint64
	cause  Cause
	origin uint64 // Op.Origin and Op.ReqID of the acquire being applied; 0 otherwise
	reqID  uint64
	dirty  []*queue
	staged []Note

	// empty caches names known to have no live key under <name>/ (a lock
	// forgotten when its last key went, no put under it since), so that
	// using such a lock again skips ensure's range read. That read costs a
	// seek per key ever written under the prefix since the last compaction
	// (every session that ever queued leaves a tombstoned key), which on a
	// busy lock made each acquire of an idle lock cost ~1 ms. A cache
	// only: an entry saves a read whose result is known, so outcomes do
	// not depend on it; Observe drops an entry on any put under it.
	empty    map[string]struct{}
	emptyCap int
	ranges   atomic.Uint64 // queue reads from the store (tests)

	// idle holds the names of registered locks with no key, no lock-delay
	// and no explicit registration. They stay registered (their record
	// stays in the store) until more than idleMax are idle; then the
	// smallest names are forgotten. A lock taken and released over and
	// over is then registered once instead of once per cycle (a record
	// write on every acquire and a delete on every release). The set
	// follows from replicated state alone (records and keys), so every
	// member, restarted or not, forgets the same locks at the same entry.
	idle    *btree.BTreeG[string]
	idleMax int

	waiters map[string]map[*Waiter]struct{}
	subs    map[string]map[*Sub]struct{}
	onDelay func(Note)
	onGrant func(Note)

	wakeups atomic.Uint64
	pushed  atomic.Uint64 // calls woken by DeliverGrant
}

// New loads the registered locks and rebuilds their queues from kv.
func New(db storage.Iterable, kv *mvcc.Store, lg *slog.Logger) (*Machine, error) {
	if lg == nil {
		lg = slog.Default()
	}
	m := &Machine{kv: kv, db: db, lg: lg, empty: map[string]struct{}{}, emptyCap: emptyCacheMax, idleMax: idleMax,
		waiters: map[string]map[*Waiter]struct{}{}, subs: map[string]map[*Sub]struct{}{}}
	return m, m.Reload()
}

func recordKey(name string) []byte {
	return storage.Key(storage.PrefixLock, []byte{'n'}, []byte(name))
}

// Reload rebuilds every queue from the store (restart, snapshot install).
func (m *Machine) Reload() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	locks := map[string]*queue{}
	lo := []byte{storage.PrefixLock, 'n'}
	it, err := m.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: []byte{storage.PrefixLock, 'n' + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		name := string(it.Key()[2:])
		v := it.Value()
		if len(v) != 17 {
			return fmt.Errorf("tenure: lock: corrupt record for %q", name)
		}
		q := &queue{name: name, byKey: map[string]*entry{}, delayMs: int64(binary.BigEndian.Uint64(v)), blocked: binary.BigEndian.Uint64(v[8:]), sticky: v[16] == 1}
		resp, err := m.kv.Range(&pb.RangeRequest{Key: []byte(name + "/"), RangeEnd: prefixEnd(name), KeysOnly: true})
		if err != nil {
			return err
		}
		fill(q, resp.Kvs)
		locks[name] = q
	}
	if err := it.Error(); err != nil {
		return err
	}
	m.locks = locks
	m.idle = btree.NewG(16, func(a, b string) bool { return a < b })
	for name, q := range locks {
		if q.idle() {
			m.idle.ReplaceOrInsert(name)
		}
	}
	clear(m.empty)
	m.dirty = m.dirty[:0]
	return nil
}

// emptyCacheMax bounds Machine.empty; when full it is cleared (a miss only
// costs the range read).
const emptyCacheMax = 16384

// idleMax bounds the idle locks kept registered (Machine.idle).
const idleMax = 1024

func prefixEnd(name string) []byte {
	e := []byte(name + "/")
	e[len(e)-1]++ // '/'+1 = '0'
	return e
}

func fill(q *queue, kvs []*mvccpb.KeyValue) {
	kvs = slices.Clone(kvs)
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	for _, kv := range kvs {
		q.push(&entry{key: string(kv.Key), rev: kv.CreateRevision, lease: kv.Lease})
	}
	if q.blocked == 0 && q.head != nil {
		q.granted = q.head
		q.grantRev = q.head.rev
	}
}

func (m *Machine) persist(q *queue) {
	v := make([]byte, 17)
	binary.BigEndian.PutUint64(v, uint64(q.delayMs))
	binary.BigEndian.PutUint64(v[8:], q.blocked)
	if q.sticky {
		v[16] = 1
	}
	if err := m.b.Set(recordKey(q.name), v, nil); err != nil {
		panic(fmt.Sprintf("tenure: lock: stage record: %v", err))
	}
}

// BeginEntry starts applying the entry at index into b.
func (m *Machine) BeginEntry(b *pebble.Batch, index uint64) {
	m.mu.Lock()
	m.b, m.index, m.cause = b, index, CauseDeleted
	m.mu.Unlock()
}

// SetCause says why the keys deleted by the following txns go (lease expiry
// or revoke); it lasts until the next BeginEntry or SetCause.
func (m *Machine) SetCause(c Cause) {
	m.mu.Lock()
	m.cause = c
	m.mu.Unlock()
}

// Observe is called after every mvcc txn in apply with its events: queues
// follow puts and deletes under registered lock prefixes, and every lock
// whose owner went is handed to the next key in the same apply.
func (m *Machine) Observe(rev int64, events []*mvccpb.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observe(rev, events)
}

func (m *Machine) observe(rev int64, events []*mvccpb.Event) {
	if len(m.locks) == 0 && len(m.empty) == 0 {
		return
	}
	for _, ev := range events {
		key := ev.Kv.Key
		for i := 1; i < len(key); i++ {
			if key[i] != '/' {
				continue
			}
			if q := m.locks[string(key[:i])]; q != nil {
				m.apply1(q, rev, ev)
			} else if ev.Type == mvccpb.PUT {
				if _, ok := m.empty[string(key[:i])]; ok {
					delete(m.empty, string(key[:i]))
				}
			}
		}
	}
	m.settle(rev)
}

func (m *Machine) apply1(q *queue, rev int64, ev *mvccpb.Event) {
	k := string(ev.Kv.Key)
	e := q.byKey[k]
	switch ev.Type {
	case mvccpb.PUT:
		if e == nil {
			q.push(&entry{key: k, rev: ev.Kv.CreateRevision, lease: ev.Kv.Lease, origin: m.origin, reqID: m.reqID})
			m.markDirty(q)
			return
		}
		e.lease = ev.Kv.Lease
		if m.origin != 0 {
			e.origin, e.reqID = m.origin, m.reqID // asked again, maybe from another member
		}
		if q.granted == e {
			m.staged = append(m.staged, Note{Kind: NoteUpdated, Lock: q.name, Key: k, Token: e.rev, Lease: e.lease, Rev: rev, Value: ev.Kv.Value})
		}
	case mvccpb.DELETE:
		if e == nil {
			return
		}
		q.remove(e)
		m.markDirty(q)
		if q.granted != e {
			m.staged = append(m.staged, Note{Kind: NoteRemoved, Lock: q.name, Key: k, Token: e.rev, Lease: e.lease, Rev: rev, Cause: m.cause})
			return
		}
		q.granted = nil
		m.staged = append(m.staged, Note{Kind: NoteLost, Lock: q.name, Key: k, Token: e.rev, Lease: e.lease, Rev: rev, Cause: m.cause})
		if m.cause == CauseLeaseExpired && q.delayMs > 0 {
			q.blocked = m.index
			m.persist(q)
			m.staged = append(m.staged, Note{Kind: NoteDelayStarted, Lock: q.name, Rev: rev, Epoch: q.blocked, DelayMs: q.delayMs})
		}
	}
}

func (m *Machine) markDirty(q *queue) {
	if !slices.Contains(m.dirty, q) {
		m.dirty = append(m.dirty, q)
	}
}

// settle grants every dirty lock that has no owner to its oldest key, keeps
// the idle set current and forgets the idle locks over idleMax.
func (m *Machine) settle(rev int64) {
	for _, q := range m.dirty {
		m.grant(q, rev)
		if m.locks[q.name] != q {
			continue // forgotten since it was marked
		}
		if q.idle() {
			m.idle.ReplaceOrInsert(q.name)
		} else {
			m.idle.Delete(q.name)
		}
	}
	m.dirty = m.dirty[:0]
	for m.idle.Len() > m.idleMax {
		name, _ := m.idle.DeleteMin()
		m.forget(name)
	}
}

// forget unregisters an idle lock and remembers it as empty.
func (m *Machine) forget(name string) {
	delete(m.locks, name)
	if len(m.empty) >= m.emptyCap {
		clear(m.empty)
	}
	m.empty[name] = struct{}{}
	if err := m.b.Delete(recordKey(name), nil); err != nil {
		panic(fmt.Sprintf("tenure: lock: stage record: %v", err))
	}
}

func (m *Machine) grant(q *queue, rev int64) {
	if q.granted != nil || q.blocked != 0 || q.head == nil {
		return
	}
	q.granted, q.grantRev = q.head, rev
	m.staged = append(m.staged, Note{Kind: NoteGranted, Lock: q.name, Key: q.head.key, Token: q.head.rev, Lease: q.head.lease, Rev: rev, Origin: q.head.origin, ReqID: q.head.reqID})
}

// ensure returns the queue for name, registering it (and reading the keys
// already under its prefix through the batch) when it is new.
func (m *Machine) ensure(env Env, name string) *queue {
	if q := m.locks[name]; q != nil {
		return q
	}
	q := &queue{name: name, byKey: map[string]*entry{}}
	if _, known := m.empty[name]; known {
		delete(m.empty, name) // no key under the prefix: nothing to read
	} else {
		m.ranges.Add(1)
		t := env.Begin()
		resp, err := t.Range(&pb.RangeRequest{Key: []byte(name + "/"), RangeEnd: prefixEnd(name), KeysOnly: true})
		m.mu.Unlock()
		env.End(t)
		m.mu.Lock()
		if err != nil {
			panic(fmt.Sprintf("tenure: lock: read queue %q: %v", name, err))
		}
		fill(q, resp.Kvs)
	}
	m.locks[name] = q
	m.persist(q)
	m.markDirty(q) // its idleness is settled with the entry's next txn
	return q
}

// KeyFor is the queue key of lease in lock name: name/<lease in hex>, the
// layout clientv3's concurrency.Mutex and Election use.
func KeyFor(name []byte, lease int64) string {
	b := make([]byte, 0, len(name)+18)
	b = append(append(b, name...), '/')
	return string(strconv.AppendInt(b, lease, 16)) // fmt's %x of an int64, without fmt
}

// ParseKey splits a waiter key made by KeyFor into the lock name and the
// lease; ok is false for any other key (not in KeyFor's exact form, or
// with an invalid name or lease 0).
func ParseKey(key []byte) (name []byte, lease int64, ok bool) {
	i := bytes.LastIndexByte(key, '/')
	if i < 0 {
		return nil, 0, false
	}
	lease, err := strconv.ParseInt(string(key[i+1:]), 16, 64)
	if err != nil || lease == 0 || ValidName(key[:i]) != nil || KeyFor(key[:i], lease) != string(key) {
		return nil, 0, false
	}
	return key[:i], lease, true
}

// ValidName checks a lock name.
func ValidName(name []byte) error {
	if len(name) == 0 || len(name) > MaxNameBytes || bytes.IndexByte(name, 0) >= 0 {
		return ErrInvalidName
	}
	return nil
}

// Apply applies a lock entry's payload. It returns the request id and
// either an *AcquireResult or an error (the proposer's answer).
func (m *Machine) Apply(env Env, payload []byte) (uint64, any, error) {
	op, err := Unmarshal(payload)
	if err != nil {
		return 0, nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ValidName(op.Name); err != nil {
		return op.ReqID, nil, err
	}
	name := string(op.Name)
	switch op.Kind {
	case OpAcquire:
		res, err := m.acquire(env, name, op)
		return op.ReqID, res, err
	case OpRegister:
		q := m.ensure(env, name)
		if !q.sticky {
			q.sticky = true
			m.persist(q)
		}
		m.markDirty(q)
		m.settle(m.kvRev())
		return op.ReqID, m.result(q, nil), nil
	case OpSetDelay:
		if op.DelayMs < 0 || op.DelayMs > MaxDelayMs {
			return op.ReqID, nil, ErrDelayTooLong
		}
		q := m.ensure(env, name)
		q.delayMs = op.DelayMs
		m.persist(q)
		m.markDirty(q)
		m.settle(m.kvRev())
		return op.ReqID, m.result(q, nil), nil
	case OpRelease, OpDelete:
		return op.ReqID, m.release(env, op), nil
	case OpEndDelay:
		q := m.locks[name]
		if q == nil || q.blocked == 0 || q.blocked != op.Epoch {
			return op.ReqID, nil, nil // stale: already ended, or a newer delay runs
		}
		q.blocked = 0
		m.persist(q)
		m.markDirty(q)
		m.settle(m.kvRev())
		return op.ReqID, m.result(q, nil), nil
	default:
		return op.ReqID, nil, errMalformed
	}
}

func (m *Machine) kvRev() int64 {
	// The staged revision is not exported by mvcc; a grant decided by a
	// non-mvcc entry reports the published revision it follows.
	return m.kv.Rev()
}

func (m *Machine) acquire(env Env, name string, op *Op) (*AcquireResult, error) {
	if op.Lease == 0 {
		return nil, ErrLeaseRequired
	}
	if !env.LeaseExists(op.Lease) {
		return nil, mvcc.ErrLeaseNotFound
	}
	q := m.ensure(env, name)
	key := KeyFor(op.Name, op.Lease)
	e := q.byKey[key]
	if e == nil {
		if op.Flags&FlagTry != 0 && (q.head != nil || q.blocked != 0) {
			return m.result(q, nil), nil
		}
		if op.MaxWaiters > 0 && q.n >= int(op.MaxWaiters) {
			return nil, ErrTooManyWaiters
		}
	}
	put := &pb.PutRequest{Key: []byte(key), Value: op.Value, Lease: op.Lease}
	if e != nil && op.Flags&FlagElection == 0 {
		// The same lease asks again while its key is queued or granted: the
		// key is rewritten, value kept, so that its mod revision names this
		// call. A call that gave up earlier deletes the key only if the mod
		// revision is still the one it was given (Locks.abandon), so its
		// delete, however late, cannot remove what this call waits on or
		// holds. The create revision, the token, does not change.
		put.Value, put.IgnoreValue = nil, true
	}
	t := env.Begin()
	_, err := t.Put(put)
	m.origin, m.reqID = op.Origin, op.ReqID // the key's events carry them (apply1)
	m.mu.Unlock()
	rev := env.End(t) // Observe runs here (it takes m.mu)
	m.mu.Lock()
	m.origin, m.reqID = 0, 0
	if err != nil {
		return nil, err
	}
	q = m.locks[name]
	e = q.byKey[key]
	r := m.result(q, e)
	r.ModRev = rev
	return r, nil
}

// release deletes the op's key if its create revision is the token
// (op.Epoch); the hand-off to the next waiter happens in the same apply
// (Observe). The key is looked up through mvcc, so a lock the machine does
// not track (plain-KV users only) is released the same way.
func (m *Machine) release(env Env, op *Op) *ReleaseResult {
	t := env.Begin()
	held := false
	var err error
	switch key := []byte(KeyFor(op.Name, op.Lease)); {
	case op.Kind == OpDelete:
		held, err = t.DeleteKey(key)
	case op.Epoch != 0:
		held, err = t.DeleteAt(key, int64(op.Epoch))
	}
	if err != nil {
		// Every member must apply the entry alike; one that cannot read or
		// stage its own store must stop, not answer "not released".
		panic(fmt.Sprintf("tenure: lock: release %s: %v", KeyFor(op.Name, op.Lease), err))
	}
	m.mu.Unlock()
	rev := env.End(t) // Observe runs here (it takes m.mu)
	m.mu.Lock()
	return &ReleaseResult{Released: held, Rev: rev}
}

func (m *Machine) result(q *queue, e *entry) *AcquireResult {
	r := &AcquireResult{Waiters: q.n, Blocked: q.blocked != 0, Rev: q.grantRev}
	if q.granted != nil {
		r.Owner = Owner{Key: q.granted.key, Token: q.granted.rev, Lease: q.granted.lease}
	}
	if e != nil {
		r.Key, r.Token = e.key, e.rev
		r.Granted = q.granted == e
	}
	return r
}

// Publish delivers the notes staged since the last call (after the batch
// is committed and the revision published).
func (m *Machine) Publish() {
	m.mu.Lock()
	notes := m.staged
	m.staged = nil
	var delays, grants []Note
	for _, n := range notes {
		switch n.Kind {
		case NoteGranted, NoteRemoved:
			m.deliverLocked(n)
			if n.Kind == NoteGranted && n.Origin != 0 {
				grants = append(grants, n)
			}
		case NoteDelayStarted:
			delays = append(delays, n)
		}
		for s := range m.subs[n.Lock] {
			select {
			case s.c <- n:
			default:
				s.overflow()
				delete(m.subs[n.Lock], s)
			}
		}
	}
	hook, onGrant := m.onDelay, m.onGrant
	m.mu.Unlock()
	if hook != nil {
		for _, n := range delays {
			hook(n)
		}
	}
	if onGrant != nil {
		for _, n := range grants {
			onGrant(n)
		}
	}
}

// deliverLocked hands a Granted or Removed note to the calls waiting on its
// key. A waiter gets each grant once: the leader's pushed copy
// (DeliverGrant) and this member's own apply both deliver it. m.mu is held.
func (m *Machine) deliverLocked(n Note) int {
	woken := 0
	for w := range m.waiters[n.Key] {
		if n.Kind == NoteGranted {
			if w.granted == n.Token {
				continue
			}
			w.granted = n.Token
		}
		select {
		case w.c <- n:
			m.wakeups.Add(1)
			woken++
		default:
			m.lg.Warn("lock waiter channel full; note dropped", "key", n.Key)
		}
	}
	return woken
}

// SetGrantHook sets f to be called, after Publish delivered the batch's
// notes, with every grant of a key an OpAcquire wrote (Note.Origin set).
// The server uses it on the leader to push the grant to the member holding
// the waiting call (DeliverGrant there), which then answers its client
// without waiting to learn the commit and apply the entry itself.
func (m *Machine) SetGrantHook(f func(Note)) {
	m.mu.Lock()
	m.onGrant = f
	m.mu.Unlock()
}

// DeliverGrant wakes the calls on this member waiting for n's key with a
// grant decided by a committed entry this member may not have applied yet
// (pushed by the leader). It reports how many calls it woke; none when no
// call waits here or they already have this grant. It changes no state:
// this member's own apply reaches the same grant later.
func (m *Machine) DeliverGrant(n Note) int {
	if n.Kind != NoteGranted {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	woken := m.deliverLocked(n)
	m.pushed.Add(uint64(woken))
	return woken
}

// PushedGrantsDelivered counts the calls DeliverGrant woke.
func (m *Machine) PushedGrantsDelivered() uint64 { return m.pushed.Load() }

// Wakeups counts notes delivered to waiting Lock/Campaign calls.
func (m *Machine) Wakeups() uint64 { return m.wakeups.Load() }

// Waiter receives the notes about one queue key.
type Waiter struct {
	m       *Machine
	key     string
	c       chan Note
	granted int64 // token of the last grant delivered (m.mu)
}

// C delivers the Granted and Removed notes for the key.
func (w *Waiter) C() <-chan Note { return w.c }

// WaitKey registers interest in key's notes. Register before proposing the
// acquire so that a grant decided in the same apply is not missed.
func (m *Machine) WaitKey(key string) *Waiter {
	w := &Waiter{m: m, key: key, c: make(chan Note, 8)}
	m.mu.Lock()
	addToSet(m.waiters, key, w)
	m.mu.Unlock()
	return w
}

// Close unregisters w.
func (w *Waiter) Close() {
	w.m.mu.Lock()
	removeFromSet(w.m.waiters, w.key, w)
	w.m.mu.Unlock()
}

// addToSet and removeFromSet keep a map of sets without empty sets.
func addToSet[K, V comparable](sets map[K]map[V]struct{}, k K, v V) {
	set := sets[k]
	if set == nil {
		set = map[V]struct{}{}
		sets[k] = set
	}
	set[v] = struct{}{}
}

func removeFromSet[K, V comparable](sets map[K]map[V]struct{}, k K, v V) {
	if set := sets[k]; set != nil {
		delete(set, v)
		if len(set) == 0 {
			delete(sets, k)
		}
	}
}

// Sub receives every note about one lock.
type Sub struct {
	m    *Machine
	name string
	c    chan Note
	once sync.Once
	done chan struct{}
}

// C delivers the notes; Overflowed is closed when the subscriber fell behind
// and was dropped.
func (s *Sub) C() <-chan Note { return s.c }

// Overflowed is closed if notes were dropped because the reader was slow.
func (s *Sub) Overflowed() <-chan struct{} { return s.done }

func (s *Sub) overflow() { s.once.Do(func() { close(s.done) }) }

// Subscribe registers interest in every note about lock name.
func (m *Machine) Subscribe(name string) *Sub {
	s := &Sub{m: m, name: name, c: make(chan Note, 256), done: make(chan struct{})}
	m.mu.Lock()
	addToSet(m.subs, name, s)
	m.mu.Unlock()
	return s
}

// Close unregisters s.
func (s *Sub) Close() {
	s.m.mu.Lock()
	removeFromSet(s.m.subs, s.name, s)
	s.m.mu.Unlock()
}

// State is a lock as the state machine sees it.
type State struct {
	Known   bool
	Owner   Owner   // zero when nobody holds it
	Queue   []Owner // every key in order, the owner first
	Waiters int     // len of the queue (the owner included)
	DelayMs int64
	Blocked uint64 // raft index at which a running lock-delay began; 0: none
}

// Get returns lock name's state, with at most maxQueue queue entries.
func (m *Machine) Get(name string, maxQueue int) State {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.locks[name]
	if q == nil {
		return State{}
	}
	st := State{Known: true, Waiters: q.n, DelayMs: q.delayMs, Blocked: q.blocked}
	if q.granted != nil {
		st.Owner = Owner{Key: q.granted.key, Token: q.granted.rev, Lease: q.granted.lease}
	}
	for e := q.head; e != nil && len(st.Queue) < maxQueue; e = e.next {
		st.Queue = append(st.Queue, Owner{Key: e.key, Token: e.rev, Lease: e.lease})
	}
	return st
}

// Held reports whether lock name has an owner or a running lock-delay, as
// of the last applied entry: an acquire of it now would queue.
func (m *Machine) Held(name []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.locks[string(name)]
	return q != nil && (q.granted != nil || q.blocked != 0)
}

// Blocked lists the locks whose lock-delay is running, by name.
func (m *Machine) Blocked() []Note {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Note
	for _, q := range m.locks {
		if q.blocked != 0 {
			out = append(out, Note{Kind: NoteDelayStarted, Lock: q.name, Epoch: q.blocked, DelayMs: q.delayMs})
		}
	}
	slices.SortFunc(out, func(a, b Note) int { return strings.Compare(a.Lock, b.Lock) })
	return out
}

// SetDelayHook sets the function told of every lock-delay that starts (the
// leader's scheduler). It is called outside the machine's lock.
func (m *Machine) SetDelayHook(f func(Note)) {
	m.mu.Lock()
	m.onDelay = f
	m.mu.Unlock()
}
