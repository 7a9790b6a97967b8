package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tenure-io/tenure/api/tenurev1"
)

// sessionClient sends requests on a Session stream and sorts the responses
// by id.
type sessionClient struct {
	t    *testing.T
	st   tenurev1.Locks_SessionClient
	next uint64
	got  chan *tenurev1.SessionResponse
}

func openSession(t *testing.T, ctx context.Context, lc lockClients) *sessionClient {
	t.Helper()
	st, err := lc.native.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &sessionClient{t: t, st: st, got: make(chan *tenurev1.SessionResponse, 64)}
	go func() {
		defer close(s.got)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			s.got <- r
		}
	}()
	return s
}

func (s *sessionClient) send(req *tenurev1.SessionRequest) uint64 {
	s.t.Helper()
	s.next++
	req.Id = s.next
	if err := s.st.Send(req); err != nil {
		s.t.Fatal(err)
	}
	return req.Id
}

// recv returns the next response; none within d fails the test.
func (s *sessionClient) recv(d time.Duration) *tenurev1.SessionResponse {
	s.t.Helper()
	select {
	case r, ok := <-s.got:
		if !ok {
			s.t.Fatal("session stream ended")
		}
		return r
	case <-time.After(d):
		s.t.Fatalf("no session response within %v", d)
		return nil
	}
}

// quiet fails the test if a response arrives within d.
func (s *sessionClient) quiet(d time.Duration, what string) {
	s.t.Helper()
	select {
	case r := <-s.got:
		s.t.Fatalf("%s: unexpected response %v", what, r)
	case <-time.After(d):
	}
}

func lockOp(name []byte, lease int64) *tenurev1.SessionRequest {
	return &tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Lock{Lock: &tenurev1.LockRequest{Name: name, Lease: lease}}}
}

// TestLockSession: lock calls on one Session stream behave as the unary
// calls do — a Lock that waits holds up nothing else on the stream, errors
// come back per request and the stream goes on, and a stream that ends
// takes its waiting Lock out of the queue.
func TestLockSession(t *testing.T) {
	_, lc := startLocks(t, 3)
	ctx := testCtx(t, 60*time.Second)
	name := []byte("session/a")
	la, lb, lcs := int64(grantLease(t, ctx, lc.cli, 30)), int64(grantLease(t, ctx, lc.cli, 30)), int64(grantLease(t, ctx, lc.cli, 30))
	s := openSession(t, ctx, lc)

	id := s.send(lockOp(name, la))
	r := s.recv(10 * time.Second)
	if r.Id != id || r.GetLock() == nil || r.GetLock().Token == 0 {
		t.Fatalf("first Lock: %v", r)
	}
	tokenA := r.GetLock().Token

	waitID := s.send(lockOp(name, lb)) // queues behind A
	s.quiet(300*time.Millisecond, "a Lock on a held lock")

	// Other requests on the stream go on while that Lock waits.
	tryID := s.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_TryLock{TryLock: &tenurev1.TryLockRequest{Name: name, Lease: lcs}}})
	r = s.recv(10 * time.Second)
	if r.Id != tryID || r.GetTryLock() == nil || r.GetTryLock().Acquired || r.GetTryLock().OwnerToken != tokenA || r.GetTryLock().QueueLength != 2 {
		t.Fatalf("TryLock while waiting: %v", r)
	}
	fenceID := s.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_CheckFence{CheckFence: &tenurev1.CheckFenceRequest{Name: name, Token: tokenA}}})
	r = s.recv(10 * time.Second)
	if r.Id != fenceID || !r.GetCheckFence().GetCurrent() {
		t.Fatalf("CheckFence of the owner: %v", r)
	}

	// Errors come back per request; the stream stays usable.
	badID := s.send(lockOp(name, 0))
	r = s.recv(10 * time.Second)
	if r.Id != badID || r.GetError().GetCode() != int32(codes.InvalidArgument) {
		t.Fatalf("Lock with lease 0: %v, want an InvalidArgument error", r)
	}
	emptyID := s.send(&tenurev1.SessionRequest{})
	r = s.recv(10 * time.Second)
	if r.Id != emptyID || r.GetError().GetCode() != int32(codes.InvalidArgument) {
		t.Fatalf("request without an operation: %v, want an InvalidArgument error", r)
	}

	// Releasing A grants the waiting Lock, on the same stream.
	unID := s.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Unlock{Unlock: &tenurev1.UnlockRequest{Name: name, Lease: la, Token: tokenA}}})
	got := map[uint64]*tenurev1.SessionResponse{}
	for len(got) < 2 {
		r := s.recv(10 * time.Second)
		got[r.Id] = r
	}
	if !got[unID].GetUnlock().GetReleased() {
		t.Fatalf("Unlock: %v", got[unID])
	}
	tokenB := got[waitID].GetLock().GetToken()
	if tokenB <= tokenA {
		t.Fatalf("waiting Lock: %v, want a token above %d", got[waitID], tokenA)
	}

	// A Lock waiting on a stream that ends leaves the queue: C then gets
	// the lock when B releases it.
	sctx, cancel := context.WithCancel(ctx)
	s2 := openSession(t, sctx, lc)
	s2.send(lockOp(name, lcs))
	waitQueueLength(t, ctx, lc, name, 2, "C queued")
	cancel()
	waitQueueLength(t, ctx, lc, name, 1, "C's waiter left with its stream")
	s.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_Unlock{Unlock: &tenurev1.UnlockRequest{Name: name, Lease: lb, Token: tokenB}}})
	if r := s.recv(10 * time.Second); !r.GetUnlock().GetReleased() {
		t.Fatalf("Unlock of B: %v", r)
	}
	d, err := lc.native.Describe(ctx, &tenurev1.DescribeRequest{Name: name})
	if err != nil || d.QueueLength != 0 || d.Token != 0 {
		t.Fatalf("after B released with C gone: %+v %v", d, err)
	}

	// A half-closed stream is served until its requests complete.
	s3 := openSession(t, ctx, lc)
	lockID := s3.send(lockOp(name, la))
	if err := s3.st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r := s3.recv(10 * time.Second); r.Id != lockID || r.GetLock() == nil {
		t.Fatalf("Lock on a half-closed stream: %v", r)
	}
}

// TestLockSessionInFlightCap: a stream runs at most 1,024 requests at once
// (api.DefaultMaxSessionInFlight); one more is answered ResourceExhausted at
// once, and the stream goes on.
func TestLockSessionInFlightCap(t *testing.T) {
	_, lc := startLocks(t, 1)
	ctx := testCtx(t, 120*time.Second)
	name := []byte("session/cap")
	owner, waiter := int64(grantLease(t, ctx, lc.cli, 60)), int64(grantLease(t, ctx, lc.cli, 60))
	held, err := lc.native.Lock(ctx, &tenurev1.LockRequest{Name: name, Lease: owner})
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, ctx, lc)
	const cap = 1024 // api.DefaultMaxSessionInFlight
	for i := 0; i < cap; i++ {
		s.send(lockOp(name, waiter)) // all wait behind the owner
	}
	over := s.send(lockOp(name, waiter))
	r := s.recv(30 * time.Second)
	if r.Id != over || r.GetError().GetCode() != int32(codes.ResourceExhausted) {
		t.Fatalf("request %d over the cap: %v, want ResourceExhausted", cap+1, r)
	}
	// The owner's release grants the waiting key; every waiting request on
	// it answers, and the stream takes requests again.
	if _, err := lc.native.Unlock(ctx, &tenurev1.UnlockRequest{Name: name, Lease: owner, Token: held.Token}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < cap; i++ {
		if r := s.recv(30 * time.Second); r.GetLock() == nil {
			t.Fatalf("waiting request answered %v, want the grant", r)
		}
	}
	fenceID := s.send(&tenurev1.SessionRequest{Op: &tenurev1.SessionRequest_CheckFence{CheckFence: &tenurev1.CheckFenceRequest{Name: name, Token: 1}}})
	if r := s.recv(10 * time.Second); r.Id != fenceID || r.GetCheckFence() == nil {
		t.Fatalf("request after the cap cleared: %v", r)
	}
}
