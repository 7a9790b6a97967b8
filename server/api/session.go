package api

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/api/tenurev1"
)

// DefaultMaxSessionInFlight bounds the requests one Session stream runs at
// once; past it a request is answered ResourceExhausted at once.
const DefaultMaxSessionInFlight = 1024

var errSessionNoOp = status.Error(codes.InvalidArgument, "tenure: session: request without an operation")

// Session runs a client's lock calls on one stream. A unary call costs the
// server (and the client) a new HTTP/2 stream: headers to encode and
// decode, a handler goroutine, trailers. On a stream each call is one
// message each way. Each request runs in a goroutine of its own (a reused
// one: Locks.workers) under the stream's context, so a Lock that waits
// holds up nothing else, and a stream that ends cancels what still runs (a
// waiting Lock leaves the queue). A half-closed stream is served until its
// requests complete.
func (n *nativeService) Session(st tenurev1.Locks_SessionServer) error {
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	var (
		wg     sync.WaitGroup
		sendMu sync.Mutex
		sent   error
	)
	slots := make(chan struct{}, n.l.cfg.MaxSessionInFlight)
	send := func(r *tenurev1.SessionResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sent != nil {
			return
		}
		if sent = st.Send(r); sent != nil {
			cancel() // the client is gone: stop what still runs
		}
	}
	for {
		req, err := st.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				cancel()
			}
			wg.Wait()
			if errors.Is(err, io.EOF) {
				sendMu.Lock()
				defer sendMu.Unlock()
				return sent
			}
			return err
		}
		select {
		case slots <- struct{}{}:
		default:
			send(sessionError(req.Id, status.Errorf(codes.ResourceExhausted,
				"tenure: session: %d requests already running on this stream", cap(slots))))
			continue
		}
		wg.Add(1)
		n.l.workers.Go(func() {
			defer wg.Done()
			defer func() { <-slots }()
			send(n.sessionCall(ctx, req))
		})
	}
}

// sessionCall runs one request as its unary call would.
func (n *nativeService) sessionCall(ctx context.Context, req *tenurev1.SessionRequest) *tenurev1.SessionResponse {
	resp := &tenurev1.SessionResponse{Id: req.Id}
	var err error
	switch op := req.Op.(type) {
	case *tenurev1.SessionRequest_Lock:
		var r *tenurev1.LockResponse
		if r, err = n.Lock(ctx, op.Lock); err == nil {
			resp.Result = &tenurev1.SessionResponse_Lock{Lock: r}
		}
	case *tenurev1.SessionRequest_Unlock:
		var r *tenurev1.UnlockResponse
		if r, err = n.Unlock(ctx, op.Unlock); err == nil {
			resp.Result = &tenurev1.SessionResponse_Unlock{Unlock: r}
		}
	case *tenurev1.SessionRequest_TryLock:
		var r *tenurev1.TryLockResponse
		if r, err = n.TryLock(ctx, op.TryLock); err == nil {
			resp.Result = &tenurev1.SessionResponse_TryLock{TryLock: r}
		}
	case *tenurev1.SessionRequest_CheckFence:
		var r *tenurev1.CheckFenceResponse
		if r, err = n.CheckFence(ctx, op.CheckFence); err == nil {
			resp.Result = &tenurev1.SessionResponse_CheckFence{CheckFence: r}
		}
	default:
		err = errSessionNoOp
	}
	if err != nil {
		return sessionError(req.Id, err)
	}
	return resp
}

func sessionError(id uint64, err error) *tenurev1.SessionResponse {
	s := status.Convert(err)
	return &tenurev1.SessionResponse{Id: id, Result: &tenurev1.SessionResponse_Error{
		Error: &tenurev1.SessionError{Code: int32(s.Code()), Message: s.Message()}}}
}
