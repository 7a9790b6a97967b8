package apply

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/tenure-io/tenure/server/lease"
	"github.com/tenure-io/tenure/server/lock"
	"github.com/tenure-io/tenure/server/mvcc"
)

// Entry kinds (first byte of a raft entry's data).
const (
	KindEtcd            byte = 0x01
	KindLeaseRenew      byte = 0x02
	KindLeaseExpire     byte = 0x03
	KindLeaseCheckpoint byte = 0x04
	KindLock            byte = 0x05 // lock.Op (native lock operations)
)

// Errors returned to proposers.
var (
	ErrRequestTooLarge = errors.New("tenure: request is too large")
	ErrTimeout         = errors.New("tenure: request timed out")
	ErrStopped         = errors.New("tenure: server stopped")
)

// Proposer hands data to raft (raftnode.Node).
type Proposer interface {
	Propose(ctx context.Context, data []byte) error
	ID() uint64
}

// Notifier receives each published revision's events (watch.Hub).
type Notifier interface {
	Notify(rev int64, events []*mvccpb.Event)
}

// Result is what a proposer gets back once its entry is applied.
type Result struct {
	Resp proto.Message // *pb.PutResponse, *pb.TxnResponse, …; Header.Revision set
	Lock any           // KindLock entries: the lock machine's answer (*lock.AcquireResult)
	TTL  int64         // KindLeaseRenew pairs: the TTL the renewal granted
	Err  error
}

type revEvents struct {
	rev    int64
	events []*mvccpb.Event
}

type staged struct {
	id     uint64
	res    Result
	origin uint64 // lock ops: the member that proposed it (lock.Op.Origin)
}

// Config wires an Applier.
type Config struct {
	KV              *mvcc.Store
	Lessor          *lease.Lessor
	Hub             Notifier
	DB              *pebble.DB // for Reload after a snapshot
	MaxRequestBytes int
	Logger          *slog.Logger
	Locks           *lock.Machine // optional: lock and election queues
}

// Applier is the state machine (raftnode.StateMachine) and the proposal path.
type Applier struct {
	kv     *mvcc.Store
	lessor *lease.Lessor
	hub    Notifier
	locks  *lock.Machine
	db     *pebble.DB
	lg     *slog.Logger
	maxReq int

	node   Proposer
	idBase uint64
	idSeq  atomic.Uint64

	mu    sync.Mutex
	waits map[uint64]chan Result
	// orphans: requests whose caller stopped waiting (timeout) after they
	// were handed to raft; their result, if they ever apply here, goes to
	// the function (DoLockOrphaned). Bounded by maxOrphans and orphanAge.
	orphans map[uint64]orphan
	// pushResult sends lock op results to the member that proposed them
	// (SetResultPusher); pushed counts results delivered here that way.
	pushResult func(origin, id uint64, res Result)
	pushed     atomic.Uint64
	// renewStarted holds when each of this member's pending renewals was
	// received, for the lessor's no-raft acknowledgements (Lessor.Renew).
	renewStarted map[uint64]time.Time

	renews renewBatcher // keepalives waiting for their batched entry (leaseloop.go)

	// Staged by ApplyEntry, published by Committed (apply goroutine only).
	stagedRes  []staged
	stagedRevs []revEvents
	lastRev    int64

	appliedIndex atomic.Uint64
	alarms       alarmSet           // replicated alarms (alarm.go)
	leaseExpired atomic.Uint64      // leases revoked by expiry (metrics)
	onApplied    func(index uint64) // test hook
}

// New builds an Applier. SetProposer must be called before Do.
func New(cfg Config) *Applier {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Applier{
		kv: cfg.KV, lessor: cfg.Lessor, hub: cfg.Hub, locks: cfg.Locks, db: cfg.DB, lg: cfg.Logger,
		maxReq: cfg.MaxRequestBytes, waits: map[uint64]chan Result{}, orphans: map[uint64]orphan{},
		renewStarted: map[uint64]time.Time{},
	}
}

// SetProposer connects the raft node. Request ids are unique per member
// (member id in the high bits) and per process start (time in the middle).
func (a *Applier) SetProposer(p Proposer) {
	a.node = p
	a.idBase = (p.ID()&0xffff)<<48 | (uint64(time.Now().UnixMilli())&0xffffffffff)<<8
}

func (a *Applier) nextID() uint64 { return a.idBase + a.idSeq.Add(1) }

// NewRequestID returns a request id for DoLock (Op.ReqID) that the caller
// needs to know before proposing: a grant the leader pushes names the
// acquire by it (lock.Note.ReqID).
func (a *Applier) NewRequestID() uint64 { return a.nextID() }

// Do proposes an etcd request and waits for its result.
func (a *Applier) Do(ctx context.Context, r *pb.InternalRaftRequest) Result {
	id := a.nextID()
	r.ID = id
	r.Header = &pb.RequestHeader{ID: id}
	body, err := proto.Marshal(r)
	if err != nil {
		return Result{Err: err}
	}
	return a.propose(ctx, id, append([]byte{KindEtcd}, body...))
}

// Renew proposes a keepalive for lease id and returns the TTL granted. The
// renewal rides in the member's next batched KindLeaseRenew entry
// (leaseloop.go); it is answered once that entry is applied. It fails with
// ErrTimeout after timeout (no timer when timeout <= 0) or when ctx ends.
// The time it is called is recorded for the lessor (Lessor.Renew): once
// this renewal is applied, the member may answer renewals of the lease
// without raft for the grace (Lessor.RenewLocal, which the keepalive
// handler asks before calling Renew).
func (a *Applier) Renew(ctx context.Context, leaseID int64, timeout time.Duration) (int64, error) {
	id, ch := a.register()
	a.mu.Lock()
	a.renewStarted[id] = time.Now() // before the proposal: no member applies it earlier
	a.mu.Unlock()
	defer a.forget(id)
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	b := a.enqueueRenew(id, leaseID)
	defer a.renewDone(b)
	res := awaitInBatch(ctx, ch, b, expired)
	if res.Err != nil {
		return 0, res.Err
	}
	return res.TTL, nil
}

// awaitInBatch waits for the result of a request riding in renewal batch
// b: ErrTimeout when expired fires or ctx ends first, b's proposal error
// when b could not be handed to raft.
func awaitInBatch(ctx context.Context, ch <-chan Result, b *renewBatch, expired <-chan time.Time) Result {
	select {
	case res := <-ch:
		return res
	case <-b.done:
		if b.err != nil {
			return Result{Err: b.err}
		}
	case <-expired:
		return Result{Err: ErrTimeout}
	case <-ctx.Done():
		return Result{Err: ErrTimeout}
	}
	select {
	case res := <-ch:
		return res
	case <-expired:
	case <-ctx.Done():
	}
	return Result{Err: ErrTimeout}
}

// register makes a request id whose result apply will deliver on the
// returned channel; forget drops it.
func (a *Applier) register() (uint64, chan Result) {
	id := a.nextID()
	return id, a.expect(id)
}

// expect returns the channel apply will deliver request id's result on.
func (a *Applier) expect(id uint64) chan Result {
	ch := make(chan Result, 1)
	a.mu.Lock()
	a.waits[id] = ch
	a.mu.Unlock()
	return ch
}

func (a *Applier) forget(id uint64) {
	a.mu.Lock()
	delete(a.waits, id)
	delete(a.renewStarted, id)
	a.mu.Unlock()
}

func (a *Applier) propose(ctx context.Context, id uint64, data []byte) Result {
	return a.proposeOrphaning(ctx, id, data, nil)
}

// proposeOrphaning is propose; when the caller stops waiting after the
// entry was handed to raft and onOrphan is set, the entry's result, if it
// is ever applied here, goes to onOrphan (on a goroutine of its own).
func (a *Applier) proposeOrphaning(ctx context.Context, id uint64, data []byte, onOrphan func(Result)) Result {
	c, err := a.start(ctx, id, data, onOrphan)
	if err != nil {
		return Result{Err: err}
	}
	select {
	case res := <-c.ch:
		a.forget(id)
		return res
	case <-ctx.Done():
		c.Abandon(onOrphan)
		return Result{Err: ErrTimeout}
	}
}

// Call is a proposal handed to raft whose result its caller awaits on C,
// in a select of its own (StartLock). A lock acquire waits for its result
// and for its grant at once, whichever comes first; a goroutine per acquire
// blocked in the proposal cost a member two goroutine wake-ups per acquire
// (the goroutine's start and its answer), each a thread wake-up whenever
// the member had an idle P.
type Call struct {
	a  *Applier
	id uint64
	ch chan Result
}

// C delivers the call's result, once.
func (c *Call) C() <-chan Result { return c.ch }

// Abandon is for a caller that stops waiting before its result came: the
// result, should the entry apply here later, goes to onOrphan (on a
// goroutine of its own) when set, and is dropped otherwise. A caller that
// took its result from C need not call it.
func (c *Call) Abandon(onOrphan func(Result)) {
	if onOrphan == nil {
		c.a.forget(c.id)
		return
	}
	c.a.orphan(c.id, c.ch, onOrphan)
}

// start registers id's result and hands data to raft. When the proposal
// fails because ctx ended, a leader may still have buffered it for raft,
// so its result goes to onOrphan (when set) as for an abandoned call.
func (a *Applier) start(ctx context.Context, id uint64, data []byte, onOrphan func(Result)) (*Call, error) {
	if a.maxReq > 0 && len(data) > a.maxReq+64 {
		return nil, ErrRequestTooLarge
	}
	c := &Call{a: a, id: id, ch: a.expect(id)}
	if err := a.node.Propose(ctx, data); err != nil {
		if onOrphan != nil && ctx.Err() != nil {
			c.Abandon(onOrphan)
		} else {
			a.forget(id)
		}
		return nil, err
	}
	return c, nil
}

// Orphaned results are kept for at most this many requests, this long.
const (
	maxOrphans = 10000
	orphanAge  = time.Hour
)

type orphan struct {
	fn    func(Result)
	since time.Time
}

// orphan hands request id's result to fn from now on. Under a.mu with
// Committed's delivery, so a result is either already in ch or will go to
// fn: never lost between the two.
func (a *Applier) orphan(id uint64, ch chan Result, fn func(Result)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.waits, id)
	delete(a.renewStarted, id)
	select {
	case res := <-ch:
		go fn(res)
		return
	default:
	}
	now := time.Now()
	if len(a.orphans) >= maxOrphans {
		for oid, o := range a.orphans {
			if now.Sub(o.since) > orphanAge {
				delete(a.orphans, oid)
			}
		}
		if len(a.orphans) >= maxOrphans {
			a.lg.Warn("too many requests whose callers gave up before they applied; not tracking this one", "max", maxOrphans)
			return
		}
	}
	a.orphans[id] = orphan{fn: fn, since: now}
}

// DoLock proposes a native lock operation and waits for its result. It
// gives op a request id unless op has one (NewRequestID).
func (a *Applier) DoLock(ctx context.Context, op *lock.Op) Result {
	return a.DoLockOrphaned(ctx, op, nil)
}

// DoLockOrphaned is DoLock, except that when ctx ends after the op was
// handed to raft, its result — should the entry apply here later — goes to
// onOrphan (when set): a lock acquire whose caller timed out must still
// leave the queue once its key is written (lock.Machine's contract), and
// only the result knows the key's mod revision.
func (a *Applier) DoLockOrphaned(ctx context.Context, op *lock.Op, onOrphan func(Result)) Result {
	id := a.lockRequest(op) // before Marshal: the id and origin travel in the entry
	return a.proposeOrphaning(ctx, id, append([]byte{KindLock}, op.Marshal()...), onOrphan)
}

// StartLock hands a native lock operation to raft and returns at once; its
// result comes on the Call's C. ctx bounds the proposal only (a member
// without a leader waits for one within it); a caller that stops waiting
// calls Abandon, with onOrphan as for DoLockOrphaned.
func (a *Applier) StartLock(ctx context.Context, op *lock.Op, onOrphan func(Result)) (*Call, error) {
	id := a.lockRequest(op)
	return a.start(ctx, id, append([]byte{KindLock}, op.Marshal()...), onOrphan)
}

// lockRequest gives op its request id (unless it has one) and this member
// as its origin, and returns the id.
func (a *Applier) lockRequest(op *lock.Op) uint64 {
	if op.ReqID == 0 {
		op.ReqID = a.nextID()
	}
	op.Origin = a.node.ID() // where the result and any grant are awaited (SetResultPusher, lock.Machine.SetGrantHook)
	return op.ReqID
}

// Deferrable implements raftnode.ProposalDeferrer: a lock acquire (not a
// try) of a lock that has an owner will queue, so it waits on the leader
// to share the raft round of the next other proposal — typically the
// owner's release — instead of costing the cluster a round of its own. On
// a lock with 50 waiters this makes each hand-off one round, not two.
func (a *Applier) Deferrable(data []byte) bool {
	if a.locks == nil || len(data) < 2 || data[0] != KindLock {
		return false
	}
	name, flags, ok := lock.PeekAcquire(data[1:])
	return ok && flags&lock.FlagTry == 0 && a.locks.Held(name)
}

// ToleratesLazyApply implements raftnode.LazyApplyTolerant for thrifty
// replication: the server's leader sends every lock op's result to the
// member that proposed it (SetResultPusher), so that member's caller does
// not wait for its own apply (an outcome the notice cannot carry, a rare
// error, is answered by that apply, a delay later); and a lease renewal
// answered up to a delay (at most 50 ms) later is still far within any TTL.
// Everything else (etcd requests) is answered after the proposing member's
// own apply, whose latency its clients see.
func (a *Applier) ToleratesLazyApply(data []byte) bool {
	return len(data) > 0 && (data[0] == KindLock || data[0] == KindLeaseRenew)
}

// lockEnv lends the lock machine mvcc txns on the entry's batch.
type lockEnv struct {
	a *Applier
	b *pebble.Batch
}

func (e lockEnv) Begin() *mvcc.Txn          { return e.a.kv.Begin(e.b, e.a.lessor) }
func (e lockEnv) End(t *mvcc.Txn) int64     { return e.a.end(t) }
func (e lockEnv) LeaseExists(id int64) bool { return e.a.lessor.Exists(id) }

// ProposeRaw proposes an entry nobody waits for (leader-side lease decisions).
func (a *Applier) ProposeRaw(ctx context.Context, data []byte) error {
	return a.node.Propose(ctx, data)
}

// AppliedIndex is the index of the last entry this applier has staged.
func (a *Applier) AppliedIndex() uint64 { return a.appliedIndex.Load() }

// ApplyEntry implements raftnode.StateMachine.
func (a *Applier) ApplyEntry(b *pebble.Batch, index, term uint64, data []byte) {
	a.appliedIndex.Store(index)
	if len(data) == 0 {
		return
	}
	if a.locks != nil {
		a.locks.BeginEntry(b, index)
	}
	switch data[0] {
	case KindEtcd:
		var r pb.InternalRaftRequest
		if err := proto.Unmarshal(data[1:], &r); err != nil {
			a.lg.Error("undecodable entry skipped", "index", index, "err", err)
			return
		}
		res := a.applyEtcd(b, index, &r)
		a.stage(r.ID, res)
	case KindLeaseRenew:
		// One or more (request id, lease id) pairs, each renewed at index.
		if !validRenewEntry(data) {
			a.lg.Error("malformed lease renew entry", "index", index)
			return
		}
		// One a.mu hold for the entry (a batch carries up to renewBatchMax
		// pairs); the lessor's own lock nests inside it and never the
		// other way round.
		a.mu.Lock()
		for p := 1; p < len(data); p += renewPairBytes {
			id := binary.BigEndian.Uint64(data[p:])
			leaseID := int64(binary.BigEndian.Uint64(data[p+8:]))
			started := a.renewStarted[id] // zero unless this member's own
			ttl, err := a.lessor.Renew(b, index, leaseID, started)
			a.stage(id, Result{TTL: ttl, Err: err})
		}
		a.mu.Unlock()
	case KindLeaseExpire:
		if len(data) < 9 || (len(data)-9)%8 != 0 {
			a.lg.Error("malformed lease expire entry", "index", index)
			return
		}
		if a.locks != nil {
			a.locks.SetCause(lock.CauseLeaseExpired)
		}
		decidedAt := binary.BigEndian.Uint64(data[1:])
		for p := 9; p < len(data); p += 8 {
			leaseID := int64(binary.BigEndian.Uint64(data[p:]))
			if !a.lessor.ExpiryStillValid(leaseID, decidedAt) {
				continue
			}
			n, _ := a.revokeLease(b, leaseID)
			a.lg.Info("lease expired", "lease-id", fmt.Sprintf("%016x", leaseID), "deleted-keys", n)
			a.leaseExpired.Add(1)
		}
	case KindLeaseCheckpoint:
		if len(data) < 9 || (len(data)-9)%16 != 0 {
			a.lg.Error("malformed lease checkpoint entry", "index", index)
			return
		}
		decidedAt := binary.BigEndian.Uint64(data[1:])
		for p := 9; p < len(data); p += 16 {
			a.lessor.Checkpoint(b, decidedAt, int64(binary.BigEndian.Uint64(data[p:])), int64(binary.BigEndian.Uint64(data[p+8:])))
		}
	case KindLock:
		if a.locks == nil {
			a.lg.Error("lock entry without a lock machine skipped", "index", index)
			break
		}
		id, out, err := a.locks.Apply(lockEnv{a, b}, data[1:])
		if id != 0 {
			origin, _, _ := lock.PeekOrigin(data[1:])
			a.stagedRes = append(a.stagedRes, staged{id, Result{Lock: out, Err: err}, origin})
		}
	default:
		a.lg.Error("unknown entry kind skipped", "index", index, "kind", data[0])
	}
	if a.onApplied != nil {
		a.onApplied(index)
	}
}

// awaited reports whether a caller on this member waits for request id's
// result (it proposed the request and has not given up, or left a function
// for it).
func (a *Applier) awaited(id uint64) bool {
	if id == 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.waits[id]; ok {
		return true
	}
	_, ok := a.orphans[id]
	return ok
}

func (a *Applier) stage(id uint64, res Result) {
	if id != 0 {
		a.stagedRes = append(a.stagedRes, staged{id: id, res: res})
	}
}

func (a *Applier) end(t *mvcc.Txn) int64 {
	rev, events := t.End()
	if len(events) > 0 {
		a.stagedRevs = append(a.stagedRevs, revEvents{rev, events})
	}
	if a.locks != nil {
		// Lock queues follow every change in the same apply, so a hand-off
		// is decided by the entry that removed the owner.
		a.locks.Observe(rev, events)
	}
	if rev > a.lastRev {
		a.lastRev = rev
	}
	return rev
}

func hdr(rev int64) *pb.ResponseHeader { return &pb.ResponseHeader{Revision: rev} }

func (a *Applier) applyEtcd(b *pebble.Batch, index uint64, r *pb.InternalRaftRequest) Result {
	if err := a.capped(r); err != nil {
		return Result{Err: err}
	}
	switch {
	case r.Alarm != nil:
		return a.applyAlarm(b, r.Alarm, a.currentRev())
	case r.Put != nil:
		t := a.kv.Begin(b, a.lessor)
		resp, err := t.Put(r.Put)
		rev := a.end(t)
		if err != nil {
			return Result{Err: err}
		}
		resp.Header = hdr(rev)
		return Result{Resp: resp}
	case r.DeleteRange != nil:
		t := a.kv.Begin(b, a.lessor)
		resp, err := t.DeleteRange(r.DeleteRange)
		rev := a.end(t)
		if err != nil {
			return Result{Err: err}
		}
		resp.Header = hdr(rev)
		return Result{Resp: resp}
	case r.Txn != nil:
		t := a.kv.Begin(b, a.lessor)
		if !a.awaited(r.ID) {
			// Every member applies the txn, but only the one that proposed it
			// answers; elsewhere the values its ranges would read (a storage
			// seek each: clientv3's Mutex reads the lock's owner in every
			// acquire) go nowhere.
			t.DiscardRangeValues()
		}
		resp, err := t.Txn(r.Txn)
		rev := a.end(t)
		if err != nil {
			return Result{Err: err}
		}
		resp.Header = hdr(rev)
		return Result{Resp: resp}
	case r.Compaction != nil:
		t := a.kv.Begin(b, a.lessor)
		err := t.Compact(r.Compaction.Revision)
		rev := a.end(t)
		if err != nil {
			return Result{Err: err}
		}
		return Result{Resp: &pb.CompactionResponse{Header: hdr(rev)}}
	case r.LeaseGrant != nil:
		if err := a.lessor.Grant(b, index, r.LeaseGrant.ID, r.LeaseGrant.TTL); err != nil {
			return Result{Err: err}
		}
		return Result{Resp: &pb.LeaseGrantResponse{Header: hdr(a.currentRev()), ID: r.LeaseGrant.ID, TTL: r.LeaseGrant.TTL}}
	case r.LeaseRevoke != nil:
		if a.locks != nil {
			a.locks.SetCause(lock.CauseLeaseRevoked)
		}
		if _, err := a.revokeLease(b, r.LeaseRevoke.ID); err != nil {
			return Result{Err: err}
		}
		return Result{Resp: &pb.LeaseRevokeResponse{Header: hdr(a.currentRev())}}
	default:
		return Result{Err: fmt.Errorf("tenure: unsupported request in entry %d", index)}
	}
}

// revokeLease removes a lease and deletes its keys in one revision.
func (a *Applier) revokeLease(b *pebble.Batch, id int64) (int, error) {
	keys, err := a.lessor.Revoke(b, id)
	if err != nil {
		return 0, err
	}
	if len(keys) > 0 {
		t := a.kv.Begin(b, a.lessor)
		t.DeleteKeys(keys)
		a.end(t)
	}
	return len(keys), nil
}

func (a *Applier) currentRev() int64 {
	if a.lastRev > a.kv.Rev() {
		return a.lastRev
	}
	return a.kv.Rev()
}

// Committed implements raftnode.StateMachine: the batch is in the store.
// SealBatch records the batch's latest revision (raftnode.BatchSealer).
func (a *Applier) SealBatch(b *pebble.Batch) {
	if err := a.kv.Seal(b); err != nil {
		panic(fmt.Sprintf("tenure: apply: record the current revision: %v", err))
	}
}

func (a *Applier) Committed() {
	// Publish even when the revision did not move: a compaction is staged
	// without a new revision and becomes visible here.
	a.kv.Publish(a.currentRev())
	if a.hub != nil {
		for _, re := range a.stagedRevs {
			a.hub.Notify(re.rev, re.events)
		}
	}
	a.stagedRevs = a.stagedRevs[:0]
	if a.locks != nil {
		a.locks.Publish()
	}
	if len(a.stagedRes) > 0 {
		a.mu.Lock()
		for _, s := range a.stagedRes {
			if ch, ok := a.waits[s.id]; ok {
				ch <- s.res
				delete(a.waits, s.id)
			} else if o, ok := a.orphans[s.id]; ok {
				delete(a.orphans, s.id)
				go o.fn(s.res)
			}
		}
		push := a.pushResult
		a.mu.Unlock()
		if push != nil {
			for _, s := range a.stagedRes {
				if s.origin != 0 {
					push(s.origin, s.id, s.res)
				}
			}
		}
		a.stagedRes = a.stagedRes[:0]
	}
}

// SetResultPusher sets f to be called, after Committed delivered the
// batch's results here, with every lock op's result and the member that
// proposed the op. The server uses it on the leader to send the result to
// that member (DeliverResult there), whose caller then need not wait for
// its own apply.
func (a *Applier) SetResultPusher(f func(origin, id uint64, res Result)) {
	a.mu.Lock()
	a.pushResult = f
	a.mu.Unlock()
}

// DeliverResult answers the caller waiting on request id with a result
// decided by a committed entry this member may not have applied yet
// (pushed by the leader); it reports whether a caller was waiting. The
// member's own apply later finds nobody waiting and changes nothing more.
// A caller that already gave up (an orphan) is left to that apply, which
// finds the key in this member's store.
func (a *Applier) DeliverResult(id uint64, res Result) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch, ok := a.waits[id]
	if !ok {
		return false
	}
	ch <- res // capacity 1, and only the first delivery finds id in waits
	delete(a.waits, id)
	a.pushed.Add(1)
	return true
}

// PushedResults counts the callers DeliverResult answered.
func (a *Applier) PushedResults() uint64 { return a.pushed.Load() }

// PrepareRestore is called by raftnode before a received snapshot replaces
// the store: mvcc's background compaction must stop writing first.
func (a *Applier) PrepareRestore() { a.kv.PauseCompaction() }

// Reload implements raftnode.StateMachine: the store was replaced by a snapshot.
func (a *Applier) Reload() error {
	if err := a.kv.Reload(); err != nil {
		return err
	}
	if err := a.lessor.Reload(a.db); err != nil {
		return err
	}
	a.lastRev = a.kv.Rev()
	if err := a.reloadAlarms(); err != nil {
		return err
	}
	if err := AttachLeases(a.kv, a.lessor); err != nil {
		return err
	}
	if a.locks != nil {
		return a.locks.Reload()
	}
	return nil
}

// AttachLeases rebuilds the lessor's key attachments from the store's index
// of live keys (a range over the store decoded every key: 1.6 s of a
// restart at a million keys).
func AttachLeases(kv *mvcc.Store, l *lease.Lessor) error {
	kv.ForEachLeased(l.Attach)
	return nil
}
