// Command chaos runs Tenure's fault-injection suite: a real multi-process
// cluster (test/cluster) with every peer link and client link behind a
// controllable proxy, a seeded scheduler that mixes process, network and
// storage-failpoint faults with load, workload checkers, and regression
// scenarios for etcd bugs.
//
// Faults (scheduler, one at a time, seeded): kill -9 + restart, SIGSTOP/
// SIGCONT of members (on 5 or more members, sometimes of two at once: never
// more than a minority), minority/majority partitions (1|2, and 1|4 or 2|3
// on 5), one-way partitions, delay with jitter, connection drops,
// client-link blackholes, crashes at the storage failpoints (restart armed
// with TENURE_FAILPOINTS=name=N*exit, then without), member replacement
// (MemberRemove, MemberAdd, a fresh data dir joining with
// --initial-cluster-state existing). Beside the scheduler, the locks
// workload sends its lock-client processes SIGSTOP while they hold the
// lock, for longer than their lease, then SIGCONT (the GC pause; counted
// as clientpause).
//
// Checkers: registers.go (porcupine), counter (no entry lost or applied
// twice), watches.go (ordered, unique, reliable, atomic, resumable,
// bookmarkable), locks.go (fencing tokens at a resource process, from
// lock-client processes taking one lock through clientv3's Mutex, etcd's
// v3lock service and tenure.v1 Locks; a paused client never lands a stale
// write), leases.go (never early; lateness), elections.go (one leader per
// term; observers converge), every member's keyspace equal at the end;
// scenarios.go: etcd 9395, 11496, 13766, 17780, 11456 (v3lock and
// tenure.v1: a waiter whose lease expires while it waits gets an error,
// never the lock).
//
// The resource and the lock clients are this same executable started
// again with TENURE_CHAOS_ROLE set (procs.go); they die with the run.
//
// A seed reproduces the fault schedule and the workloads' choices, not the
// exact interleaving (real processes, real time).
//
//	go run ./test/chaos --duration 5m --seed 42 --members 3
//
// It ends with exactly one summary line on stdout and exits 1 when any
// anomaly was found (2 when the harness itself failed).
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	runRoleFromEnv() // a helper process (resource, lock client) of a run
	cfg := DefaultConfig()
	flag.Int64Var(&cfg.Seed, "seed", 0, "scheduler seed (0: derived from the clock; printed in the summary)")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the fault phase")
	flag.IntVar(&cfg.Members, "members", cfg.Members, "cluster size (3 or 5)")
	flag.StringVar(&cfg.Artifacts, "artifacts", os.Getenv("TENURE_TEST_ARTIFACTS"), "directory for saved histories on anomalies (default: a new temp dir)")
	flag.BoolVar(&cfg.Scenarios, "scenarios", cfg.Scenarios, "run the etcd-bug regression scenarios after the fault phase")
	flag.BoolVar(&cfg.Verbose, "v", false, "log every fault and check to stderr")
	flag.Parse()
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano() % 1_000_000_000
	}
	tb := newProgTB(cfg.Verbose)
	res := Run(tb, cfg)
	tb.runCleanups()
	fmt.Println(res.Summary)
	if res.Anomalies > 0 {
		os.Exit(1)
	}
}
