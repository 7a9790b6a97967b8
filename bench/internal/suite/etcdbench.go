package suite

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// RangeKey is the key read by the range suites; it is written (256-byte
// value) before each range run.
const RangeKey = "bench-range-key"

// EtcdBench is a suite driven by etcd's benchmark tool.
type EtcdBench struct {
	Name         string
	Heading      string
	Goal         string
	Metric       Metric
	Conns        int
	Clients      int
	TargetLeader bool // pass --target-leader (1-client suites: avoids a leader/follower lottery)
	ShortTotal   int
	FullTotal    int
	// Args are the subcommand and its flags; --total is appended.
	Args []string
	// Setup runs before the tool (e.g. writes the key the range suites read).
	Setup func(ctx context.Context, env *Env) error
}

func (s *EtcdBench) ID() string      { return s.Name }
func (s *EtcdBench) Title() string   { return s.Heading }
func (s *EtcdBench) Target() string  { return s.Goal }
func (s *EtcdBench) Primary() Metric { return s.Metric }

// Total is the number of requests for a mode.
func (s *EtcdBench) Total(m Mode) int {
	if m == Full {
		return s.FullTotal
	}
	return s.ShortTotal
}

// CommandArgs is the benchmark tool's argument list against the given endpoints.
func (s *EtcdBench) CommandArgs(endpoints []string, m Mode) []string {
	eps := make([]string, len(endpoints))
	for i, e := range endpoints {
		eps[i] = strings.TrimPrefix(e, "http://")
	}
	args := []string{
		"--endpoints=" + strings.Join(eps, ","),
		fmt.Sprintf("--conns=%d", s.Conns),
		fmt.Sprintf("--clients=%d", s.Clients),
		"--precise",
		"--dial-timeout=10s",
	}
	if s.TargetLeader {
		args = append(args, "--target-leader")
	}
	args = append(args, s.Args...)
	args = append(args, fmt.Sprintf("--total=%d", s.Total(m)))
	return args
}

func (s *EtcdBench) Run(ctx context.Context, env *Env) (Result, error) {
	if s.Setup != nil {
		if err := s.Setup(ctx, env); err != nil {
			return Result{}, fmt.Errorf("%s setup: %w", s.Name, err)
		}
	}
	args := s.CommandArgs(env.Cluster.Endpoints, env.Mode)
	cmd := exec.CommandContext(ctx, env.Tools.Benchmark, args...)
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb // progress bar and grpc logs
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	res, perr := ParseReport(out.String())
	res.Command = "benchmark " + strings.Join(args, " ")
	res.Raw = out.String()
	if env.LogDir != "" {
		_ = os.MkdirAll(env.LogDir, 0o755)
		_ = os.WriteFile(filepath.Join(env.LogDir, s.Name+".out"), out.Bytes(), 0o644)
		_ = os.WriteFile(filepath.Join(env.LogDir, s.Name+".err"), errb.Bytes(), 0o644)
	}
	if runErr != nil {
		return res, fmt.Errorf("%s: benchmark tool: %v; stderr tail: %s", s.Name, runErr, lastBytes(errb.String(), 800))
	}
	if perr != nil {
		return res, fmt.Errorf("%s: %w", s.Name, perr)
	}
	return res, nil
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

var (
	reRPS   = regexp.MustCompile(`Requests/sec:\s+([0-9.eE+-]+)`)
	reAvg   = regexp.MustCompile(`Average:\s+([0-9.eE+-]+) secs`)
	rePct   = regexp.MustCompile(`(?m)^\s*([0-9.]+)% in ([0-9.eE+-]+) secs`)
	reErr   = regexp.MustCompile(`(?m)^\s*\[(\d+)\]\s+(.*)$`)
	errHead = "Error distribution:"
)

// ParseReport parses the summary printed by etcd's pkg/report (v3.6.8).
func ParseReport(out string) (Result, error) {
	var r Result
	if i := strings.Index(out, errHead); i >= 0 {
		r.ErrDist = map[string]int{}
		for _, m := range reErr.FindAllStringSubmatch(out[i:], -1) {
			n, _ := strconv.Atoi(m[1])
			r.Errors += n
			r.ErrDist[m[2]] += n
		}
	}
	m := reRPS.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no Requests/sec in the tool's output (%d errors)", r.Errors)
	}
	r.RPS, _ = strconv.ParseFloat(m[1], 64)
	if m := reAvg.FindStringSubmatch(out); m != nil {
		r.Avg = secs(m[1])
	}
	for _, m := range rePct.FindAllStringSubmatch(out, -1) {
		switch m[1] {
		case "50":
			r.P50 = secs(m[2])
		case "99":
			r.P99 = secs(m[2])
		}
	}
	if r.P50 == 0 {
		return r, fmt.Errorf("no 50%% latency in the tool's output")
	}
	return r, nil
}

// secs converts the tool's seconds to a Duration, rounded to the nearest
// nanosecond (a plain conversion truncates: "0.001971831" × 1e9 is
// 1971830.9999999998 in floating point, so about 2% of the tool's 9-digit
// values lost 1 ns).
func secs(s string) time.Duration {
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(math.Round(f * float64(time.Second)))
}

func putRangeKey(ctx context.Context, env *Env) error {
	cli, err := env.Cluster.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, RangeKey, strings.Repeat("v", 256))
	return err
}

// EtcdBenchSuites are the suites of issues 2 and 3, in run order.
func EtcdBenchSuites() []Suite {
	put := []string{"put", "--key-size=8", "--sequential-keys", "--val-size=256", "--key-space-size=100000"}
	rng := func(c string) []string { return []string{"range", RangeKey, "--consistency=" + c} }
	return []Suite{
		&EtcdBench{Name: "put-100", Heading: "put, 100 clients over 10 connections", Goal: "tenure ≥ 1.0× etcd req/s (issue 2)",
			Metric: Throughput, Conns: 10, Clients: 100, ShortTotal: 40000, FullTotal: 100000, Args: put},
		&EtcdBench{Name: "put-1", Heading: "put, 1 client", Goal: "tenure p50 ≤ etcd p50 (issue 2)",
			Metric: LatencyP50, Conns: 1, Clients: 1, TargetLeader: true, ShortTotal: 3000, FullTotal: 10000, Args: put},
		&EtcdBench{Name: "range-l-1", Heading: "linearizable range, 1 client", Goal: "tenure ≥ 1.0× etcd req/s (issue 2)",
			Metric: Throughput, Conns: 1, Clients: 1, TargetLeader: true, ShortTotal: 5000, FullTotal: 20000, Args: rng("l"), Setup: putRangeKey},
		&EtcdBench{Name: "range-l-100", Heading: "linearizable range, 100 clients over 10 connections", Goal: "tenure ≥ 1.0× etcd req/s (issue 2)",
			Metric: Throughput, Conns: 10, Clients: 100, ShortTotal: 50000, FullTotal: 200000, Args: rng("l"), Setup: putRangeKey},
		&EtcdBench{Name: "range-s-1", Heading: "serializable range, 1 client", Goal: "tenure ≥ 1.0× etcd req/s (issue 5)",
			Metric: Throughput, Conns: 1, Clients: 1, TargetLeader: true, ShortTotal: 10000, FullTotal: 50000, Args: rng("s"), Setup: putRangeKey},
		&EtcdBench{Name: "range-s-100", Heading: "serializable range, 100 clients over 10 connections", Goal: "tenure ≥ 1.0× etcd req/s (issue 5)",
			Metric: Throughput, Conns: 10, Clients: 100, ShortTotal: 100000, FullTotal: 300000, Args: rng("s"), Setup: putRangeKey},
		&EtcdBench{Name: "txn-put-100", Heading: "txn-put (1 put per txn), 100 clients over 10 connections", Goal: "tracked (issue 5)",
			Metric: Throughput, Conns: 10, Clients: 100, ShortTotal: 40000, FullTotal: 100000,
			Args: []string{"txn-put", "--key-size=8", "--val-size=256", "--key-space-size=100000", "--txn-ops=1"}},
		&EtcdBench{Name: "lease-keepalive-100", Heading: "lease keepalive, 100 clients over 10 connections", Goal: "tenure ≥ 1.0× etcd req/s (issue 3)",
			Metric: Throughput, Conns: 10, Clients: 100, ShortTotal: 60000, FullTotal: 200000, Args: []string{"lease-keepalive"}},
	}
}
