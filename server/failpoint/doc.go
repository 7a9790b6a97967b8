// Package failpoint provides named crash points at every durability step, for
// tests that must crash a member at an exact place and restart it.
//
// Failpoints are off unless the process was started with the environment
// variable TENURE_FAILPOINTS, a comma-separated list of name=action pairs.
// Actions: "exit" (os.Exit(86) immediately, as close to a kill -9 as Go gets:
// no deferred functions run, no buffers flushed), "panic", or "sleep:<dur>".
// An action may be prefixed with a count "N*" to fire only on the N-th hit,
// e.g. TENURE_FAILPOINTS=raft-after-save=3*exit.
//
// When disabled, Hit costs one atomic load.
package failpoint
