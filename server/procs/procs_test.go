package procs

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// recorder is a controller on a fake GOMAXPROCS.
type recorder struct {
	c    *Controller
	sets []int
	now  time.Time
	cpu  time.Duration
}

func newRecorder(max int) *recorder {
	r := &recorder{now: time.Unix(1000, 0)}
	r.c = newController(Config{Max: max}, func(n int) { r.sets = append(r.sets, n) })
	r.c.step(r.now, r.cpu)
	return r
}

// run advances d in ticks, using cores of CPU meanwhile.
func (r *recorder) run(d time.Duration, cores float64) {
	for end := r.now.Add(d); r.now.Before(end); {
		r.now = r.now.Add(DefaultTick)
		r.cpu += time.Duration(cores * float64(DefaultTick))
		r.c.step(r.now, r.cpu)
	}
}

// An idle member goes to one processor, but only after a whole window of
// low CPU.
func TestLowersToOneAfterAWindowOfLowLoad(t *testing.T) {
	r := newRecorder(4)
	r.run(DefaultLowerWindow-DefaultTick, 0.1)
	if len(r.sets) != 0 {
		t.Fatalf("set %v before a whole window of low load", r.sets)
	}
	r.run(2*DefaultTick, 0.1)
	if len(r.sets) != 1 || r.sets[0] != 1 || r.c.Procs() != 1 {
		t.Fatalf("sets %v, procs %d after a window at 0.1 cores, want [1] and 1", r.sets, r.c.Procs())
	}
	if raises, lowers := r.c.Changes(); raises != 0 || lowers != 1 {
		t.Fatalf("changes %d raises %d lowers, want 0 and 1", raises, lowers)
	}
}

// A member busy at Max processors keeps them.
func TestStaysAtMaxUnderLoad(t *testing.T) {
	r := newRecorder(2)
	r.run(10*DefaultLowerWindow, DefaultLowerBelow+0.1)
	if len(r.sets) != 0 || r.c.Procs() != 2 {
		t.Fatalf("sets %v, procs %d at %.2f cores, want none and 2", r.sets, r.c.Procs(), DefaultLowerBelow+0.1)
	}
}

// At one processor, one busy tick raises to Max at once, and the member
// keeps Max for at least a window even if the burst ends.
func TestRaisesAtOnceOnABusyTickAndHolds(t *testing.T) {
	r := newRecorder(2)
	r.run(DefaultLowerWindow+DefaultTick, 0)
	if r.c.Procs() != 1 {
		t.Fatalf("procs %d after an idle window, want 1", r.c.Procs())
	}
	r.run(DefaultTick, DefaultRaiseAbove-0.05)
	if r.c.Procs() != 1 {
		t.Fatalf("raised at %.2f cores, below RaiseAbove", DefaultRaiseAbove-0.05)
	}
	r.run(DefaultTick, DefaultRaiseAbove+0.05)
	if r.c.Procs() != 2 {
		t.Fatalf("procs %d after a tick at %.2f cores, want 2", r.c.Procs(), DefaultRaiseAbove+0.05)
	}
	r.run(DefaultLowerWindow-DefaultTick, 0)
	if r.c.Procs() != 2 {
		t.Fatal("lowered within a window of the raise")
	}
	r.run(2*DefaultTick, 0)
	if r.c.Procs() != 1 {
		t.Fatalf("procs %d a window after the burst, want 1", r.c.Procs())
	}
	if got, want := r.sets, []int{1, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("sets %v, want %v", got, want)
	}
}

// A one-processor machine (or Max 1) has nothing to adapt.
func TestMaxOneIsInactive(t *testing.T) {
	r := newRecorder(1)
	r.run(3*DefaultLowerWindow, 0)
	r.run(DefaultTick, 2)
	if r.c.Active() || len(r.sets) != 0 {
		t.Fatalf("active %v, sets %v with Max 1", r.c.Active(), r.sets)
	}
	c := Start(Config{Max: 1})
	c.Stop() // returns at once
}

// Stop restores Max processors in the process.
func TestStopRestoresMax(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	c := Start(Config{Max: 3, Tick: time.Millisecond, LowerWindow: 5 * time.Millisecond, LowerBelow: 1000})
	deadline := time.Now().Add(5 * time.Second)
	for runtime.GOMAXPROCS(0) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS %d 5 s after start with every window counted as idle, want 1", runtime.GOMAXPROCS(0))
		}
		time.Sleep(time.Millisecond)
	}
	c.Stop()
	if n := runtime.GOMAXPROCS(0); n != 3 || c.Procs() != 3 {
		t.Fatalf("GOMAXPROCS %d, Procs %d after Stop, want 3", n, c.Procs())
	}
}

// Boost raises at once, however idle the process, and holds Max for a
// window after its last call.
func TestBoostRaisesAtOnceAndHolds(t *testing.T) {
	r := newRecorder(2)
	r.run(DefaultLowerWindow+DefaultTick, 0)
	if r.c.Procs() != 1 {
		t.Fatalf("procs %d after an idle window, want 1", r.c.Procs())
	}
	r.c.boost(r.now)
	if r.c.Procs() != 2 {
		t.Fatalf("procs %d after Boost, want 2", r.c.Procs())
	}
	r.run(DefaultLowerWindow/2, 0)
	r.c.boost(r.now) // already at Max: only renews the hold
	r.run(DefaultLowerWindow-DefaultTick, 0)
	if r.c.Procs() != 2 {
		t.Fatal("lowered within a window of the last Boost")
	}
	r.run(2*DefaultTick, 0)
	if got, want := r.sets, []int{1, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("sets %v, want %v", got, want)
	}
	if raises, _ := r.c.Changes(); raises != 1 {
		t.Fatalf("%d raises, want 1 (a Boost at Max changes nothing)", raises)
	}
}

// The package-level Boost reaches the running controller, and none after
// Stop.
func TestBoostReachesTheRunningController(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	// RaiseAbove out of reach: no tick raises, so a raise is Boost's.
	c := Start(Config{Max: 2, Tick: time.Millisecond, LowerWindow: 5 * time.Millisecond, LowerBelow: 1000, RaiseAbove: 1000})
	deadline := time.Now().Add(5 * time.Second)
	for c.Procs() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("not lowered within 5 s with every window counted as idle")
		}
		time.Sleep(time.Millisecond)
	}
	Boost()
	if raises, _ := c.Changes(); raises != 1 {
		t.Fatalf("%d raises after Boost, want 1: Boost did not raise the running controller", raises)
	}
	c.Stop()
	if running.Load() != nil {
		t.Fatal("a stopped controller is still the running one")
	}
	Boost() // no controller: nothing to do, no panic
}
