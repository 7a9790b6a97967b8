package suite

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseReport(t *testing.T) {
	tests := []struct {
		file     string
		rps      float64
		p50, p99 time.Duration
		errors   int
	}{
		{"put-100.out", 3268.702699466378, 25742179 * time.Nanosecond, 99396369 * time.Nanosecond, 0},
		{"errors.out", 1000, 4 * time.Millisecond, 150 * time.Millisecond, 9},
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
			if r.RPS != tt.rps || r.P50 != tt.p50 || r.P99 != tt.p99 || r.Errors != tt.errors {
				t.Errorf("got rps %v p50 %v p99 %v errors %d; want %v %v %v %d", r.RPS, r.P50, r.P99, r.Errors, tt.rps, tt.p50, tt.p99, tt.errors)
			}
		})
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
