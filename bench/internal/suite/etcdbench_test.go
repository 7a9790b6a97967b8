package suite

import (
	"maps"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseReport(t *testing.T) {
	// The fixtures are .txt: the repository's .gitignore ignores *.out, so
	// the .out fixtures this test was written against were never committed.
	tests := []struct {
		file          string
		rps           float64
		avg, p50, p99 time.Duration
		errors        int
		dist          map[string]int
	}{
		// A real put-100 run of the v3.6.8 tool against tenure (--precise):
		// Average 0.02900271317252503 s, 50% in 0.025695166 s, 99% in
		// 0.080650282 s (and 99.9% in 0.11274026 s, which is not p99).
		{"put-100.txt", 3427.496629771483, 29002713 * time.Nanosecond, 25695166 * time.Nanosecond, 80650282 * time.Nanosecond, 0, nil},
		// The same layout with an error distribution: 5 + 4 errors; the
		// histogram's "[count]" columns are not errors.
		{"errors.txt", 1000, 12500 * time.Microsecond, 4 * time.Millisecond, 150 * time.Millisecond, 9,
			map[string]int{"rpc error: code = Unavailable desc = error reading from server: EOF": 5, "etcdserver: request timed out": 4}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile("testdata/" + tt.file)
			if err != nil {
				t.Fatal(err)
			}
			r, err := ParseReport(string(b))
			if err != nil {
				t.Fatal(err)
			}
			if r.RPS != tt.rps || r.Avg != tt.avg || r.P50 != tt.p50 || r.P99 != tt.p99 || r.Errors != tt.errors {
				t.Errorf("got rps %v avg %v p50 %v p99 %v errors %d; want %v %v %v %v %d", r.RPS, r.Avg, r.P50, r.P99, r.Errors, tt.rps, tt.avg, tt.p50, tt.p99, tt.errors)
			}
			if !maps.Equal(r.ErrDist, tt.dist) {
				t.Errorf("error distribution %v, want %v", r.ErrDist, tt.dist)
			}
		})
	}
}

// Edge cases of the tool's output: what ParseReport must reject, and the
// formats pkg/report produces that the fixtures do not show.
func TestParseReportEdgeCases(t *testing.T) {
	t.Run("empty output", func(t *testing.T) {
		r, err := ParseReport("")
		if err == nil || !strings.Contains(err.Error(), "no Requests/sec") || r.Errors != 0 {
			t.Errorf("got %+v, %v; want a 'no Requests/sec' error", r, err)
		}
	})
	t.Run("no latency distribution", func(t *testing.T) {
		r, err := ParseReport("\nSummary:\n  Total:\t1 secs.\n  Average:\t0.5 secs.\n  Requests/sec:\t2\n")
		if err == nil || !strings.Contains(err.Error(), "no 50% latency") {
			t.Errorf("got %v; want a 'no 50%% latency' error", err)
		}
		if r.RPS != 2 || r.Avg != 500*time.Millisecond {
			t.Errorf("rps %v avg %v; want 2 and 500ms", r.RPS, r.Avg)
		}
	})
	t.Run("no 50% line", func(t *testing.T) {
		_, err := ParseReport("  Requests/sec:\t2\n\nLatency distribution:\n  10% in 0.1 secs.\n  99% in 0.3 secs.\n")
		if err == nil {
			t.Error("no error without a 50% line")
		}
	})
	t.Run("%g exponents", func(t *testing.T) {
		// --precise prints with %g: large rates and small latencies in
		// exponent form.
		r, err := ParseReport("  Average:\t6.5e-05 secs.\n  Requests/sec:\t1.2345e+06\n\nLatency distribution:\n  50% in 5e-05 secs.\n  99% in 0.00012 secs.\n")
		if err != nil {
			t.Fatal(err)
		}
		if r.RPS != 1234500 || r.Avg != 65*time.Microsecond || r.P50 != 50*time.Microsecond || r.P99 != 120*time.Microsecond {
			t.Errorf("got rps %v avg %v p50 %v p99 %v; want 1234500 65µs 50µs 120µs", r.RPS, r.Avg, r.P50, r.P99)
		}
	})
	t.Run("errors and results", func(t *testing.T) {
		// A multi-line error message counts once, under its first line.
		out := "  Requests/sec:\t10\n\nLatency distribution:\n  50% in 0.01 secs.\n  99% in 0.02 secs.\n" +
			"\nError distribution:\n  [3]\tcontext deadline exceeded\n  [12]\tfirst line\nsecond line\n"
		r, err := ParseReport(out)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"context deadline exceeded": 3, "first line": 12}
		if r.Errors != 15 || !maps.Equal(r.ErrDist, want) || r.P50 != 10*time.Millisecond || r.P99 != 20*time.Millisecond {
			t.Errorf("got errors %d %v p50 %v p99 %v; want 15 %v 10ms 20ms", r.Errors, r.ErrDist, r.P50, r.P99, want)
		}
	})
	t.Run("no error distribution", func(t *testing.T) {
		r, err := ParseReport("  Requests/sec:\t10\n  50% in 0.01 secs.\n")
		if err != nil || r.Errors != 0 || r.ErrDist != nil || r.P99 != 0 {
			t.Errorf("got %+v, %v; want no errors, no distribution, p99 0 (no 99%% line)", r, err)
		}
	})
}

func TestSecs(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"0.001971831": 1971831 * time.Nanosecond, // 1971830.9999999998 ns in floating point
		"0.025695166": 25695166 * time.Nanosecond,
		"1.5":         1500 * time.Millisecond,
		"2e-06":       2 * time.Microsecond,
		"0":           0,
	} {
		if got := secs(s); got != want {
			t.Errorf("secs(%q) = %d ns, want %d ns", s, got, want)
		}
	}
}

func TestParseReportAllFailed(t *testing.T) {
	r, err := ParseReport("\nError distribution:\n  [100]\tconnection refused\n")
	if err == nil || r.Errors != 100 {
		t.Fatalf("want an error and 100 errors, got %v, %d", err, r.Errors)
	}
}

func TestCommandArgs(t *testing.T) {
	s := EtcdBenchSuites()[1].(*EtcdBench) // put-1
	got := strings.Join(s.CommandArgs([]string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, Short), " ")
	want := "--endpoints=127.0.0.1:1,127.0.0.1:2 --conns=1 --clients=1 --precise --dial-timeout=10s --target-leader put --key-size=8 --sequential-keys --val-size=256 --key-space-size=100000 --total=3000"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
