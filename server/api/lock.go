package api

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/server/apply"
	"github.com/tenure-io/tenure/server/lock"
)

// LockConfig wires the lock services.
type LockConfig struct {
	Machine    *lock.Machine
	Delays     *lock.DelayScheduler // optional (Describe's lock-delay remaining)
	MaxWaiters int                  // per lock; default lock.DefaultMaxWaiters
	// MaxSessionInFlight bounds the requests one Session stream runs at
	// once; default DefaultMaxSessionInFlight.
	MaxSessionInFlight int
}

// Locks serves etcd's v3lock and v3election services and Tenure's tenure.v1
// Locks service over the lock state machine: a waiting call is woken by the
// apply that granted it, never by polling or a watch.
type Locks struct {
	s   *Server
	m   *lock.Machine
	cfg LockConfig
	// stopping ends the background retries of abandon (Close).
	stopping context.Context
	stop     context.CancelFunc
	retryMu  sync.Mutex // orders retries.Add against Close
	retries  sync.WaitGroup
	pending  atomic.Int64 // departed waiters' keys whose delete is being retried
	// workers runs Session requests on goroutines that keep their grown
	// stacks; idle ones exit on Close.
	workers *workers
}

// PendingAbandons is how many departed waiters' keys this member is still
// trying to delete (their first delete could not commit).
func (l *Locks) PendingAbandons() int64 { return l.pending.Load() }

// NewLocks builds the lock services on s.
func (s *Server) NewLocks(cfg LockConfig) *Locks {
	if cfg.MaxWaiters <= 0 {
		cfg.MaxWaiters = lock.DefaultMaxWaiters
	}
	if cfg.MaxSessionInFlight <= 0 {
		cfg.MaxSessionInFlight = DefaultMaxSessionInFlight
	}
	l := &Locks{s: s, m: cfg.Machine, cfg: cfg}
	l.stopping, l.stop = context.WithCancel(context.Background())
	l.workers = newWorkers(DefaultMaxIdleWorkers, l.stopping.Done())
	return l
}

// Register adds v3lock, v3election and tenure.v1 Locks to g.
func (l *Locks) Register(g *grpc.Server) {
	v3lockpb.RegisterLockServer(g, &lockService{l: l})
	v3electionpb.RegisterElectionServer(g, &electionService{l: l})
	tenurev1.RegisterLocksServer(g, &nativeService{l: l})
}

// Errors of the election service, worded as etcd words them.
var (
	errElectionNotLeader = status.Error(codes.FailedPrecondition, "election: not leader")
	errElectionNoLeader  = status.Error(codes.NotFound, "election: no leader")
	errMissingLeaderKey  = status.Error(codes.InvalidArgument, `"leader" field must be provided`)
)

// acquire enqueues lease's key under name and, unless the op is a try, waits
// until the state machine grants it. A call that ends before the grant
// leaves the queue (its key is deleted through raft).
func (l *Locks) acquire(ctx context.Context, name []byte, lease int64, value []byte, flags byte) (*lock.AcquireResult, error) {
	if lease == 0 {
		return nil, ToGRPC(lock.ErrLeaseRequired)
	}
	if err := lock.ValidName(name); err != nil {
		return nil, ToGRPC(err)
	}
	key := lock.KeyFor(name, lease)
	w := l.m.WaitKey(key) // before proposing: the grant may come with the acquire
	defer w.Close()
	op := &lock.Op{Kind: lock.OpAcquire, Name: name, Lease: lease, Value: value, Flags: flags, MaxWaiters: uint32(l.cfg.MaxWaiters),
		ReqID: l.s.cfg.Applier.NewRequestID()}
	// A call that stops waiting (its deadline, the request timeout) after
	// its acquire went to raft may still have its key written; once that
	// applies here, the key leaves the queue like any abandoned wait's —
	// unless the call did answer with a grant (pushed ahead of the result).
	var answered atomic.Bool
	orphaned := func(res apply.Result) {
		if ar, ok := res.Lock.(*lock.AcquireResult); ok && res.Err == nil && !answered.Load() && ar.Key != "" {
			l.abandon(ar.Key, ar.ModRev)
		}
	}
	if flags&lock.FlagTry != 0 {
		out, err := l.doOrphaning(ctx, op, orphaned)
		if err != nil {
			return nil, err
		}
		return out.(*lock.AcquireResult), nil
	}
	// The acquire's own result comes from this member's apply; the grant
	// may come first, pushed by the leader (it names this call's request,
	// Note.ReqID). On a member whose apply lags, waiting for the result
	// first would hold up the whole queue behind this waiter; so the call
	// waits for both in one select, the proposal started without waiting
	// (apply.Applier.StartLock). The result must come within the request
	// timeout, as any proposal's; the grant may take as long as ctx allows.
	pctx, cancel := l.s.timeout(ctx)
	defer cancel()
	call, err := l.startLock(pctx, op, orphaned)
	if err != nil {
		return nil, err
	}
	// Before the result, expired (the request timeout, or ctx) ends the
	// wait; after it, only ctx does (gone).
	results, expired := call.C(), pctx.Done()
	var (
		gone <-chan struct{}
		ar   *lock.AcquireResult
		held []lock.Note // notes that came before the result
	)
	// settle judges a note once the result is known; done reports an end.
	settle := func(n lock.Note) (done bool, err error) {
		if n.Token != ar.Token {
			return false, nil // an earlier incarnation of the same key
		}
		switch n.Kind {
		case lock.NoteGranted:
			ar.Granted, ar.Rev = true, n.Rev
			ar.Owner = lock.Owner{Key: n.Key, Token: n.Token, Lease: n.Lease}
			return true, nil
		case lock.NoteRemoved:
			return true, ToGRPC(lock.ErrWaiterRemoved)
		}
		return false, nil
	}
	for {
		select {
		case res := <-results:
			results, expired, gone = nil, nil, ctx.Done()
			l.s.props.done(res.Err)
			cancel() // the request timeout bounds the result only
			if res.Err != nil {
				return nil, ToGRPC(res.Err)
			}
			if ar = res.Lock.(*lock.AcquireResult); ar.Granted {
				return ar, nil
			}
			for _, n := range held {
				if done, err := settle(n); done {
					return ar, err
				}
			}
			held = nil
		case n := <-w.C():
			if ar == nil {
				if n.Kind == lock.NoteGranted && n.ReqID == op.ReqID {
					answered.Store(true)
					call.Abandon(nil) // the result is of no use now
					l.s.props.done(nil)
					ar = &lock.AcquireResult{Key: n.Key, Token: n.Token}
					settle(n)
					return ar, nil
				}
				// Before the result only a grant naming this request is
				// known to be this call's.
				held = append(held, n)
				continue
			}
			if done, err := settle(n); done {
				return ar, err
			}
		case <-expired:
			// The proposal's answer, as for any proposal; a result that
			// applies here later is abandoned like any other wait that
			// gave up.
			call.Abandon(orphaned)
			l.s.props.done(apply.ErrTimeout)
			return nil, ToGRPC(apply.ErrTimeout)
		case <-gone:
			l.abandon(ar.Key, ar.ModRev)
			return nil, ToGRPC(ctx.Err())
		}
	}
}

// startLock hands an acquire to raft as doOrphaning does, without waiting
// for its result: the proposal counts as pending until the caller reports
// it done (proposalStats.done).
func (l *Locks) startLock(ctx context.Context, op *lock.Op, onOrphan func(apply.Result)) (*apply.Call, error) {
	if err := l.s.requireLeader(ctx); err != nil {
		return nil, err
	}
	l.s.props.pending.Add(1)
	call, err := l.s.cfg.Applier.StartLock(ctx, op, onOrphan)
	if err != nil {
		l.s.props.done(err)
		return nil, ToGRPC(err)
	}
	return call, nil
}

// do proposes a lock op as Server.do proposes an etcd request: it fails
// fast without a leader when the client asked for one, then goes through
// Server.propose (request timeout, proposal metrics). It returns the lock
// machine's answer, errors mapped for gRPC.
func (l *Locks) do(ctx context.Context, op *lock.Op) (any, error) {
	return l.doOrphaning(ctx, op, nil)
}

// doOrphaning is do for an acquire: when ctx ends after the op went to
// raft, its result goes to onOrphan (if set) if the entry applies here
// later.
func (l *Locks) doOrphaning(ctx context.Context, op *lock.Op, onOrphan func(apply.Result)) (any, error) {
	if err := l.s.requireLeader(ctx); err != nil {
		return nil, err
	}
	res := l.s.propose(ctx, func(ctx context.Context) apply.Result {
		return l.s.cfg.Applier.DoLockOrphaned(ctx, op, onOrphan)
	})
	if res.Err != nil {
		return nil, ToGRPC(res.Err)
	}
	return res.Lock, nil
}

// abandon takes a waiter that gave up out of the queue: it deletes key if
// its mod revision is still modRev, the one the waiter's acquire wrote. A
// later acquire by the same lease rewrites the key (lock.Machine), so the
// delete never removes a key that another call now waits on or holds.
//
// The first attempt runs before the waiter's call returns. If it cannot
// commit (no leader, no quorum), the key would stay queued, granted to
// nobody, until its lease ends; so the delete is retried in the background,
// with backoff, until it commits, the key is gone or rewritten in this
// member's store, or the member stops.
func (l *Locks) abandon(key string, modRev int64) {
	// The call was waiting on this member, which applied its acquire: the
	// key is at modRev here, so the first attempt goes straight to raft.
	if l.tryAbandon(key, modRev) {
		return
	}
	l.retryMu.Lock()
	defer l.retryMu.Unlock()
	if l.stopping.Err() != nil {
		return // the member is stopping; the lease still ends the key
	}
	l.s.cfg.Logger.Warn("lock waiter left; could not delete its key, retrying", "key", key, "mod-revision", modRev)
	l.retries.Add(1)
	l.pending.Add(1)
	go func() {
		defer l.retries.Done()
		defer l.pending.Add(-1)
		backoff := abandonBackoffMin
		for {
			select {
			case <-l.stopping.Done():
				return
			case <-time.After(backoff):
			}
			if !l.stillAt(key, modRev) || l.tryAbandon(key, modRev) {
				l.s.cfg.Logger.Info("lock waiter's key no longer queued after retrying", "key", key, "mod-revision", modRev)
				return
			}
			backoff = min(2*backoff, abandonBackoffMax)
		}
	}()
}

// Backoff between a departed waiter's delete attempts (each attempt itself
// runs up to the request timeout).
const (
	abandonBackoffMin = 100 * time.Millisecond
	abandonBackoffMax = 5 * time.Second
)

// tryAbandon makes one attempt; it reports whether the delete committed
// (deleted, or the compare failed: the key is gone or was rewritten).
func (l *Locks) tryAbandon(key string, modRev int64) bool {
	ctx, cancel := context.WithTimeout(l.stopping, l.s.cfg.RequestTimeout)
	defer cancel()
	_, err := l.deleteIf(ctx, modifiedAt([]byte(key), modRev))
	return err == nil
}

// createdAt holds while key is the incarnation created at rev (a lock or
// leader key's token).
func createdAt(key []byte, rev int64) *pb.Compare {
	return &pb.Compare{Key: key, Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
}

// modifiedAt holds while key was last written at rev.
func modifiedAt(key []byte, rev int64) *pb.Compare {
	return &pb.Compare{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_ModRevision{ModRevision: rev}}
}

// stillAt reports whether this member's store still has key at modRev; a
// retry that finds it gone or rewritten here has nothing left to do.
func (l *Locks) stillAt(key string, modRev int64) bool {
	resp, err := l.s.cfg.KV.Range(&pb.RangeRequest{Key: []byte(key)})
	if err != nil {
		return true // let the proposal decide
	}
	return len(resp.Kvs) == 1 && resp.Kvs[0].ModRevision == modRev
}

// Close stops the background deletes of departed waiters' keys and waits
// for them (the member stops raft and its store after).
func (l *Locks) Close() {
	l.retryMu.Lock()
	l.stop()
	l.retryMu.Unlock()
	l.retries.Wait()
}

// deleteIf deletes cmp's key in one Txn if cmp holds; the response says
// whether it did (Succeeded) and at which revision.
func (l *Locks) deleteIf(ctx context.Context, cmp *pb.Compare) (*pb.TxnResponse, error) {
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{cmp},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: cmp.Key}}}},
	}
	res, err := l.s.do(ctx, &pb.InternalRaftRequest{Txn: txn})
	if err != nil {
		return nil, err
	}
	return res.Resp.(*pb.TxnResponse), nil
}

// firstKey reads the oldest key under name/ (the owner as clientv3 sees it).
func (l *Locks) firstKey(name []byte) (*mvccpb.KeyValue, int64, error) {
	prefix := append(append([]byte(nil), name...), '/')
	end := append([]byte(nil), prefix...)
	end[len(end)-1]++
	resp, err := l.s.cfg.KV.Range(&pb.RangeRequest{Key: prefix, RangeEnd: end, Limit: 1,
		SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE})
	if err != nil {
		return nil, 0, ToGRPC(err)
	}
	rev := int64(0)
	if resp.Header != nil {
		rev = resp.Header.Revision
	}
	if len(resp.Kvs) == 0 {
		return nil, rev, nil
	}
	return resp.Kvs[0], rev, nil
}

func (l *Locks) header(rev int64) *pb.ResponseHeader {
	if rev == 0 {
		rev = l.s.cfg.KV.Rev()
	}
	return l.s.Header(rev)
}

// ---- etcd v3lock ----

type lockService struct {
	v3lockpb.UnimplementedLockServer
	l *Locks
}

// Lock waits for the lock; lease is required (etcd grants an orphan 60 s
// lease for lease 0; Tenure refuses).
func (ls *lockService) Lock(ctx context.Context, r *v3lockpb.LockRequest) (*v3lockpb.LockResponse, error) {
	ar, err := ls.l.acquire(ctx, r.Name, r.Lease, nil, 0)
	if err != nil {
		return nil, err
	}
	return &v3lockpb.LockResponse{Header: ls.l.header(ar.Rev), Key: []byte(ar.Key)}, nil
}

// Unlock deletes the lock key; the next waiter is granted by the same apply.
func (ls *lockService) Unlock(ctx context.Context, r *v3lockpb.UnlockRequest) (*v3lockpb.UnlockResponse, error) {
	if len(r.Key) == 0 {
		return nil, rpcEmptyKey()
	}
	// A key Lock handed out is deleted by a lock entry of its own: the same
	// delete as etcd's DeleteRange of that one key, without the etcd
	// request and response to encode, decode and apply on every member.
	if name, lease, ok := lock.ParseKey(r.Key); ok {
		out, err := ls.l.do(ctx, &lock.Op{Kind: lock.OpDelete, Name: name, Lease: lease})
		if err != nil {
			return nil, err
		}
		return &v3lockpb.UnlockResponse{Header: ls.l.header(out.(*lock.ReleaseResult).Rev)}, nil
	}
	res, err := ls.l.s.do(ctx, &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: r.Key}})
	if err != nil {
		return nil, err
	}
	return &v3lockpb.UnlockResponse{Header: ls.l.header(res.Resp.(*pb.DeleteRangeResponse).Header.GetRevision())}, nil
}

func rpcEmptyKey() error {
	return status.Error(codes.InvalidArgument, "etcdserver: key is not provided")
}

// ---- etcd v3election ----

type electionService struct {
	v3electionpb.UnimplementedElectionServer
	l *Locks
}

// Campaign waits for leadership. A campaigner whose lease ends while it
// waits gets an error, never leadership (etcd issue 19597).
func (es *electionService) Campaign(ctx context.Context, r *v3electionpb.CampaignRequest) (*v3electionpb.CampaignResponse, error) {
	ar, err := es.l.acquire(ctx, r.Name, r.Lease, r.Value, lock.FlagElection)
	if err != nil {
		return nil, err
	}
	return &v3electionpb.CampaignResponse{Header: es.l.header(ar.Rev), Leader: &v3electionpb.LeaderKey{
		Name: r.Name, Key: []byte(ar.Key), Rev: ar.Token, Lease: r.Lease}}, nil
}

// Proclaim updates the leader's value if the leader key is still the one
// created at leader.rev.
func (es *electionService) Proclaim(ctx context.Context, r *v3electionpb.ProclaimRequest) (*v3electionpb.ProclaimResponse, error) {
	if r.Leader == nil {
		return nil, errMissingLeaderKey
	}
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{createdAt(r.Leader.Key, r.Leader.Rev)},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: r.Leader.Key, Value: r.Value, Lease: r.Leader.Lease}}}},
	}
	res, err := es.l.s.do(ctx, &pb.InternalRaftRequest{Txn: txn})
	if err != nil {
		return nil, err
	}
	tr := res.Resp.(*pb.TxnResponse)
	if !tr.Succeeded {
		return nil, errElectionNotLeader
	}
	return &v3electionpb.ProclaimResponse{Header: es.l.header(tr.Header.GetRevision())}, nil
}

// Resign gives up leadership (no error if it was already gone, as etcd).
func (es *electionService) Resign(ctx context.Context, r *v3electionpb.ResignRequest) (*v3electionpb.ResignResponse, error) {
	if r.Leader == nil {
		return nil, errMissingLeaderKey
	}
	tr, err := es.l.deleteIf(ctx, createdAt(r.Leader.Key, r.Leader.Rev))
	if err != nil {
		return nil, err
	}
	return &v3electionpb.ResignResponse{Header: es.l.header(tr.Header.GetRevision())}, nil
}

// Leader reads the current leader (linearizable).
func (es *electionService) Leader(ctx context.Context, r *v3electionpb.LeaderRequest) (*v3electionpb.LeaderResponse, error) {
	if err := lock.ValidName(r.Name); err != nil {
		return nil, ToGRPC(err)
	}
	if err := es.l.s.linearize(ctx); err != nil {
		return nil, err
	}
	kv, rev, err := es.l.firstKey(r.Name)
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, errElectionNoLeader
	}
	return &v3electionpb.LeaderResponse{Header: es.l.header(rev), Kv: kv}, nil
}

// Observe streams the leader: the current one, then every new leader and
// every Proclaim, pushed by the apply that made the change.
func (es *electionService) Observe(r *v3electionpb.LeaderRequest, stream v3electionpb.Election_ObserveServer) error {
	if err := lock.ValidName(r.Name); err != nil {
		return ToGRPC(err)
	}
	ctx := stream.Context()
	name := string(r.Name)
	sub := es.l.m.Subscribe(name)
	defer sub.Close()
	if _, err := es.l.do(ctx, &lock.Op{Kind: lock.OpRegister, Name: r.Name}); err != nil {
		return err
	}
	var lastKey []byte
	var lastMod int64
	send := func() error {
		kv, rev, err := es.l.firstKey(r.Name)
		if err != nil || kv == nil {
			return err
		}
		if string(kv.Key) == string(lastKey) && kv.ModRevision == lastMod {
			return nil
		}
		lastKey, lastMod = kv.Key, kv.ModRevision
		return stream.Send(&v3electionpb.LeaderResponse{Header: es.l.header(rev), Kv: kv})
	}
	if err := send(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.Overflowed():
			return status.Error(codes.Unavailable, "tenure: observer fell behind; observe again")
		case n := <-sub.C():
			if n.Kind == lock.NoteGranted || n.Kind == lock.NoteUpdated {
				if err := send(); err != nil {
					return err
				}
			}
		}
	}
}
