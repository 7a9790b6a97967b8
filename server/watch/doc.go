// Package watch is the watch hub and the etcd v3 Watch service.
//
// The apply loop calls Hub.Notify with each published revision's events; the
// hub never blocks it. Each watcher is either synced (receives events as they
// are published) or unsynced (behind: it catches up from mvcc history in
// bounded chunks, then becomes synced). A slow watcher whose buffer fills is
// moved to unsynced instead of blocking anybody, so writes and other watchers
// never wait on it. Events are delivered in revision order, exactly once, and
// all events of one revision in one response (fragmented only when the
// client asked for fragmentation). A watcher whose next revision has been
// compacted is canceled with compact_revision set.
//
// Details of the contract:
//
//   - Source is the history (the mvcc store satisfies it, without this
//     package importing mvcc). History must serve any fromRev >= CompactRev():
//     as in etcd, a watch whose start (or catch-up point) r has r <
//     CompactRev() is compacted, r == CompactRev() is not. Any History error
//     cancels that watcher (with compact_revision if it was compacted).
//   - Notify must be called once per published revision, in order, after the
//     revision is readable through Source. A skipped revision is tolerated:
//     every synced watcher then catches up from History (logged as a warning).
//     The hub never mutates the events it is given; PrevKv is stripped by
//     copying for watchers that did not ask for prev_kv.
//   - Buffering is per stream (one gRPC Watch call): HubConfig.ChanSize event
//     slots, a slot being one catch-up response or all of one revision's
//     live responses on the stream (so a stream with many watchers of a key
//     queues one slot per revision, and at most ChanSize responses per
//     watcher). Notify and the catch-up loop only ever try to enqueue;
//     control responses (created, canceled, progress) are always queued, and
//     the stream stops reading requests while ChanSize of them are pending.
//   - Catch-up runs in one background goroutine per hub, CatchUpBatch events
//     per History call per watcher; a watcher is retried when its stream
//     drains below half, or every SyncRetryInterval.
//   - The header revision of every non-created response is a revision through
//     which that watcher has received all its events (clientv3 resumes from
//     it + 1): the notified revision for live events, the end of the chunk
//     for catch-up responses, the current revision for progress responses,
//     which are only sent to synced watchers. A WatchProgressRequest is
//     answered (watch_id -1) once every watcher of the stream is synced.
//   - Wire behaviour follows etcd v3.7: watch ids are per stream (0 or -1 =
//     auto); a duplicate id, an empty range or a negative start revision get a
//     created+canceled response with watch_id -1 and etcd's cancel_reason; a
//     cancel of an unknown id gets no answer; streams with gRPC metadata
//     hasleader=true are refused or ended with ErrGRPCNoLeader when
//     HubConfig.HasLeader reports no leader; Hub.Close ends streams with
//     ErrGRPCStopped.
//   - Ending a stream (client cancel, error, Close) frees its watchers and
//     goroutines.
package watch
