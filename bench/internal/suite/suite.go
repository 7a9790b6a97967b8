// Package suite defines benchmark suites. A Suite runs against one running
// cluster and returns one Result; the driver runs every suite against every
// system, repeats, and reports medians. Suites driven by etcd's benchmark tool
// live in etcdbench.go; later suites (locks, watch fan-out, failover, RSS, and
// the ZooKeeper/Redis/PostgreSQL references) implement the same interface.
package suite

import (
	"context"
	"time"

	"github.com/tenure-io/tenure/bench/internal/cluster"
)

// Metric says which number a suite's target is about.
type Metric int

const (
	Throughput Metric = iota // higher req/s is better
	LatencyP50               // lower p50 is better
)

// Mode selects the size of a run.
type Mode string

const (
	Short Mode = "short"
	Full  Mode = "full"
)

// Tools are the helper binaries suites may use.
type Tools struct {
	Benchmark string // etcd's tools/benchmark (go.etcd.io/etcd/v3 v3.6.8)
	Etcdctl   string // etcdctl 3.7.3
}

// Env is what a suite gets for one run.
type Env struct {
	Cluster *cluster.Cluster
	Tools   Tools
	Mode    Mode
	LogDir  string // where the suite may write raw output
}

// Result is one run of one suite against one system.
type Result struct {
	RPS     float64
	P50     time.Duration
	P99     time.Duration
	Avg     time.Duration
	Errors  int               // failed requests
	ErrDist map[string]int    // error message -> count
	Command string            // the exact command run
	Raw     string            // the tool's output
	Extra   map[string]string // suite-specific numbers
}

// Suite is one benchmark.
type Suite interface {
	ID() string     // short identifier, used for file names and -suites
	Title() string  // table heading
	Target() string // the target from the issues, for the report
	Primary() Metric
	Run(ctx context.Context, env *Env) (Result, error)
}

// All returns every suite in run order. Later families (locks, watch fan-out,
// failover, RSS/restart at 1M keys) append theirs here.
func All() []Suite {
	var all []Suite
	all = append(all, EtcdBenchSuites()...)
	return all
}
