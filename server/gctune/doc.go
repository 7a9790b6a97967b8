// Package gctune keeps the Go garbage collector's heap goal from falling
// below a floor while the live heap is small.
//
// The collector's goal is the live heap times (1 + GOGC/100). A Tenure
// member's live heap is a few MiB while it holds little data (Pebble keeps
// its memtables and block cache outside the Go heap), so even at GOGC=200
// it collects every 10 MiB or so allocated: one to three cycles a second
// per member under a lock hand-off load, each taking a core's worth of
// mark workers for milliseconds from a process whose hand-offs are
// latency-bound. Raising GOGC for a small heap trades a bounded amount of
// memory (the floor) for those cycles; a large heap keeps the base GOGC,
// so memory stays proportional to data where it matters.
//
// Contract:
//   - Start(floor) sets GOGC after every collection to the larger of the
//     base (the GOGC in effect when it starts: `tenure` sets 200) and the
//     value whose goal is floor bytes for the live heap just measured
//     (Percent). Stop restores the base. `tenure serve` does not start it
//     when the environment sets GOGC.
//   - With the base off (GOGC=off) it does nothing; a memory limit
//     (GOMEMLIMIT) still caps the heap as the runtime documents.
//   - Prefault touches the floor's worth of heap once, in the background,
//     and leaves it to the heap as free resident memory, so the first
//     seconds under load do not take a page fault for each new heap page
//     (the heap grows to the floor before its first collection). `tenure
//     serve` calls it whenever the tuner is active. The cost: a member's
//     RSS is about the floor higher from the start instead of after its
//     first seconds of load. It helps only those first seconds: once the
//     process has collected twice, the runtime's scavenger returns free
//     pages above its own goal (derived from the pages in use), with or
//     without a prefault.
//   - One tuner per process: GOGC is process-wide.
package gctune
