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
	LatencyP99               // lower p99 is better
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
	Cluster *cluster.Cluster  // etcd-compatible systems (etcd, tenure); nil otherwise
	Ext     *cluster.External // ZooKeeper, Redis, PostgreSQL; nil otherwise
	Variant string            // which of the suite's Variants runs (see Variants)
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

// Variants is implemented by suites that run in several ways on one kind
// of system (e.g. locks through the v3lock service and through clientv3's
// Mutex on etcd) or on systems other than etcd and tenure. It returns the
// variants to run on a system kind ("etcd", "tenure", "zookeeper", "redis",
// "postgres"); none means the suite does not apply. Suites without it run
// once, with an empty variant, on etcd and tenure only.
type Variants interface {
	Variants(kind string) []string
}

// VariantsOf returns the variants of s on kind.
func VariantsOf(s Suite, kind string) []string {
	if v, ok := s.(Variants); ok {
		return v.Variants(kind)
	}
	if kind == "etcd" || kind == "tenure" {
		return []string{""}
	}
	return nil
}

// Ref names a row the report compares every row against: the system kind
// and variant (e.g. etcd's v3lock for the lock suites), with a column heading.
type Ref struct {
	Kind, Variant, Column string
}

// Comparer is implemented by suites whose ratios are not simply "system
// under test / reference" (the lock suites compare with etcd's v3lock and
// with ZooKeeper).
type Comparer interface {
	Refs() []Ref
	Unit() string // e.g. "cycles/s"
	Note() string // what p50/p99 measure
}

// All returns every suite in run order. Later families (locks, watch fan-out,
// failover, RSS/restart at 1M keys) append theirs here.
func All() []Suite {
	var all []Suite
	all = append(all, EtcdBenchSuites()...)
	all = append(all, LockSuites()...)
	all = append(all, WatchSuites()...)
	all = append(all, FailoverSuites()...)
	all = append(all, BigDataSuites()...)
	return all
}
