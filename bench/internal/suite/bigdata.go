package suite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// FullOnly is implemented by suites that run only in full mode unless
// named with -suites (they take too long for make bench).
type FullOnly interface{ FullOnly() bool }

// BigDataBench writes Keys distinct keys with 256-byte values through etcd's
// benchmark tool (put, 100 clients, sequential keys), then measures every
// member's RSS and data-dir size, then restarts all 3 members and measures
// the time until the cluster has a leader and accepts a put. The table's
// p50 column is the restart time; Extra has RSS and disk.
type BigDataBench struct {
	Keys int
}

func (s *BigDataBench) ID() string      { return fmt.Sprintf("keys-%dk", s.Keys/1000) }
func (s *BigDataBench) FullOnly() bool  { return true }
func (s *BigDataBench) Primary() Metric { return LatencyP50 }
func (s *BigDataBench) Title() string {
	return fmt.Sprintf("%d 256-byte keys: RSS, disk, restart time", s.Keys)
}
func (s *BigDataBench) Target() string { return "RSS and restart time ≤ etcd (issue 5)" }
func (s *BigDataBench) Unit() string   { return "put req/s (load phase)" }
func (s *BigDataBench) Note() string {
	return "p50 = p99 = restart time of all 3 members (processes started → leader and a put acknowledged); in brackets: RSS (MiB, max over members after the load, before the restart) and disk (MiB, max over members' data dirs)."
}
func (s *BigDataBench) Refs() []Ref { return []Ref{{Kind: "etcd", Column: "× etcd (restart)"}} }

// BigDataSuites is the 1M-key suite of issue 5 (full mode only).
// TENURE_BENCH_KEYS overrides the key count (e.g. to try the suite quickly).
func BigDataSuites() []Suite {
	n := 1000000
	if v, err := strconv.Atoi(os.Getenv("TENURE_BENCH_KEYS")); err == nil && v > 0 {
		n = v
	}
	return []Suite{&BigDataBench{Keys: n}}
}

func (s *BigDataBench) Run(ctx context.Context, env *Env) (Result, error) {
	if env.Cluster == nil {
		return Result{}, fmt.Errorf("%s needs an etcd-compatible cluster", s.ID())
	}
	load := &EtcdBench{Name: s.ID(), Conns: 10, Clients: 100, ShortTotal: s.Keys, FullTotal: s.Keys,
		Args: []string{"put", "--key-size=8", "--sequential-keys", "--val-size=256", fmt.Sprintf("--key-space-size=%d", s.Keys)}}
	args := load.CommandArgs(env.Cluster.Endpoints, env.Mode)
	cmd := exec.CommandContext(ctx, env.Tools.Benchmark, args...)
	var out strings.Builder
	cmd.Stdout = &out
	cmd.WaitDelay = 5 * time.Second
	res := Result{Command: "benchmark " + strings.Join(args, " ") + "; then RSS (VmRSS), data-dir size, restart of all 3 members"}
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("%s: load: %v", s.ID(), err)
	}
	if env.LogDir != "" {
		_ = os.MkdirAll(env.LogDir, 0o755)
		_ = os.WriteFile(filepath.Join(env.LogDir, s.ID()+".out"), []byte(out.String()), 0o644)
	}
	lr, err := ParseReport(out.String())
	if err != nil {
		return res, err
	}
	if lr.Errors > 0 {
		return res, fmt.Errorf("%s: %d put errors while loading", s.ID(), lr.Errors)
	}
	time.Sleep(2 * time.Second) // let followers apply the tail
	rss, err := env.Cluster.RSS()
	if err != nil {
		return res, err
	}
	disk, err := env.Cluster.DiskUsage()
	if err != nil {
		return res, err
	}
	restart, err := env.Cluster.Restart(ctx, 3*time.Minute)
	if err != nil {
		return res, fmt.Errorf("%s: restart: %w", s.ID(), err)
	}
	res.RPS = lr.RPS
	res.P50, res.P99, res.Avg = restart, restart, restart
	res.Extra = map[string]string{"note": bigDataNote(rss, disk)}
	return res, nil
}

// bigDataNote is the report's note for the members' RSS and data-dir sizes
// (bytes, member order): the maximum over members, then each member, in MiB.
func bigDataNote(rss, disk []int64) string {
	mib := func(v []int64) string {
		var p []string
		for _, x := range v {
			p = append(p, fmt.Sprintf("%.0f", float64(x)/(1<<20)))
		}
		return strings.Join(p, "/")
	}
	maxOf := func(v []int64) int64 {
		var m int64
		for _, x := range v {
			m = max(m, x)
		}
		return m
	}
	return fmt.Sprintf("RSS %.0f MiB, disk %.0f MiB; per member RSS %s, disk %s",
		float64(maxOf(rss))/(1<<20), float64(maxOf(disk))/(1<<20), mib(rss), mib(disk))
}
