// Package procs adapts the Go scheduler's processor count (GOMAXPROCS) to a
// member's load: one processor while the member is lightly loaded, all of
// them as soon as it is busy.
//
// Why: a coordination service spends most of its time waiting — on the
// disk, on peers, on clients — and runs short bursts of work between the
// waits. With several processors (Ps) and most of them idle, the runtime
// wakes an idle thread for nearly every goroutine made ready (a socket
// read, a raft message, a finished fsync), and that thread spins looking
// for more work before it sleeps again: a futex wake, a context switch and
// a spin for work one running thread would have picked up a moment later.
// On the project's reference machine (2 vCPUs of a virtual machine where a
// context switch or a syscall entry is expensive, three members and the
// clients sharing them), one processor per member cut the members' CPU per
// lock hand-off by about a fifth (docs/architecture.md, "Performance
// decisions"). Under load the same member needs all its cores (100-client
// puts and ranges, a watch fan-out to thousands of watchers), so a fixed
// GOMAXPROCS=1 is no default.
//
// Contract:
//   - Start(cfg) samples the process's CPU time (user + system, getrusage)
//     every Tick. At one processor, a tick that used at least RaiseAbove
//     cores raises GOMAXPROCS to Max at once: the one processor is
//     (nearly) saturated. At Max, it lowers to one when the process used
//     less than LowerBelow cores over the last LowerWindow and the last
//     raise is at least LowerWindow old, so a member under steady load
//     does not flap.
//   - Boost raises to Max at once and holds it for a window, for code that
//     knows a burst of parallel work is starting (the watch hub, before it
//     hands a revision to hundreds of watchers): a burst shorter than a
//     tick would otherwise run on one processor from start to end.
//   - It starts at Max (a restarting member rebuilds its index at full
//     speed) and Stop restores Max.
//   - Max <= 1 makes it inactive: it never changes GOMAXPROCS.
//   - One controller per process: GOMAXPROCS is process-wide. `tenure
//     serve` starts it unless --adaptive-procs=false or GOMAXPROCS is set
//     in the environment (the operator's choice then governs alone).
//     Setting GOMAXPROCS turns off the runtime's own updates of it (a
//     changed container CPU limit); Max is read once, at start.
package procs
