package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/test/cluster"
)

// Config is one chaos run.
type Config struct {
	Seed      int64
	Duration  time.Duration // fault phase
	Members   int
	Artifacts string // where histories are saved on anomalies ("" = temp dir)
	Scenarios bool   // run the regression scenarios after the fault phase
	Verbose   bool
	// LinTimeout bounds the porcupine check of the register history.
	LinTimeout time.Duration
}

// DefaultConfig is a 5-minute run on 3 members with scenarios.
func DefaultConfig() Config {
	return Config{Duration: 5 * time.Minute, Members: 3, Scenarios: true, LinTimeout: 2 * time.Minute}
}

// Result of a run.
type Result struct {
	Summary   string
	Anomalies int
	Ops       int64
	Faults    map[string]int
	Dir       string // saved artifacts (when anomalies > 0)
}

// progTB implements cluster.TB for the standalone program: Fatal ends the
// process after running the cleanups (killing every member).
type progTB struct {
	verbose  bool
	mu       sync.Mutex
	cleanups []func()
	failed   bool
	dirs     []string
}

func newProgTB(verbose bool) *progTB { return &progTB{verbose: verbose} }

func (p *progTB) Helper() {}
func (p *progTB) Logf(format string, args ...any) {
	if p.verbose {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
	}
}
func (p *progTB) Errorf(format string, args ...any) {
	p.mu.Lock()
	p.failed = true
	p.mu.Unlock()
	fmt.Fprintf(os.Stderr, "chaos: error: "+format+"\n", args...)
}
func (p *progTB) Fatal(args ...any) { p.Fatalf("%s", fmt.Sprint(args...)) }
func (p *progTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chaos: harness failure: "+format+"\n", args...)
	p.mu.Lock()
	p.failed = true
	p.mu.Unlock()
	p.runCleanups()
	os.Exit(2)
}
func (p *progTB) Failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}
func (p *progTB) Cleanup(f func()) {
	p.mu.Lock()
	p.cleanups = append(p.cleanups, f)
	p.mu.Unlock()
}
func (p *progTB) TempDir() string {
	d, err := os.MkdirTemp("", "tenure-chaos-data-")
	if err != nil {
		p.Fatalf("temp dir: %v", err)
	}
	p.mu.Lock()
	p.dirs = append(p.dirs, d)
	p.mu.Unlock()
	return d
}
func (p *progTB) runCleanups() {
	p.mu.Lock()
	cs := p.cleanups
	p.cleanups = nil
	dirs := p.dirs
	p.dirs = nil
	p.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

// run is the state shared by the scheduler, the workloads and the checkers.
type run struct {
	cfg   Config
	tb    cluster.TB
	c     *cluster.Cluster
	start time.Time

	ops atomic.Int64

	mu        sync.Mutex
	anomalies []string
	seen      map[string]bool
	faults    map[string]int
	timeline  []string // faults and notable events, for the saved history
	artifacts map[string][]byte

	leaseLateness []time.Duration // from the leases workload, for the report
}

func (r *run) logf(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", time.Since(r.start).Seconds()) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.timeline = append(r.timeline, line)
	r.mu.Unlock()
	r.tb.Logf("%s", line)
}

// anomaly records a violated promise.
func (r *run) anomaly(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	if r.seen[msg] {
		r.mu.Unlock()
		return // the same violation observed again (e.g. one response seen twice)
	}
	r.seen[msg] = true
	r.anomalies = append(r.anomalies, msg)
	r.mu.Unlock()
	r.logf("ANOMALY: %s", msg)
	fmt.Fprintln(os.Stderr, "chaos: ANOMALY:", msg)
}

func (r *run) fault(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

// save keeps an artifact to be written if the run has anomalies.
func (r *run) save(name string, data []byte) {
	r.mu.Lock()
	r.artifacts[name] = data
	r.mu.Unlock()
}

func (r *run) op() { r.ops.Add(1) }

// Run executes one chaos run against a fresh cluster and returns its result.
// tb is a *testing.T in the go test entry and a progTB in the program.
func Run(tb cluster.TB, cfg Config) Result {
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.LinTimeout == 0 {
		cfg.LinTimeout = 2 * time.Minute
	}
	r := &run{cfg: cfg, tb: tb, faults: map[string]int{}, artifacts: map[string][]byte{}, seen: map[string]bool{}}
	r.start = time.Now()
	r.logf("seed=%d duration=%v members=%d", cfg.Seed, cfg.Duration, cfg.Members)
	r.c = cluster.Start(tb, cluster.Options{
		Size:          cfg.Members,
		Proxied:       true,
		HeartbeatMs:   50,
		ElectionMs:    500,
		SnapshotCount: 2000, // log compaction (and the compact-before-trim failpoint) happens in a run
		StartTimeout:  60 * time.Second,
	})
	r.logf("cluster ready")
	r.logMembers()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x7e4e))
	regs := newRegisters(r, rng.Uint64())
	cnt := newCounter(r, rng.Uint64())
	wat := newWatches(r, rng.Uint64())
	// the registers check resolves writes of unknown outcome against the
	// committed history the watches check reads back (and verifies)
	regs.committed = wat.committedPuts
	ws := []workload{
		wat, // checked first
		regs,
		cnt,
		newLocks(r, rng.Uint64()),
		newLeases(r, rng.Uint64()),
		newElections(r, rng.Uint64()),
	}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx)
		}()
	}
	sched := &scheduler{r: r, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5c4ed))}
	sched.loop(time.Now().Add(cfg.Duration))
	sched.healAll()
	r.logf("fault phase over; waiting for the cluster to recover")
	rctx, rcancel := context.WithTimeout(context.Background(), 60*time.Second)
	if err := r.c.WaitReady(rctx); err != nil {
		r.anomaly("cluster did not recover within 60s after every fault was healed: %v", err)
	}
	rcancel()
	// Let workloads run a little on a healthy cluster so that stragglers
	// (observers, watchers) catch up, then stop them.
	quiet := time.NewTimer(3 * time.Second)
	<-quiet.C
	cancel()
	wg.Wait()
	r.logf("workloads stopped; checking")
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Minute+cfg.Duration/2)
	for _, w := range ws {
		w.check(cctx)
	}
	checkMembersAgree(cctx, r)
	ccancel()
	if cfg.Scenarios {
		runScenarios(r)
	}
	return r.finish()
}

func (r *run) finish() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{Anomalies: len(r.anomalies), Ops: r.ops.Load(), Faults: map[string]int{}}
	total := 0
	for k, v := range r.faults {
		res.Faults[k] = v
		switch k {
		case "restart", "failpoint-not-hit", "lincheck-inconclusive", "external-stop":
			// consequences of faults and notes, not faults
		default:
			total += v
		}
	}
	order := []string{"kill", "pause", "partition", "delay", "restart", "drop", "oneway", "clientblackhole", "failpoint", "replace", "clientpause"}
	var parts []string
	seen := map[string]bool{}
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s=%d", k, r.faults[k]))
		seen[k] = true
	}
	var rest []string
	for k := range r.faults {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		parts = append(parts, fmt.Sprintf("%s=%d", k, r.faults[k]))
	}
	res.Summary = fmt.Sprintf("chaos: seed=%d duration=%ds ops=%d faults=%d (%s) anomalies=%d",
		r.cfg.Seed, int(r.cfg.Duration.Seconds()), res.Ops, total, strings.Join(parts, " "), len(r.anomalies))
	if len(r.anomalies) > 0 {
		dir, err := r.saveArtifacts()
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: saving artifacts:", err)
		}
		res.Dir = dir
		res.Summary += fmt.Sprintf(" history=%s reproduce: go run ./test/chaos --seed %d --duration %v --members %d",
			dir, r.cfg.Seed, r.cfg.Duration, r.cfg.Members)
	}
	return res
}

// saveArtifacts writes the anomalies, the fault timeline, the workload
// histories and every member's log. Caller holds r.mu.
func (r *run) saveArtifacts() (string, error) {
	base := r.cfg.Artifacts
	if base != "" {
		if err := os.MkdirAll(base, 0o755); err != nil {
			return "", err
		}
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("chaos-%d-", r.cfg.Seed))
	if err != nil {
		return "", err
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
	}
	write("anomalies.txt", []byte(strings.Join(r.anomalies, "\n")+"\n"))
	write("timeline.txt", []byte(strings.Join(r.timeline, "\n")+"\n"))
	for name, b := range r.artifacts {
		write(name, b)
	}
	for _, m := range r.c.Members {
		if f, err := os.Open(m.LogPath); err == nil {
			if out, err := os.Create(filepath.Join(dir, filepath.Base(m.LogPath))); err == nil {
				io.Copy(out, f)
				out.Close()
			}
			f.Close()
		}
	}
	return dir, nil
}

// workload is load plus the checker of one promise.
type workload interface {
	run(ctx context.Context)   // until ctx is done
	check(ctx context.Context) // after every fault is healed and run returned
}

// logMembers writes the member IDs (by index) to the timeline: member logs
// and response headers name members by ID.
func (r *run) logMembers() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ids []string
	for i := range r.c.Members {
		st, err := r.c.Client(i).Status(ctx, r.c.Endpoint(i))
		if err != nil {
			ids = append(ids, fmt.Sprintf("%d=?", i))
			continue
		}
		ids = append(ids, fmt.Sprintf("%d=%x", i, st.Header.MemberId))
	}
	r.logf("members: %s", strings.Join(ids, " "))
}

// mono is a monotonic timestamp relative to the run's start.
func (r *run) mono() time.Duration { return time.Since(r.start) }
