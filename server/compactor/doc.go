// Package compactor runs etcd's automatic compaction
// (--auto-compaction-mode, --auto-compaction-retention) on the leader.
//
// Contract:
//   - Modes as etcd's: "periodic" keeps about Retention of history: the
//     revision is sampled every min(Retention, 1h)/10, and every
//     min(Retention, 1h) the store is compacted to the newest sample taken
//     at least Retention ago. "revision" compacts to (current revision −
//     Revisions) every 5 minutes. A zero retention turns it off (Parse
//     returns a nil *Config).
//   - Only the leader compacts: a follower drops its samples, so a new
//     leader keeps at least Retention of history from when it took over.
//   - A compaction that fails is logged and tried again at the next step
//     ("compacted" — someone compacted further already — is not an error).
//   - Log lines: "starting auto periodic compaction" / "completed auto
//     periodic compaction", and the same with "revision" (etcd's).
//
// The policy is step(now), driven by a ticker in Run; tests call step with
// the times they choose.
package compactor
