package suite

import (
	"maps"
	"strings"
	"testing"
	"time"
)

const msec = time.Millisecond

// ramp returns 1 ms, 2 ms, …, n ms (sorted).
func ramp(n int) []time.Duration {
	v := make([]time.Duration, n)
	for i := range v {
		v[i] = time.Duration(i+1) * msec
	}
	return v
}

func TestPct(t *testing.T) {
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one sample p50", []time.Duration{7 * msec}, 0.5, 7 * msec},
		{"one sample p99", []time.Duration{7 * msec}, 0.99, 7 * msec},
		// index round(0.5·2) = 1: the upper of two.
		{"two samples p50", []time.Duration{1 * msec, 2 * msec}, 0.5, 2 * msec},
		// index round(0.5·3) = round(1.5) = 2.
		{"three samples p50", []time.Duration{1 * msec, 2 * msec, 3 * msec}, 0.5, 3 * msec},
		// As etcd's pkg/report: of 1…100 ms, p50 is the 51st sample and p99
		// the 100th (index 99 = round(99.0)).
		{"100 samples p50", ramp(100), 0.5, 51 * msec},
		{"100 samples p99", ramp(100), 0.99, 100 * msec},
		// index round(990) = 990: the 991st of 1…1000 ms; etcd's ⌈990⌉ too.
		{"1000 samples p99", ramp(1000), 0.99, 991 * msec},
		{"1000 samples p50", ramp(1000), 0.5, 501 * msec},
		// index round(9.9) = 10 is past the end: the last sample.
		{"10 samples p99 clamps", ramp(10), 0.99, 10 * msec},
		{"q 0", ramp(10), 0, 1 * msec},
		{"q 1", ramp(10), 1, 10 * msec},
	}
	for _, tt := range tests {
		if got := pct(tt.sorted, tt.q); got != tt.want {
			t.Errorf("%s: pct(q=%v) = %v, want %v", tt.name, tt.q, got, tt.want)
		}
	}
}

func TestLockResult(t *testing.T) {
	outs := []lockOut{
		{lat: []time.Duration{3 * msec, 1 * msec}, cycles: 2, errs: map[string]int{"acquire: x": 1}},
		// Client 1 acquired 3 times before the deadline but one release
		// finished after it: 3 latencies, 2 cycles.
		{lat: []time.Duration{2 * msec, 5 * msec, 4 * msec}, cycles: 2, errs: map[string]int{"acquire: x": 2, "release: y": 1}},
		{errs: map[string]int{}}, // a client that did nothing
	}
	res, cycles := lockResult(outs, 2*time.Second)
	if cycles != 4 {
		t.Errorf("cycles %d, want 4", cycles)
	}
	// 4 cycles in 2 s; latencies 1…5 ms: p50 index round(2.5) = 3 → 4 ms,
	// p99 index round(4.95) = 5 → clamped to 4 → 5 ms; mean 15/5 = 3 ms.
	if res.RPS != 2 || res.P50 != 4*msec || res.P99 != 5*msec || res.Avg != 3*msec {
		t.Errorf("got %v cycles/s p50 %v p99 %v avg %v; want 2, 4ms, 5ms, 3ms", res.RPS, res.P50, res.P99, res.Avg)
	}
	wantDist := map[string]int{"acquire: x": 3, "release: y": 1}
	if res.Errors != 4 || !maps.Equal(res.ErrDist, wantDist) {
		t.Errorf("errors %d %v, want 4 %v", res.Errors, res.ErrDist, wantDist)
	}
	if !strings.HasPrefix(res.Raw, "cycles 4 in 2s; acquire p50 4ms p99 5ms;") {
		t.Errorf("raw %q", res.Raw)
	}

	// 30 cycles over 8 s on one client, latencies 1…30 ms.
	res, _ = lockResult([]lockOut{{lat: ramp(30), cycles: 30}}, 8*time.Second)
	// 30/8 = 3.75; p50 index 15 → 16 ms; p99 index round(29.7) = 30 → 30 ms;
	// mean (1+…+30)/30 = 15.5 ms.
	if res.RPS != 3.75 || res.P50 != 16*msec || res.P99 != 30*msec || res.Avg != 15500*time.Microsecond || res.Errors != 0 || res.ErrDist != nil {
		t.Errorf("got %+v", res)
	}

	// No cycle: errors are still reported, no rate or latency.
	res, cycles = lockResult([]lockOut{{errs: map[string]int{"acquire: unavailable": 7}}, {errs: map[string]int{}}}, time.Second)
	if cycles != 0 || res.RPS != 0 || res.P50 != 0 || res.Errors != 7 || res.ErrDist["acquire: unavailable"] != 7 {
		t.Errorf("no cycle: got %d cycles, %+v", cycles, res)
	}
}

func TestWatchResult(t *testing.T) {
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	var zero time.Time
	// 5 puts, 3 watchers. Put 1 failed (no ack: its events are ignored even
	// if they arrive); nobody received puts 3 and 4.
	ack := []time.Time{at(100 * msec), zero, at(200 * msec), at(300 * msec), at(400 * msec)}
	recv := [][]time.Time{
		{at(101 * msec), zero, at(203 * msec), zero, zero},          // delays 1, 3 ms
		{at(99 * msec), at(150 * msec), at(210 * msec), zero, zero}, // -1 ms → 0, 10 ms
		{at(105 * msec), zero, zero, zero, zero},                    // 5 ms; put 2 missing
	}
	res, delivered := watchResult(ack, recv, 1, 2*time.Second)
	// delays 0, 1, 3, 5, 10 ms: p50 index round(2.5) = 3 → 5 ms; p99 index
	// round(4.95) = 5 → clamped → 10 ms; 5 events in 2 s.
	if delivered != 5 || res.RPS != 2.5 || res.P50 != 5*msec || res.P99 != 10*msec {
		t.Errorf("got %d delivered, %v events/s, p50 %v p99 %v; want 5, 2.5, 5ms, 10ms", delivered, res.RPS, res.P50, res.P99)
	}
	// 1 failed put; missing: put 2 on watcher 2, puts 3 and 4 on all 3.
	want := map[string]int{"put failed": 1, "event not received": 7}
	if res.Errors != 8 || !maps.Equal(res.ErrDist, want) {
		t.Errorf("errors %d %v, want 8 %v", res.Errors, res.ErrDist, want)
	}
	// Last watcher per put: put 0 5 ms, put 2 10 ms; puts 3 and 4 had no
	// receipt and are not "0 ms". Median of [5, 10]: index round(1) → 10 ms.
	if got := res.Extra["note"]; got != "last watcher 10.0 ms" {
		t.Errorf("note %q, want %q", got, "last watcher 10.0 ms")
	}

	// Everything on time: 2 puts × 2 watchers, last watcher 2 ms then 4 ms.
	ack = []time.Time{at(0), at(50 * msec)}
	recv = [][]time.Time{
		{at(2 * msec), at(51 * msec)},
		{at(1 * msec), at(54 * msec)},
	}
	res, delivered = watchResult(ack, recv, 0, 100*msec)
	// delays 1, 2, 1, 4 → 1, 1, 2, 4: p50 index 2 → 2 ms, p99 index round(3.96) = 4 → 4 ms.
	if delivered != 4 || res.RPS != 40 || res.P50 != 2*msec || res.P99 != 4*msec || res.Errors != 0 || res.ErrDist != nil {
		t.Errorf("got %d delivered, %+v", delivered, res)
	}
	if got := res.Extra["note"]; got != "last watcher 4.0 ms" { // [2, 4] → index 1
		t.Errorf("note %q", got)
	}

	// Nothing delivered.
	res, delivered = watchResult([]time.Time{at(0)}, [][]time.Time{{zero}, {zero}}, 2, time.Second)
	if delivered != 0 || res.Errors != 4 || res.ErrDist["event not received"] != 2 || res.ErrDist["put failed"] != 2 || res.RPS != 0 {
		t.Errorf("nothing delivered: got %d, %+v", delivered, res)
	}
}

func TestBigDataNote(t *testing.T) {
	const mib = 1 << 20
	rss := []int64{100 * mib, 150*mib + 300<<10, 99*mib + 600<<10} // 100, 150.29, 99.59 MiB
	disk := []int64{1024 * mib, 1024*mib + 600<<10, 512 * mib}     // 1024, 1024.59, 512 MiB
	want := "RSS 150 MiB, disk 1025 MiB; per member RSS 100/150/100, disk 1024/1025/512"
	if got := bigDataNote(rss, disk); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestBigDataSuite(t *testing.T) {
	t.Setenv("TENURE_BENCH_KEYS", "")
	s := BigDataSuites()[0].(*BigDataBench)
	if s.Keys != 1000000 || s.ID() != "keys-1000k" || !s.FullOnly() {
		t.Errorf("default: %d keys, id %s, full only %v", s.Keys, s.ID(), s.FullOnly())
	}
	t.Setenv("TENURE_BENCH_KEYS", "20000")
	if s := BigDataSuites()[0].(*BigDataBench); s.Keys != 20000 || s.ID() != "keys-20k" {
		t.Errorf("TENURE_BENCH_KEYS=20000: %d keys, id %s", s.Keys, s.ID())
	}
	t.Setenv("TENURE_BENCH_KEYS", "-5")
	if s := BigDataSuites()[0].(*BigDataBench); s.Keys != 1000000 {
		t.Errorf("TENURE_BENCH_KEYS=-5: %d keys, want the default", s.Keys)
	}
}

func TestCommandArgsModes(t *testing.T) {
	s := EtcdBenchSuites()[0].(*EtcdBench) // put-100: no --target-leader
	got := strings.Join(s.CommandArgs([]string{"http://127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3"}, Full), " ")
	want := "--endpoints=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3 --conns=10 --clients=100 --precise --dial-timeout=10s put --key-size=8 --sequential-keys --val-size=256 --key-space-size=100000 --total=100000"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	ids := map[string]bool{}
	for _, s := range All() {
		if ids[s.ID()] {
			t.Errorf("suite id %s twice", s.ID())
		}
		ids[s.ID()] = true
		if e, ok := s.(*EtcdBench); ok && (e.ShortTotal <= 0 || e.FullTotal < e.ShortTotal) {
			t.Errorf("%s: short %d, full %d requests", e.Name, e.ShortTotal, e.FullTotal)
		}
	}
}
