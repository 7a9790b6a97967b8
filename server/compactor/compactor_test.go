package compactor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"
)

var errCompacted = errors.New("compacted")

type fakeStore struct {
	rev       int64
	leader    bool
	failNext  error
	compacted []int64 // successful Compact calls, in order
}

func (f *fakeStore) Rev() int64     { return f.rev }
func (f *fakeStore) IsLeader() bool { return f.leader }
func (f *fakeStore) Compact(_ context.Context, rev int64) error {
	if err := f.failNext; err != nil {
		f.failNext = nil
		return err
	}
	f.compacted = append(f.compacted, rev)
	return nil
}

func newTest(t *testing.T, cfg Config, f *fakeStore) *Compactor {
	t.Helper()
	return New(cfg, f, slog.New(slog.NewTextHandler(io.Discard, nil)), func(err error) bool { return errors.Is(err, errCompacted) })
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		mode, retention string
		want            *Config
		wantErr         bool
	}{
		{"periodic", "1", &Config{Mode: ModePeriodic, Retention: time.Hour}, false},
		{"", "0.5", &Config{Mode: ModePeriodic, Retention: 30 * time.Minute}, false},
		{"periodic", "1h30m", &Config{Mode: ModePeriodic, Retention: 90 * time.Minute}, false},
		{"periodic", "0", nil, false},
		{"periodic", "", nil, false},
		{"periodic", "0s", nil, false},
		{"periodic", "-1", nil, true},
		{"periodic", "-5m", nil, true},
		{"periodic", "100ms", nil, true},
		{"periodic", "soon", nil, true},
		{"revision", "1000", &Config{Mode: ModeRevision, Revisions: 1000}, false},
		{"revision", "0", nil, false},
		{"revision", "1h", nil, true},
		{"revision", "-3", nil, true},
		{"hourly", "1", nil, true},
	} {
		got, err := Parse(tt.mode, tt.retention)
		if (err != nil) != tt.wantErr {
			t.Errorf("Parse(%q, %q) error = %v, want error %v", tt.mode, tt.retention, err, tt.wantErr)
			continue
		}
		if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("Parse(%q, %q) = %+v, want %+v", tt.mode, tt.retention, got, tt.want)
		}
	}
}

// Periodic mode keeps one retention of history: every retention (up to an
// hour) it compacts to the revision sampled a retention before.
func TestPeriodicKeepsOneRetention(t *testing.T) {
	f := &fakeStore{leader: true}
	c := newTest(t, Config{Mode: ModePeriodic, Retention: 10 * time.Second}, f)
	if c.Interval() != time.Second {
		t.Fatalf("interval %v, want a tenth of the retention", c.Interval())
	}
	t0 := time.Unix(1000, 0)
	for s := 0; s <= 30; s++ {
		f.rev = int64(100 + 10*s) // 10 revisions a second
		c.step(context.Background(), t0.Add(time.Duration(s)*time.Second))
	}
	// At 10 s the revision of 0 s, at 20 s that of 10 s, at 30 s that of 20 s.
	if want := []int64{100, 200, 300}; !slices.Equal(f.compacted, want) {
		t.Fatalf("compacted to %v, want %v", f.compacted, want)
	}
}

// A retention above an hour compacts hourly, each time to the revision a
// retention old.
func TestPeriodicLongRetentionCompactsHourly(t *testing.T) {
	f := &fakeStore{leader: true}
	c := newTest(t, Config{Mode: ModePeriodic, Retention: 3 * time.Hour}, f)
	if c.Interval() != 6*time.Minute {
		t.Fatalf("interval %v, want 6m (an hour / 10)", c.Interval())
	}
	t0 := time.Unix(0, 0)
	for m := 0; m <= 5*60; m += 6 {
		f.rev = int64(m + 1)
		c.step(context.Background(), t0.Add(time.Duration(m)*time.Minute))
	}
	// First when 3 h of samples exist (at 3 h), then hourly: to what was
	// sampled at 0, 60 and 120 min.
	if want := []int64{1, 61, 121}; !slices.Equal(f.compacted, want) {
		t.Fatalf("compacted to %v (revision = minute sampled + 1), want %v", f.compacted, want)
	}
}

// Only the leader compacts, and a new leader keeps a full retention from
// when it took over; a failed compaction is tried again at the next step,
// and "already compacted" counts as done.
func TestPeriodicLeaderOnlyAndRetry(t *testing.T) {
	f := &fakeStore{}
	c := newTest(t, Config{Mode: ModePeriodic, Retention: 10 * time.Second}, f)
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for s := 0; s < 20; s++ {
		f.rev = int64(s)
		c.step(context.Background(), at(s))
	}
	if len(f.compacted) != 0 {
		t.Fatalf("a follower compacted: %v", f.compacted)
	}
	f.leader = true
	for s := 20; s < 30; s++ {
		f.rev = int64(s)
		c.step(context.Background(), at(s))
	}
	if len(f.compacted) != 0 {
		t.Fatalf("compacted %v less than a retention after taking over", f.compacted)
	}
	f.rev, f.failNext = 30, errors.New("request timed out")
	c.step(context.Background(), at(30)) // due: fails
	if len(f.compacted) != 0 {
		t.Fatalf("compacted %v despite the failure", f.compacted)
	}
	f.rev = 31
	c.step(context.Background(), at(31)) // retried at once
	if want := []int64{21}; !slices.Equal(f.compacted, want) {
		t.Fatalf("after the retry compacted to %v, want %v (sampled 10 s before 31 s)", f.compacted, want)
	}
	f.failNext = errCompacted
	for s := 32; s <= 41; s++ {
		f.rev = int64(s)
		c.step(context.Background(), at(s))
	}
	for s := 42; s <= 51; s++ {
		f.rev = int64(s)
		c.step(context.Background(), at(s))
	}
	// At 41 s the store said "compacted" (not retried); at 51 s the next.
	if want := []int64{21, 41}; !slices.Equal(f.compacted, want) {
		t.Fatalf("compacted to %v, want %v", f.compacted, want)
	}
}

// Revision mode keeps the last N revisions, compacting only when that
// moves the compaction revision.
func TestRevisionMode(t *testing.T) {
	f := &fakeStore{leader: true, rev: 50}
	c := newTest(t, Config{Mode: ModeRevision, Revisions: 100}, f)
	if c.Interval() != 5*time.Minute {
		t.Fatalf("interval %v, want etcd's 5m", c.Interval())
	}
	now := time.Unix(0, 0)
	c.step(context.Background(), now) // 50 - 100 < 1: nothing
	f.rev = 1000
	c.step(context.Background(), now)
	c.step(context.Background(), now) // unchanged: not again
	f.rev = 1050
	c.step(context.Background(), now)
	f.leader = false
	f.rev = 5000
	c.step(context.Background(), now)
	if want := []int64{900, 950}; !slices.Equal(f.compacted, want) {
		t.Fatalf("compacted to %v, want %v", f.compacted, want)
	}
}
