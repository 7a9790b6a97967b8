package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Names of the failpoints the server defines. Tests refer to them by these names.
const (
	RaftBeforeSave     = "raft-before-save"     // before entries/hard state are written
	RaftAfterSave      = "raft-after-save"      // after the synced write, before messages are sent
	ApplyBeforeCommit  = "apply-before-commit"  // state-machine batch built, not committed
	ApplyAfterCommit   = "apply-after-commit"   // batch committed, results not yet published
	SnapshotBeforeSave = "snapshot-before-save" // before a received snapshot is written
	SnapshotAfterSave  = "snapshot-after-save"  // after a received snapshot is written, before raft learns of it
	CompactBeforeTrim  = "compact-before-trim"  // raft log compaction: snapshot meta saved, log not trimmed
	MVCCCompactMidway  = "mvcc-compact-midway"  // physical mvcc compaction half done
)

// ExitCode is the status a failpoint "exit" action terminates with.
const ExitCode = 86

type point struct {
	action string
	after  int64 // fire on this hit (1-based); 0 = every hit
	hits   atomic.Int64
}

var (
	enabled atomic.Bool
	mu      sync.RWMutex
	points  = map[string]*point{}
)

func init() {
	if spec := os.Getenv("TENURE_FAILPOINTS"); spec != "" {
		if err := Enable(spec); err != nil {
			fmt.Fprintln(os.Stderr, "tenure: TENURE_FAILPOINTS:", err)
			os.Exit(2)
		}
	}
}

// Enable parses a spec like "a=exit,b=2*panic" and arms those failpoints.
func Enable(spec string) error {
	mu.Lock()
	defer mu.Unlock()
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, action, ok := strings.Cut(part, "=")
		if !ok || name == "" || action == "" {
			return fmt.Errorf("failpoint %q: want name=action", part)
		}
		p := &point{action: action}
		if n, rest, ok := strings.Cut(action, "*"); ok {
			c, err := strconv.ParseInt(n, 10, 64)
			if err != nil || c < 1 {
				return fmt.Errorf("failpoint %q: bad count %q", part, n)
			}
			p.after, p.action = c, rest
		}
		switch {
		case p.action == "exit", p.action == "panic":
		case strings.HasPrefix(p.action, "sleep:"):
			if _, err := time.ParseDuration(strings.TrimPrefix(p.action, "sleep:")); err != nil {
				return fmt.Errorf("failpoint %q: %v", part, err)
			}
		default:
			return fmt.Errorf("failpoint %q: unknown action %q (exit, panic, sleep:<dur>)", part, p.action)
		}
		points[name] = p
	}
	enabled.Store(len(points) > 0)
	return nil
}

// Disable disarms every failpoint (for in-process tests).
func Disable() {
	mu.Lock()
	points = map[string]*point{}
	enabled.Store(false)
	mu.Unlock()
}

// Hit triggers the named failpoint if it is armed.
func Hit(name string) {
	if !enabled.Load() {
		return
	}
	mu.RLock()
	p := points[name]
	mu.RUnlock()
	if p == nil {
		return
	}
	n := p.hits.Add(1)
	if p.after > 0 && n != p.after {
		return
	}
	switch {
	case p.action == "exit":
		fmt.Fprintf(os.Stderr, "tenure: failpoint %s: exiting\n", name)
		os.Exit(ExitCode)
	case p.action == "panic":
		panic("tenure: failpoint " + name)
	case strings.HasPrefix(p.action, "sleep:"):
		d, _ := time.ParseDuration(strings.TrimPrefix(p.action, "sleep:"))
		time.Sleep(d)
	}
}
