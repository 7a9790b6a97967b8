package raftnode

import "time"

// Observer receives timings from the node's loops for metrics. Every
// callback runs on a hot path (Ready or apply loop): it must be cheap
// (an atomic add or a histogram observation) and must not block.
type Observer struct {
	// DiskSync: one synced write of hard state + entries (+ snapshot
	// metadata) — etcd's WAL fsync.
	DiskSync func(d time.Duration)
	// Apply: one state-machine entry handed to StateMachine.ApplyEntry.
	Apply func(d time.Duration)
	// SnapshotSent: a snapshot streamed to a follower (ok=false: it failed).
	SnapshotSent func(d time.Duration, ok bool)
}

// Thresholds above which the node logs a warning, as etcd does.
const (
	SlowDiskSync = 100 * time.Millisecond // "slow fdatasync"
	SlowApply    = 100 * time.Millisecond // "apply request took too long" (default of Config.WarnApplyDuration)
)

func (n *Node) observeSync(start time.Time, entries int) {
	d := time.Since(start)
	if o := n.cfg.Observer; o != nil && o.DiskSync != nil {
		o.DiskSync(d)
	}
	if d > SlowDiskSync {
		n.log.Warn("slow fdatasync", "took", d, "expected-duration", SlowDiskSync, "entries", entries)
	}
}

func (n *Node) observeApply(start time.Time, index uint64) {
	d := time.Since(start)
	if o := n.cfg.Observer; o != nil && o.Apply != nil {
		o.Apply(d)
	}
	if d > n.cfg.WarnApplyDuration {
		n.log.Warn("apply request took too long", "took", d, "expected-duration", n.cfg.WarnApplyDuration, "index", index)
	}
}

func (n *Node) observeSnapshotSent(start time.Time, ok bool) {
	if o := n.cfg.Observer; o != nil && o.SnapshotSent != nil {
		o.SnapshotSent(time.Since(start), ok)
	}
}
