// Command tenure-bench runs side-by-side benchmarks: a reference system
// (etcd 3.7.3) and a system under test (tenure, or etcd again to validate the
// harness) each as a fresh 3-member loopback cluster per suite run, driven by
// etcd's benchmark tool, and writes RESULTS.md with medians and ratios.
//
//	tenure-bench -mode short                # etcd vs tenure, 1 repetition
//	tenure-bench -mode full -repeat 5
//	tenure-bench -sut etcd                  # etcd vs etcd: validates the harness
//	tenure-bench -sut none -suites put-1    # reference only
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/bench/internal/cluster"
	"github.com/tenure-io/tenure/bench/internal/machine"
	"github.com/tenure-io/tenure/bench/internal/report"
	"github.com/tenure-io/tenure/bench/internal/suite"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tenure-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		mode     = flag.String("mode", "short", "short (make bench, < 15 min) or full (make bench-full)")
		repeat   = flag.Int("repeat", 0, "repetitions per suite and system; medians are reported (0: 1 for short, 3 for full)")
		sutKind  = flag.String("sut", "tenure", "system under test: tenure, etcd (validates the harness: etcd in both slots) or none")
		refKind  = flag.String("ref", "etcd", "reference system: etcd or none")
		binDir   = flag.String("bin", "bin", "directory holding etcd, etcdctl, benchmark and tenure")
		workDir  = flag.String("work", "work", "directory for data dirs and logs (data dirs are removed after each run unless -keep)")
		out      = flag.String("out", "RESULTS.md", "markdown report")
		charts   = flag.String("charts", "charts", "directory for PNG charts, relative to the report (empty: none)")
		suites   = flag.String("suites", "", "comma-separated suite ids (default: all); -list shows them")
		list     = flag.Bool("list", false, "list suites and exit")
		keep     = flag.Bool("keep", false, "keep data dirs")
		mainRepo = flag.String("repo", "..", "main repository, for the commit recorded in the report")
		runTO    = flag.Duration("run-timeout", 5*time.Minute, "limit for one suite run against one system (cluster start included)")
		others   = flag.String("others", "zookeeper,redis,postgres", "other reference systems for the suites that support them (lock suites): comma-separated zookeeper, redis, postgres, or none")
		variants = flag.String("variants", "", "comma-separated variants to run on suites that have them (e.g. Mutex,v3lock); default all")
		pgDSN    = flag.String("pg-dsn", cluster.DefaultPostgresDSN, "PostgreSQL for the postgres reference")
		window   = flag.Int("client-window", 0, "fixed HTTP/2 stream and connection window in bytes of the harness's etcd-protocol clients, every system alike (turns gRPC's BDP pings off; try 1048576); 0: gRPC's dynamic windows, clientv3's default")
	)
	flag.Parse()
	all := suite.All()
	if *list {
		for _, s := range all {
			fmt.Printf("%-22s %s\n", s.ID(), s.Title())
		}
		return nil
	}
	m := suite.Mode(*mode)
	if m != suite.Short && m != suite.Full {
		return fmt.Errorf("-mode must be short or full, not %q", *mode)
	}
	if *repeat <= 0 {
		*repeat = 1
		if m == suite.Full {
			*repeat = 3
		}
	}
	sel, err := selectSuites(all, *suites)
	if err != nil {
		return err
	}
	if *suites == "" && m == suite.Short { // long suites run in full mode or when named
		var keep []suite.Suite
		for _, s := range sel {
			if f, ok := s.(suite.FullOnly); ok && f.FullOnly() {
				continue
			}
			keep = append(keep, s)
		}
		sel = keep
	}
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	bin := abs(*binDir)
	tools := suite.Tools{Benchmark: filepath.Join(bin, "benchmark"), Etcdctl: filepath.Join(bin, "etcdctl")}
	if _, err := os.Stat(tools.Benchmark); err != nil {
		return fmt.Errorf("benchmark tool missing (run make bins): %w", err)
	}

	var slots []report.Slot
	var systems []cluster.System
	etcdLabel := "etcd 3.7.3"
	etcdBuild := "go build go.etcd.io/etcd/server/v3 in bench/refs/etcd (go.etcd.io/etcd/server/v3 v3.7.3)"
	switch *refKind {
	case "etcd":
		slots = append(slots, report.Slot{Role: "reference", Label: etcdLabel, Bin: filepath.Join(bin, "etcd"), Build: etcdBuild})
		systems = append(systems, cluster.System{Label: etcdLabel, Kind: "etcd", Bin: filepath.Join(bin, "etcd")})
	case "none":
	default:
		return fmt.Errorf("-ref must be etcd or none")
	}
	switch *sutKind {
	case "tenure":
		slots = append(slots, report.Slot{Role: "system under test", Label: "tenure", Bin: filepath.Join(bin, "tenure"), Build: "go build -C .. -o bench/bin/tenure ./cmd/tenure"})
		systems = append(systems, cluster.System{Label: "tenure", Kind: "tenure", Bin: filepath.Join(bin, "tenure"), PreArgs: []string{"serve"}})
	case "etcd":
		l := etcdLabel + " (as SUT)"
		slots = append(slots, report.Slot{Role: "system under test", Label: l, Bin: filepath.Join(bin, "etcd"), Build: etcdBuild})
		systems = append(systems, cluster.System{Label: l, Kind: "etcd", Bin: filepath.Join(bin, "etcd")})
	case "none":
	default:
		return fmt.Errorf("-sut must be tenure, etcd or none")
	}
	for _, o := range strings.Split(*others, ",") {
		switch strings.TrimSpace(o) {
		case "", "none":
		case cluster.KindZooKeeper:
			systems = append(systems, cluster.System{Label: "ZooKeeper 3.8", Kind: cluster.KindZooKeeper, Bin: cluster.ZooKeeperJar})
		case cluster.KindRedis:
			systems = append(systems, cluster.System{Label: "Redis 7.0 (1 node, unreplicated)", Kind: cluster.KindRedis, Bin: "/usr/bin/redis-server"})
		case cluster.KindPostgres:
			systems = append(systems, cluster.System{Label: "PostgreSQL 15 (1 node, unreplicated)", Kind: cluster.KindPostgres, Bin: *pgDSN})
		default:
			return fmt.Errorf("-others: unknown system %q", o)
		}
	}
	if len(systems) == 0 {
		return errors.New("nothing to run: -ref none and -sut none")
	}
	for _, s := range systems {
		if s.Kind == cluster.KindPostgres {
			continue
		}
		if _, err := os.Stat(s.Bin); err != nil {
			return fmt.Errorf("%s binary: %w", s.Label, err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	runID := start.UTC().Format("20060102-150405")
	runDir := filepath.Join(abs(*workDir), runID)
	rep := &report.Run{
		Start: start, Mode: m, Repeat: *repeat, Commit: machine.GitCommit(*mainRepo), Machine: machine.Read(),
		Slots: slots, ClusterCommands: map[string][]string{},
		ToolBuild:  "etcd benchmark tool, go build go.etcd.io/etcd/v3/tools/benchmark in bench/refs/benchtool (go.etcd.io/etcd/v3 v3.6.8)",
		Invocation: "tenure-bench " + strings.Join(os.Args[1:], " "),
		Notes: []string{fmt.Sprintf("This machine has %d CPUs and is shared with other engineers' builds and tests while benchmarks run: "+
			"client, 3 members and background load compete for the same cores, so absolute numbers are noisy; compare systems within one run, and prefer full mode medians.", machine.Read().NumCPU),
			"The 1-client suites pass --target-leader so every run talks to the leader (no leader/follower lottery between runs)."},
	}
	results := map[string]*report.SuiteResult{}
	if *variants != "" {
		want := map[string]bool{}
		for _, v := range strings.Split(*variants, ",") {
			want[strings.TrimSpace(v)] = true
		}
		variantOK = func(v string) bool { return v == "" || want[v] }
	}
	for _, s := range sel {
		sr := &report.SuiteResult{Suite: s, Runs: map[string][]suite.Result{}, Failures: map[string][]string{}, Commands: map[string]string{}}
		for _, sys := range systems {
			for _, v := range suite.VariantsOf(s, sys.Kind) {
				if !variantOK(v) {
					continue
				}
				sr.Rows = append(sr.Rows, report.Row{Label: rowLabel(sys, v), System: sys.Label, Kind: sys.Kind, Variant: v})
			}
		}
		results[s.ID()] = sr
		rep.Suites = append(rep.Suites, sr)
	}
	opts := cluster.DefaultOptions()
	opts.ClientWindowBytes = int32(*window)
	startFails := map[string]int{} // consecutive cluster start failures per system
	logf("run %s: %d suites × %d systems × %d repetitions, work dir %s", runID, len(sel), len(systems), *repeat, runDir)
	for r := 0; r < *repeat; r++ {
		for _, s := range sel {
			order := systems
			if r%2 == 1 { // alternate which system goes first
				order = reversed(systems)
			}
			for _, sys := range order {
				for _, variant := range suite.VariantsOf(s, sys.Kind) {
					if !variantOK(variant) {
						continue
					}
					label := rowLabel(sys, variant)
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if startFails[sys.Label] >= 2 {
						results[s.ID()].Failures[label] = append(results[s.ID()].Failures[label], "skipped: the cluster failed to start twice in a row earlier in this run")
						logf("  r%d %-20s %-24s skipped (cluster failed to start twice in a row)", r+1, s.ID(), label)
						continue
					}
					dir := filepath.Join(runDir, fmt.Sprintf("r%d-%s-%s", r+1, s.ID(), slug(label)))
					load := machine.LoadAvg()
					cpu0, cpuOK := machine.ReadCPUTimes()
					to := *runTO
					if f, ok := s.(suite.FullOnly); ok && f.FullOnly() {
						to = max(to, 30*time.Minute) // loading 1M keys takes minutes
					}
					res, cmds, err := runOne(ctx, to, sys, variant, s, opts, dir, tools, m, *keep)
					steal := "" // unknown where /proc/stat is unreadable
					if cpuOK {
						steal = machine.StealSince(cpu0)
					}
					sr := results[s.ID()]
					if len(cmds) > 0 {
						rep.ClusterCommands[sys.Label] = cmds
					}
					if res.Command != "" {
						sr.Commands[label] = res.Command
					}
					var se *startError
					if errors.As(err, &se) {
						startFails[sys.Label]++
					} else if err == nil {
						startFails[sys.Label] = 0
					}
					if err != nil {
						logf("  r%d %-20s %-24s FAILED: %v", r+1, s.ID(), label, firstLine(err.Error()))
						sr.Failures[label] = append(sr.Failures[label], err.Error())
						continue
					}
					if res.Extra == nil {
						res.Extra = map[string]string{}
					}
					res.Extra["load"] = load
					if steal != "" {
						res.Extra["steal"] = steal
					}
					logf("  r%d %-20s %-24s %9.0f req/s  p50 %7.3f ms  p99 %7.3f ms  errors %d %s", r+1, s.ID(), label,
						res.RPS, float64(res.P50)/1e6, float64(res.P99)/1e6, res.Errors, report.Conditions(res))
					sr.Runs[label] = append(sr.Runs[label], res)
				}
			}
		}
	}
	rep.End = time.Now()
	rep.LoadEnd = machine.LoadAvg()
	chartRel := *charts
	if chartRel != "" {
		cdir := filepath.Join(filepath.Dir(abs(*out)), chartRel)
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return err
		}
		if err := rep.WriteCharts(cdir); err != nil {
			logf("charts: %v", err)
			chartRel = ""
		}
	}
	if err := rep.WriteFile(*out, chartRel); err != nil {
		return err
	}
	logf("wrote %s (%s)", *out, rep.End.Sub(start).Round(time.Second))
	return nil
}

// variantOK filters variants (-variants).
var variantOK = func(string) bool { return true }

// rowLabel names a result row: the system, and the variant if any.
func rowLabel(sys cluster.System, variant string) string {
	if variant == "" {
		return sys.Label
	}
	return sys.Label + " · " + variant
}

func runOne(ctx context.Context, timeout time.Duration, sys cluster.System, variant string, s suite.Suite, o cluster.Options, dir string, tools suite.Tools, m suite.Mode, keep bool) (suite.Result, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ext *cluster.External
	var err error
	switch sys.Kind {
	case cluster.KindZooKeeper:
		ext, err = cluster.StartZooKeeper(ctx, sys.Label, dir, o.Size)
	case cluster.KindRedis:
		ext, err = cluster.StartRedis(ctx, sys.Label, dir)
	case cluster.KindPostgres:
		ext, err = cluster.UsePostgres(ctx, sys.Label, sys.Bin)
	}
	if ext != nil || err != nil {
		if err != nil {
			return suite.Result{}, nil, &startError{err}
		}
		defer func() {
			ext.Stop()
			if !keep {
				_ = ext.RemoveData()
			}
		}()
		env := &suite.Env{Ext: ext, Variant: variant, Tools: tools, Mode: m, LogDir: filepath.Join(dir, "bench")}
		res, err := s.Run(ctx, env)
		return res, ext.Cmds, err
	}
	c, err := cluster.Start(ctx, sys, dir, o)
	if err != nil {
		return suite.Result{}, nil, &startError{err}
	}
	var cmds []string
	for i := range c.Endpoints {
		cmds = append(cmds, c.CommandLine(i))
	}
	defer func() {
		c.Stop()
		if !keep {
			_ = c.RemoveData()
		}
	}()
	env := &suite.Env{Cluster: c, Variant: variant, Tools: tools, Mode: m, LogDir: filepath.Join(dir, "bench")}
	res, err := s.Run(ctx, env)
	return res, cmds, err
}

// startError marks a failure to bring the cluster up (as opposed to a suite failure).
type startError struct{ err error }

func (e *startError) Error() string { return "cluster start: " + e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

func selectSuites(all []suite.Suite, ids string) ([]suite.Suite, error) {
	if ids == "" {
		return all, nil
	}
	byID := map[string]suite.Suite{}
	for _, s := range all {
		byID[s.ID()] = s
	}
	var out []suite.Suite
	for _, id := range strings.Split(ids, ",") {
		s, ok := byID[strings.TrimSpace(id)]
		if !ok {
			return nil, fmt.Errorf("unknown suite %q (see -list)", id)
		}
		out = append(out, s)
	}
	return out, nil
}

func reversed(s []cluster.System) []cluster.System {
	out := make([]cluster.System, len(s))
	for i := range s {
		out[len(s)-1-i] = s[i]
	}
	return out
}

func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", a...)
}
