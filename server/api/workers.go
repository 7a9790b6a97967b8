package api

import "sync/atomic"

// DefaultMaxIdleWorkers bounds the goroutines a member keeps parked for its
// lock calls (workers); each holds only its stack while parked.
const DefaultMaxIdleWorkers = 256

// workers runs functions on goroutines that outlive them. A lock call's
// goroutine (each Session request) grows its stack through the proposal
// and storage call chain, and a fresh goroutine per call paid for that
// growth every time: runtime.newstack and copystack were 4.3% of the
// members' CPU with 50 Session clients on 50 locks (2.5% on one lock). A
// finished function's goroutine waits for the next one, with the stack it
// grew, unless maxIdle others already wait; it exits when done is closed.
// gRPC's handler pool (grpc.NumStreamWorkers, server.streamWorkers) does
// the same for unary calls.
//
// Go never blocks: with no idle worker it starts a goroutine, so a burst
// of calls that wait (50 lock waiters) is never queued behind another.
type workers struct {
	work    chan func()
	done    <-chan struct{}
	maxIdle int32
	idle    atomic.Int32
	started atomic.Int64 // goroutines started (tests)
}

func newWorkers(maxIdle int, done <-chan struct{}) *workers {
	return &workers{work: make(chan func()), done: done, maxIdle: int32(maxIdle)}
}

// Go runs f on an idle worker, or on a new goroutine if none is idle.
func (w *workers) Go(f func()) {
	select {
	case w.work <- f: // a parked worker took it
	default:
		w.started.Add(1)
		go w.run(f)
	}
}

func (w *workers) run(f func()) {
	for {
		f()
		f = nil // do not keep what f captured alive while parked
		if w.idle.Add(1) > w.maxIdle {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.work:
			w.idle.Add(-1)
		case <-w.done:
			w.idle.Add(-1)
			return
		}
	}
}
