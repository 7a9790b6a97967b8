package compactor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Modes (--auto-compaction-mode).
const (
	ModePeriodic = "periodic"
	ModeRevision = "revision"
)

// revisionInterval is how often revision mode compacts (etcd: 5 minutes).
const revisionInterval = 5 * time.Minute

// Config is a parsed --auto-compaction-mode/--auto-compaction-retention.
type Config struct {
	Mode      string
	Retention time.Duration // periodic
	Revisions int64         // revision
}

// Parse reads the flags as etcd does. In periodic mode the retention is a
// duration ("30m", "1h30m") or a bare number of hours ("1", "0.5"); in
// revision mode a number of revisions. "0" (or "") turns compaction off:
// Parse returns nil and no error.
func Parse(mode, retention string) (*Config, error) {
	if retention == "" {
		retention = "0"
	}
	switch mode {
	case ModePeriodic, "":
		if h, err := strconv.ParseFloat(retention, 64); err == nil {
			if h < 0 {
				return nil, fmt.Errorf("--auto-compaction-retention: %q must not be negative", retention)
			}
			if h == 0 {
				return nil, nil
			}
			return &Config{Mode: ModePeriodic, Retention: time.Duration(h * float64(time.Hour))}, nil
		}
		d, err := time.ParseDuration(retention)
		if err != nil {
			return nil, fmt.Errorf("--auto-compaction-retention: %q is neither a duration (e.g. 30m) nor a number of hours", retention)
		}
		if d < 0 {
			return nil, fmt.Errorf("--auto-compaction-retention: %q must not be negative", retention)
		}
		if d == 0 {
			return nil, nil
		}
		if d < time.Second {
			return nil, fmt.Errorf("--auto-compaction-retention: %q is under a second", retention)
		}
		return &Config{Mode: ModePeriodic, Retention: d}, nil
	case ModeRevision:
		n, err := strconv.ParseInt(retention, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--auto-compaction-retention: %q is not a number of revisions (revision mode)", retention)
		}
		if n == 0 {
			return nil, nil
		}
		return &Config{Mode: ModeRevision, Revisions: n}, nil
	default:
		return nil, fmt.Errorf("--auto-compaction-mode: %q is neither %s nor %s", mode, ModePeriodic, ModeRevision)
	}
}

// Target is the store the compactor works on.
type Target interface {
	// Rev is the current revision.
	Rev() int64
	// IsLeader reports whether this member leads (only the leader compacts).
	IsLeader() bool
	// Compact compacts the key-value history up to rev through raft.
	// ErrCompacted-like failures are reported by IsCompacted.
	Compact(ctx context.Context, rev int64) error
}

// Compactor is one member's automatic compaction.
type Compactor struct {
	cfg         Config
	t           Target
	log         *slog.Logger
	isCompacted func(error) bool

	samples     []sample  // periodic: (time, revision), oldest first
	lastSample  time.Time // periodic
	lastCompact time.Time
	retry       bool  // periodic: the last compaction failed; try at the next step
	compacted   int64 // the last revision this compactor compacted to
}

type sample struct {
	at  time.Time
	rev int64
}

// New returns a compactor for cfg (non-nil). isCompacted tells the error of
// a compaction below the current compaction revision.
func New(cfg Config, t Target, log *slog.Logger, isCompacted func(error) bool) *Compactor {
	return &Compactor{cfg: cfg, t: t, log: log.With("component", "compactor"), isCompacted: isCompacted}
}

// Interval is how often Run steps: a tenth of the retention up to an hour
// (periodic), or revision mode's 5 minutes.
func (c *Compactor) Interval() time.Duration {
	if c.cfg.Mode == ModeRevision {
		return revisionInterval
	}
	return c.compactEvery() / 10
}

func (c *Compactor) compactEvery() time.Duration { return min(c.cfg.Retention, time.Hour) }

// Run steps every Interval until ctx ends.
func (c *Compactor) Run(ctx context.Context) {
	tk := time.NewTicker(c.Interval())
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			c.step(ctx, now)
		}
	}
}

// step does what is due at now.
func (c *Compactor) step(ctx context.Context, now time.Time) {
	if !c.t.IsLeader() {
		c.samples, c.lastCompact, c.retry = nil, time.Time{}, false
		return
	}
	switch c.cfg.Mode {
	case ModeRevision:
		if rev := c.t.Rev() - c.cfg.Revisions; rev > 0 && rev > c.compacted {
			c.compact(ctx, rev, "revision", "revision-compaction-retention", c.cfg.Revisions)
		}
	default:
		if c.lastCompact.IsZero() {
			c.lastCompact = now // a compaction is due a period after taking over
		}
		c.samples = append(c.samples, sample{at: now, rev: c.t.Rev()})
		if !c.retry && now.Sub(c.lastCompact) < c.compactEvery() {
			return
		}
		// The newest sample at least a retention old; older ones go.
		cut := -1
		for i, s := range c.samples {
			if now.Sub(s.at) >= c.cfg.Retention {
				cut = i
			}
		}
		if cut < 0 {
			return
		}
		rev := c.samples[cut].rev
		c.samples = c.samples[cut:]
		c.lastCompact, c.retry = now, false
		if rev > c.compacted {
			c.compact(ctx, rev, "periodic", "compact-period", c.cfg.Retention)
		}
	}
}

func (c *Compactor) compact(ctx context.Context, rev int64, mode, key string, val any) {
	c.log.Info("starting auto "+mode+" compaction", "revision", rev, key, val)
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := c.t.Compact(cctx, rev)
	switch {
	case err == nil:
		c.compacted = rev
		c.log.Info("completed auto "+mode+" compaction", "revision", rev, key, val)
	case c.isCompacted != nil && c.isCompacted(err):
		c.compacted = rev
	case errors.Is(err, context.Canceled):
	default:
		c.log.Warn("failed auto "+mode+" compaction; trying again", "revision", rev, "err", err)
		c.retry = true
	}
}
