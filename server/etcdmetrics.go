package server

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// etcdMetricNames maps Tenure metrics to the etcd names that mean the same
// thing. Operators' dashboards and alerts for etcd (the etcd mixin's
// etcdNoLeader, etcdHighFsyncDurations, etcdHighNumberOfFailedProposals,
// etcdDatabaseQuotaLowSpace, the grpc_server_* request alerts), and the
// advice everyone repeats ("etcd_disk_wal_fsync_duration_seconds p99 must
// stay under 10 ms"), name etcd's metrics; /metrics serves each of these
// under both names. Only names whose meaning carries over are listed: where
// etcd counts something Tenure does not have (bbolt's commit, its
// defragmentation), no etcd name is invented.
var etcdMetricNames = map[string]string{
	"tenure_server_has_leader":                "etcd_server_has_leader",
	"tenure_server_is_leader":                 "etcd_server_is_leader",
	"tenure_server_leader_changes_seen_total": "etcd_server_leader_changes_seen_total",
	"tenure_server_proposals_failed_total":    "etcd_server_proposals_failed_total",
	"tenure_server_proposals_pending":         "etcd_server_proposals_pending",
	// etcd's two "proposals" totals are the raft commit and applied
	// indexes, exported as gauges; Tenure's carry the same values.
	"tenure_raft_commit_index":               "etcd_server_proposals_committed_total",
	"tenure_raft_applied_index":              "etcd_server_proposals_applied_total",
	"tenure_disk_wal_fsync_duration_seconds": "etcd_disk_wal_fsync_duration_seconds",
	"tenure_storage_db_size_bytes":           "etcd_mvcc_db_total_size_in_bytes",
	"tenure_storage_db_size_in_use_bytes":    "etcd_mvcc_db_total_size_in_use_in_bytes",
	"tenure_storage_quota_backend_bytes":     "etcd_server_quota_backend_bytes",
	"tenure_mvcc_revision":                   "etcd_debugging_mvcc_current_revision",
	"tenure_mvcc_compact_revision":           "etcd_debugging_mvcc_compact_revision",
	"tenure_mvcc_keys":                       "etcd_debugging_mvcc_keys_total",
	"tenure_watch_watchers":                  "etcd_debugging_mvcc_watcher_total",
	"tenure_watch_slow_watchers":             "etcd_debugging_mvcc_slow_watcher_total",
	// etcd exports go-grpc-prometheus's names, unprefixed.
	"tenure_grpc_server_started_total":    "grpc_server_started_total",
	"tenure_grpc_server_handled_total":    "grpc_server_handled_total",
	"tenure_grpc_server_handling_seconds": "grpc_server_handling_seconds",
}

// withEtcdNames gathers g once per scrape and adds, for every family in
// names, a copy under its etcd name. Copying at scrape time keeps the
// request paths updating one metric each.
type withEtcdNames struct {
	g     prometheus.Gatherer
	names map[string]string
}

func (w withEtcdNames) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := w.g.Gather()
	out := mfs
	for _, mf := range mfs {
		alias, ok := w.names[mf.GetName()]
		if !ok {
			continue
		}
		c := proto.Clone(mf).(*dto.MetricFamily)
		c.Name = proto.String(alias)
		c.Help = proto.String(mf.GetHelp() + " (etcd's name for " + mf.GetName() + ")")
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, err
}
