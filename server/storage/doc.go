// Package storage owns Tenure's single on-disk store: one Pebble database per
// member holding the raft log, the raft hard state and all state-machine data.
//
// Contract:
//   - Every key starts with one prefix byte from this package, so each owner
//     (raftnode for the log, mvcc for keys and history, lease for leases, …)
//     works in a disjoint key range and a snapshot is simply "every key at or
//     above StateMachineStart".
//   - Raft log and hard state are written with Sync before a message that
//     depends on them leaves the member. State-machine batches may be written
//     without sync: the synced raft log lets a restart re-apply them, and the
//     applied index travels in the same batch as the state it covers
//     (KeyAppliedIndex), so no entry is applied twice or skipped.
//   - Big-endian fixed-width integers are used in keys so that byte order is
//     numeric order.
//   - Pebble's WAL files (*.log) are preallocated with their size extended
//     over the reserved space (walExtendFS), as etcd preallocates its WAL
//     segments, so a synced append does not also persist a new file size;
//     recovery reads the zeros past the last record as the log's end, as it
//     does for Pebble's own preallocation and recycled logs.
//   - The WAL lives in dir/db unless Options.WALDir names another
//     directory (--wal-dir). Pebble refuses to open when the previous WAL
//     directory differs; Open then lists that directory for recovery and
//     reports the move (Options.OnWALMoved), so changing or dropping
//     --wal-dir never loses the log's unflushed tail.
package storage
