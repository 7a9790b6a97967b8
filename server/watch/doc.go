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
package watch
