package raftnode

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/logbuf"
)

func TestInitialTickAdvanceRule(t *testing.T) {
	for _, c := range []struct {
		voters, connected int
		enabled           bool
		want              int
	}{
		{1, 0, false, 9}, // a sole voter: always, all but one tick
		{1, 0, true, 9},
		{3, 0, true, 0}, // nobody to win an election with
		{3, 1, true, 8}, // a quorum with this member: all but two ticks
		{3, 2, true, 8},
		{3, 2, false, 0},
		{5, 1, true, 0},
		{5, 2, true, 8},
	} {
		if got := initialTickAdvance(10, c.voters, c.connected, c.enabled); got != c.want {
			t.Errorf("voters %d, connected %d, enabled %v: %d ticks, want %d", c.voters, c.connected, c.enabled, got, c.want)
		}
	}
}

// A starting member whose peers are reachable advances its election clock
// (once, by all but two ticks); with the setting off it does not.
func TestStartingMembersAdvanceTheirElectionClock(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		r := testSeed(t)
		var logs logbuf.Buffer
		c := newTestCluster(t, 3, r.Int63(), false, func(cfg *Config) {
			cfg.InitialElectionTickAdvance = enabled
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)).With("m", cfg.Name)
		})
		c.leader()
		if enabled {
			waitFor(t, 5*time.Second, "every member to advance its clock", func() bool {
				return strings.Count(logs.String(), "advanced the election clock at start") == 3
			})
			if !strings.Contains(logs.String(), "ticks=8") {
				t.Fatalf("advanced by other than election ticks - 2:\n%s", logs.String())
			}
			continue
		}
		c.propose(c.leader(), []byte("settled")) // the members have run past their start
		if strings.Contains(logs.String(), "advanced the election clock") {
			t.Fatalf("advanced with the setting off:\n%s", logs.String())
		}
		c.stopAll()
	}
}
