package machine

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestParseCPULine(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	stat := "cpu  100 5 50 800 20 1 4 20 7 0\ncpu0 50 2 25 400 10 0 2 10 3 0\n"
	got, ok := parseCPULine(stat)
	if !ok {
		t.Fatal("a well-formed /proc/stat line was refused")
	}
	// Guest time (7) is part of user already: the total is the first eight fields.
	if want := (CPUTimes{Total: 1000, Steal: 20}); got != want {
		t.Fatalf("parseCPULine = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3 4 5 6 7\n", "cpu 1 2 3 x 5 6 7 8\n"} {
		if _, ok := parseCPULine(bad); ok {
			t.Errorf("parseCPULine(%q) accepted", bad)
		}
	}
}

func TestStealPercent(t *testing.T) {
	a := CPUTimes{Total: 1000, Steal: 20}
	if got := StealPercent(a, CPUTimes{Total: 1400, Steal: 70}); got != "12.5" {
		t.Errorf("50 stolen of 400 ticks = %q, want 12.5", got)
	}
	if got := StealPercent(a, CPUTimes{Total: 1400, Steal: 20}); got != "0.0" {
		t.Errorf("none stolen = %q, want 0.0", got)
	}
	// Nothing elapsed, or counters that went backwards (another boot): no number.
	for _, b := range []CPUTimes{a, {Total: 900, Steal: 30}, {Total: 1100, Steal: 10}} {
		if got := StealPercent(a, b); got != "" {
			t.Errorf("StealPercent(%+v, %+v) = %q, want none", a, b, got)
		}
	}
}

// TestStealSinceOnThisHost reads the real /proc/stat twice around some
// busy work: on Linux both readings must succeed and give a number.
func TestStealSinceOnThisHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/stat is Linux's")
	}
	a, ok := ReadCPUTimes()
	if !ok || a.Total == 0 {
		t.Fatalf("ReadCPUTimes = %+v, %v on Linux", a, ok)
	}
	deadline := time.Now().Add(5 * time.Second)
	var got string
	for got == "" && time.Now().Before(deadline) {
		for spin := time.Now(); time.Since(spin) < 20*time.Millisecond; {
		}
		got = StealSince(a) // "" until the tick counters move
	}
	if v, err := strconv.ParseFloat(got, 64); err != nil || v < 0 || v > 100 {
		t.Fatalf("StealSince = %q, want a percentage", got)
	}
}
