// Command chaos runs Tenure's fault-injection suite: a real multi-process
// cluster (test/cluster) with every peer link and client link behind a
// controllable proxy, a seeded scheduler that mixes process, network and
// storage-failpoint faults with load, workload checkers, and regression
// scenarios for etcd bugs. See doc.go for what is checked.
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
