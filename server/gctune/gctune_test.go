package gctune

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"small heap is raised to the floor", 8 * mib, 64 * mib, 100, 700},
		{"rounds up so the goal reaches the floor", 6 * mib, 64 * mib, 100, 967},
		{"below the runtime minimum counts as 4 MiB", 1 * mib, 64 * mib, 100, 1500},
		{"no collection yet", 0, 64 * mib, 100, 1500},
		{"large heap keeps the base", 400 * mib, 64 * mib, 100, 100},
		{"heap at the floor keeps the base", 64 * mib, 64 * mib, 100, 100},
		{"never below a higher base", 40 * mib, 64 * mib, 200, 200},
		{"a lower base is raised too", 32 * mib, 64 * mib, 50, 100},
		{"GOGC=off stays off", 8 * mib, 64 * mib, -1, -1},
		{"bounded", 4 * mib, 1 << 50, 100, maxPercent},
	} {
		if got := Percent(c.live, c.floor, c.base); got != c.want {
			t.Errorf("%s: Percent(%d, %d, %d) = %d, want %d", c.name, c.live, c.floor, c.base, got, c.want)
		}
	}
}

func gogc(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// collected collects once and waits until the tuner has run after it (its
// cleanup for the previous cycle's sentinel), then returns GOGC.
func collected(t *testing.T, tu *Tuner) int {
	t.Helper()
	return collectedSince(t, tu, tu.runs.Load())
}

// collectedSince collects until the tuner has run more than n times, then
// returns GOGC.
func collectedSince(t *testing.T, tu *Tuner, n uint64) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tu.runs.Load() == n {
		if time.Now().After(deadline) {
			t.Fatal("the tuner did not run after a collection within 10 s")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	return gogc(t)
}

// waitGOGC collects until GOGC satisfies ok or the deadline passes: the
// tuner adjusts it on the runtime's cleanup goroutine after a collection.
func waitGOGC(t *testing.T, ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		if g := gogc(t); ok(g) || time.Now().After(deadline) {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTunerRaisesGOGCForASmallHeapAndStopRestoresIt(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)

	tu := Start(1 << 30) // far above this test binary's live heap
	defer tu.Stop()
	if !tu.Active() || tu.Base() != 100 {
		t.Fatalf("Start: active %v, base %d; want active, base 100", tu.Active(), tu.Base())
	}
	if g := waitGOGC(t, func(g int) bool { return g > 1000 }); g <= 1000 {
		t.Fatalf("GOGC = %d with a 1 GiB floor over a heap of a few MiB; want it raised above 1000", g)
	}
	// It keeps tuning after later collections: push GOGC back down and
	// wait for the tuner to raise it again.
	debug.SetGCPercent(100)
	tu.mu.Lock()
	tu.set = 100
	tu.mu.Unlock()
	if g := waitGOGC(t, func(g int) bool { return g > 1000 }); g <= 1000 {
		t.Fatalf("GOGC = %d after a later collection; want the tuner to raise it again", g)
	}
	// One sentinel is armed when Stop runs, and its cleanup may still be
	// queued from waitGOGC's last collection: it can run before or after
	// collected would read the run count (under load it ran in between,
	// and no sentinel was left to wait for). Counting from before Stop,
	// the run after Stop is certain.
	before := tu.runs.Load()
	tu.Stop()
	if g := gogc(t); g != 100 {
		t.Fatalf("GOGC = %d after Stop; want the base, 100", g)
	}
	if g := collectedSince(t, tu, before); g != 100 {
		t.Fatalf("GOGC = %d after Stop and a collection; a stopped tuner must not change it", g)
	}
}

func TestTunerKeepsTheBaseForALargeHeap(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	ballast := make([]byte, 64<<20) // live heap well above the floor
	tu := Start(8 << 20)
	defer tu.Stop()
	g := collected(t, tu)
	runtime.KeepAlive(ballast)
	if g != 100 {
		t.Fatalf("GOGC = %d with a 64 MiB live heap over an 8 MiB floor; want the base, 100", g)
	}
}

func TestTunerIsOffWithoutAFloorOrWithGOGCOff(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	tu := Start(1 << 30)
	if tu.Active() || tu.Base() != -1 {
		t.Fatalf("with GOGC=off: active %v, base %d; want inactive, base -1", tu.Active(), tu.Base())
	}
	runtime.GC()
	if g := debug.SetGCPercent(-1); g != -1 {
		t.Fatalf("with GOGC=off the tuner set GOGC to %d", g)
	}
	tu.Stop()

	debug.SetGCPercent(100)
	tu = Start(0)
	if tu.Active() {
		t.Fatal("Start(0) is active; want off")
	}
	for range 3 {
		runtime.GC()
	}
	if g := gogc(t); g != 100 {
		t.Fatalf("GOGC = %d with no floor; want 100 untouched", g)
	}
}

// freeResident is heap memory the process holds free without having
// returned it to the system: pages the next spans reuse without a fault.
func freeResident() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapIdle - ms.HeapReleased
}

// TestPrefaultLeavesTheFloorResidentAndFree runs in a fresh process (this
// test binary, re-executed): in a process that has collected many times
// the runtime's scavenger returns free pages above a goal derived from the
// pages in use, so what an earlier test left behind decides how much stays;
// a member runs Prefault right after it starts, as the child does.
func TestPrefaultLeavesTheFloorResidentAndFree(t *testing.T) {
	if os.Getenv("GCTUNE_PREFAULT_CHILD") == "1" {
		prefaultChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPrefaultLeavesTheFloorResidentAndFree$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GCTUNE_PREFAULT_CHILD=1", "GOGC=100")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// prefaultChild prefaults a 48 MiB floor and exits non-zero unless at least
// three quarters of it is free and resident afterwards; before, almost
// nothing is.
func prefaultChild() {
	const floor = 48 << 20
	fail := func(format string, a ...any) {
		fmt.Printf(format+"\n", a...)
		os.Exit(1)
	}
	tu := Start(floor)
	defer tu.Stop()
	if f := freeResident(); f >= floor/2 {
		fail("%d MiB free and resident before Prefault; the check below could not fail", f>>20)
	}
	select {
	case <-tu.Prefault():
	case <-time.After(30 * time.Second):
		fail("Prefault did not finish within 30 s")
	}
	if f := freeResident(); f < floor*3/4 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fail("%d MiB free and resident after Prefault of a %d MiB floor; want at least three quarters of it kept (heap idle %d MiB, released %d MiB)",
			f>>20, floor>>20, ms.HeapIdle>>20, ms.HeapReleased>>20)
	}
}

func TestPrefaultOfAnInactiveTunerDoesNothing(t *testing.T) {
	tu := Start(0)
	select {
	case <-tu.Prefault():
	default:
		t.Fatal("Prefault of an inactive tuner did not return a closed channel")
	}
}
