package api

import (
	"sync"
	"testing"
	"time"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitGroup waits for wg with a deadline.
func waitGroup(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A finished function's goroutine runs the next one: no goroutine is
// started while one is idle.
func TestWorkersReuseAnIdleGoroutine(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	w := newWorkers(4, done)
	ran := make(chan int, 3)
	for i := range 3 {
		w.Go(func() { ran <- i })
		if got := <-ran; got != i {
			t.Fatalf("function %d ran as %d", i, got)
		}
		waitFor(t, "the worker to park", func() bool { return w.idle.Load() == 1 })
	}
	if n := w.started.Load(); n != 1 {
		t.Fatalf("%d goroutines started for 3 sequential calls, want 1", n)
	}
}

// Go never waits for a busy worker: calls that block run side by side.
func TestWorkersNeverQueueBehindABusyOne(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	w := newWorkers(2, done)
	release := make(chan struct{})
	var running sync.WaitGroup
	running.Add(5)
	var finished sync.WaitGroup
	finished.Add(5)
	for range 5 {
		w.Go(func() {
			defer finished.Done()
			running.Done()
			<-release
		})
	}
	waitGroup(t, &running, "all five calls to run at once (Go queued them)")
	if n := w.started.Load(); n != 5 {
		t.Fatalf("%d goroutines for 5 concurrent calls, want 5", n)
	}
	close(release)
	finished.Wait()
	// At most maxIdle (2) stay; the other three exit.
	waitFor(t, "two parked workers (the others exit)", func() bool { return w.idle.Load() == 2 })
	// The two parked ones take the next two calls; a third needs a new one.
	block := make(chan struct{})
	var started sync.WaitGroup
	started.Add(3)
	for range 3 {
		w.Go(func() { started.Done(); <-block })
	}
	waitGroup(t, &started, "three more calls to run at once")
	close(block)
	if n := w.started.Load(); n != 6 {
		t.Fatalf("%d goroutines started in all, want 6 (two calls reused parked workers)", n)
	}
}

// Idle workers exit when done closes, and Go still runs functions after.
func TestWorkersExitOnDone(t *testing.T) {
	done := make(chan struct{})
	w := newWorkers(8, done)
	var wg sync.WaitGroup
	wg.Add(3)
	release := make(chan struct{})
	for range 3 {
		w.Go(func() { defer wg.Done(); <-release })
	}
	close(release)
	wg.Wait()
	waitFor(t, "three parked workers", func() bool { return w.idle.Load() == 3 })
	close(done)
	waitFor(t, "the parked workers to exit", func() bool { return w.idle.Load() == 0 })
	ran := make(chan struct{})
	w.Go(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a function given after done never ran")
	}
}
