package api

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/api/tenurev1"
	"github.com/tenure-io/tenure/server/lock"
)

// nativeService is tenure.v1 Locks.
type nativeService struct {
	tenurev1.UnimplementedLocksServer
	l *Locks
}

func (n *nativeService) hdr(rev int64) *tenurev1.ResponseHeader {
	h := n.l.header(rev)
	return &tenurev1.ResponseHeader{ClusterId: h.ClusterId, MemberId: h.MemberId, Revision: h.Revision, RaftTerm: h.RaftTerm}
}

// TryLock takes the lock only if nobody owns it or waits for it.
func (n *nativeService) TryLock(ctx context.Context, r *tenurev1.TryLockRequest) (*tenurev1.TryLockResponse, error) {
	ar, err := n.l.acquire(ctx, r.Name, r.Lease, nil, lock.FlagTry)
	if err != nil {
		return nil, err
	}
	resp := &tenurev1.TryLockResponse{Header: n.hdr(0), Acquired: ar.Granted,
		OwnerKey: []byte(ar.Owner.Key), OwnerToken: ar.Owner.Token, OwnerLease: ar.Owner.Lease,
		QueueLength: int64(ar.Waiters), LockDelayRunning: ar.Blocked}
	if ar.Granted {
		resp.Key, resp.Token = []byte(ar.Key), ar.Token
	} else if ar.Key != "" {
		// The caller's lease already waits in this queue (an earlier Lock):
		// a try does not take its place away; it leaves it as it is.
		resp.Key, resp.Token = []byte(ar.Key), ar.Token
	}
	return resp, nil
}

// Lock waits (FIFO) until granted or timeout_ms passes.
func (n *nativeService) Lock(ctx context.Context, r *tenurev1.LockRequest) (*tenurev1.LockResponse, error) {
	if r.TimeoutMs < 0 {
		return nil, status.Error(codes.InvalidArgument, "tenure: lock: timeout_ms must not be negative")
	}
	if r.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(r.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	ar, err := n.l.acquire(ctx, r.Name, r.Lease, nil, 0)
	if err != nil {
		if r.TimeoutMs > 0 && ctx.Err() == context.DeadlineExceeded {
			// Aborted, not DeadlineExceeded: the wait ended without a grant
			// and the waiter left the queue (clientv3's interceptor would
			// silently retry a DeadlineExceeded the caller did not set).
			return nil, status.Error(codes.Aborted, "tenure: lock: not granted within timeout_ms; the waiter left the queue")
		}
		return nil, err
	}
	return &tenurev1.LockResponse{Header: n.hdr(ar.Rev), Key: []byte(ar.Key), Token: ar.Token}, nil
}

// Unlock releases the lock held at token.
func (n *nativeService) Unlock(ctx context.Context, r *tenurev1.UnlockRequest) (*tenurev1.UnlockResponse, error) {
	if err := lock.ValidName(r.Name); err != nil {
		return nil, ToGRPC(err)
	}
	if r.Lease == 0 {
		return nil, ToGRPC(lock.ErrLeaseRequired)
	}
	// A lock op of its own rather than an etcd Txn (compare the create
	// revision, then delete): the same check and delete, without the Txn
	// request and response to encode, decode and apply on every member.
	out, err := n.l.do(ctx, &lock.Op{Kind: lock.OpRelease, Name: r.Name, Lease: r.Lease, Epoch: uint64(r.Token)})
	if err != nil {
		return nil, err
	}
	rr := out.(*lock.ReleaseResult)
	return &tenurev1.UnlockResponse{Header: n.hdr(rr.Rev), Released: rr.Released}, nil
}

// state returns the lock's state after a linearizable barrier; a lock the
// state machine does not track (only plain-KV users) is read from the store.
func (n *nativeService) state(ctx context.Context, name []byte, max int) (lock.State, error) {
	if err := lock.ValidName(name); err != nil {
		return lock.State{}, ToGRPC(err)
	}
	if err := n.l.s.linearize(ctx); err != nil {
		return lock.State{}, err
	}
	st := n.l.m.Get(string(name), max)
	if st.Known {
		return st, nil
	}
	prefix := append(append([]byte(nil), name...), '/')
	end := append([]byte(nil), prefix...)
	end[len(end)-1]++
	resp, err := n.l.s.cfg.KV.Range(&pb.RangeRequest{Key: prefix, RangeEnd: end, KeysOnly: true,
		SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE})
	if err != nil {
		return lock.State{}, ToGRPC(err)
	}
	st.Waiters = len(resp.Kvs)
	for i, kv := range resp.Kvs {
		o := lock.Owner{Key: string(kv.Key), Token: kv.CreateRevision, Lease: kv.Lease}
		if i == 0 {
			st.Owner = o
		}
		if len(st.Queue) < max {
			st.Queue = append(st.Queue, o)
		}
	}
	return st, nil
}

// CheckFence reports whether token is the lock's current fencing token.
func (n *nativeService) CheckFence(ctx context.Context, r *tenurev1.CheckFenceRequest) (*tenurev1.CheckFenceResponse, error) {
	st, err := n.state(ctx, r.Name, 0)
	if err != nil {
		return nil, err
	}
	return &tenurev1.CheckFenceResponse{Header: n.hdr(0), Current: r.Token != 0 && st.Owner.Token == r.Token,
		CurrentToken: st.Owner.Token, OwnerKey: []byte(st.Owner.Key)}, nil
}

// Describe reports the lock's owner, token, lease, waiters and lock-delay.
func (n *nativeService) Describe(ctx context.Context, r *tenurev1.DescribeRequest) (*tenurev1.DescribeResponse, error) {
	max := int(r.MaxWaiters)
	if max <= 0 {
		max = 100
	}
	st, err := n.state(ctx, r.Name, max+1)
	if err != nil {
		return nil, err
	}
	resp := &tenurev1.DescribeResponse{Header: n.hdr(0), OwnerKey: []byte(st.Owner.Key), Token: st.Owner.Token,
		OwnerLease: st.Owner.Lease, QueueLength: int64(st.Waiters), LockDelayMs: st.DelayMs, LockDelayRunning: st.Blocked != 0}
	if st.Owner.Lease != 0 {
		if l, ok := n.l.s.cfg.Lessor.Get(st.Owner.Lease, false); ok {
			resp.LeaseTtlRemainingMs = l.Remaining.Milliseconds()
		}
	}
	for _, w := range st.Queue {
		if w.Key == st.Owner.Key || len(resp.Waiters) >= max {
			continue
		}
		resp.Waiters = append(resp.Waiters, &tenurev1.Waiter{Key: []byte(w.Key), Token: w.Token, Lease: w.Lease})
	}
	if st.Blocked != 0 {
		resp.LockDelayRemainingMs = st.DelayMs
		if n.l.cfg.Delays != nil {
			if rem, ok := n.l.cfg.Delays.Remaining(string(r.Name)); ok {
				resp.LockDelayRemainingMs = rem.Milliseconds()
			}
		}
	}
	return resp, nil
}

// SetLockDelay sets the lock's lock-delay (0..60 s).
func (n *nativeService) SetLockDelay(ctx context.Context, r *tenurev1.SetLockDelayRequest) (*tenurev1.SetLockDelayResponse, error) {
	if err := lock.ValidName(r.Name); err != nil {
		return nil, ToGRPC(err)
	}
	if r.DelayMs < 0 || r.DelayMs > lock.MaxDelayMs {
		return nil, ToGRPC(lock.ErrDelayTooLong)
	}
	if _, err := n.l.do(ctx, &lock.Op{Kind: lock.OpSetDelay, Name: r.Name, DelayMs: r.DelayMs}); err != nil {
		return nil, err
	}
	return &tenurev1.SetLockDelayResponse{Header: n.hdr(0)}, nil
}

func reasonOf(c lock.Cause) tenurev1.OwnershipEvent_Reason {
	switch c {
	case lock.CauseLeaseExpired:
		return tenurev1.OwnershipEvent_LEASE_EXPIRED
	case lock.CauseLeaseRevoked:
		return tenurev1.OwnershipEvent_LEASE_REVOKED
	default:
		return tenurev1.OwnershipEvent_RELEASED
	}
}

// WatchOwnership streams GRANTED for a current token, then LOST with the
// reason when the state machine takes the lock away; then it ends.
func (n *nativeService) WatchOwnership(r *tenurev1.WatchOwnershipRequest, stream tenurev1.Locks_WatchOwnershipServer) error {
	ctx := stream.Context()
	if err := lock.ValidName(r.Name); err != nil {
		return ToGRPC(err)
	}
	sub := n.l.m.Subscribe(string(r.Name))
	defer sub.Close()
	st, err := n.state(ctx, r.Name, 0)
	if err != nil {
		return err
	}
	if r.Token == 0 || st.Owner.Token != r.Token {
		return stream.Send(&tenurev1.OwnershipEvent{Type: tenurev1.OwnershipEvent_LOST, Token: r.Token,
			Reason: tenurev1.OwnershipEvent_STALE, Revision: n.l.s.cfg.KV.Rev()})
	}
	if err := stream.Send(&tenurev1.OwnershipEvent{Type: tenurev1.OwnershipEvent_GRANTED, Token: r.Token,
		Key: []byte(st.Owner.Key), Revision: n.l.s.cfg.KV.Rev()}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.Overflowed():
			return status.Error(codes.Unavailable, "tenure: ownership stream fell behind; check the fence and watch again")
		case note := <-sub.C():
			if note.Kind == lock.NoteLost && note.Token == r.Token {
				return stream.Send(&tenurev1.OwnershipEvent{Type: tenurev1.OwnershipEvent_LOST, Token: r.Token,
					Key: []byte(note.Key), Reason: reasonOf(note.Cause), Revision: note.Rev})
			}
		}
	}
}
