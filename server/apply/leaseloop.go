package apply

import (
	"context"
	"encoding/binary"
	"time"
)

// LeaseLoopConfig tunes the leader's lease clock.
type LeaseLoopConfig struct {
	// Tick is how often the leader looks for expired leases (default 100 ms).
	Tick time.Duration
	// CheckpointInterval bounds how stale a replicated remaining TTL may get
	// (default 1 s); a new leader may extend a lease by at most this much.
	CheckpointInterval time.Duration
	// MaxExpiriesPerSecond rate-limits revocations so an expiry storm does not
	// stall the cluster (default 1000).
	MaxExpiriesPerSecond int
}

// RunLeaseLoop proposes expiries and checkpoints while this member is the
// leader; it returns when ctx ends.
func (a *Applier) RunLeaseLoop(ctx context.Context, cfg LeaseLoopConfig) {
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = time.Second
	}
	if cfg.MaxExpiriesPerSecond <= 0 {
		cfg.MaxExpiriesPerSecond = 1000
	}
	perTick := int(int64(cfg.MaxExpiriesPerSecond) * int64(cfg.Tick) / int64(time.Second))
	if perTick < 1 {
		perTick = 1
	}
	ticker := time.NewTicker(cfg.Tick)
	defer ticker.Stop()
	lastCheckpoint := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if !a.lessor.IsLeader() {
			continue
		}
		if ids := a.lessor.Expired(perTick); len(ids) > 0 {
			data := make([]byte, 9, 9+8*len(ids))
			data[0] = KindLeaseExpire
			binary.BigEndian.PutUint64(data[1:], a.AppliedIndex())
			for _, id := range ids {
				data = binary.BigEndian.AppendUint64(data, uint64(id))
			}
			if len(ids) == perTick {
				a.lg.Warn("lease expiry storm: revocations rate-limited", "per-second", cfg.MaxExpiriesPerSecond)
			}
			pctx, cancel := context.WithTimeout(ctx, cfg.Tick*10)
			_ = a.ProposeRaw(pctx, data)
			cancel()
		}
		if time.Since(lastCheckpoint) >= cfg.CheckpointInterval/2 {
			lastCheckpoint = time.Now()
			due := a.lessor.CheckpointDue(cfg.CheckpointInterval/2, 4096)
			if len(due) > 0 {
				data := make([]byte, 1, 1+16*len(due))
				data[0] = KindLeaseCheckpoint
				for _, d := range due {
					data = binary.BigEndian.AppendUint64(data, uint64(d[0]))
					data = binary.BigEndian.AppendUint64(data, uint64(d[1]))
				}
				pctx, cancel := context.WithTimeout(ctx, cfg.CheckpointInterval)
				_ = a.ProposeRaw(pctx, data)
				cancel()
			}
		}
	}
}
