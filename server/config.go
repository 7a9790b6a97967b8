package server

import (
	"log/slog"
	"time"
)

// Config is everything `tenure serve` takes. Field names follow etcd's flags
// (the flag is given in each comment) so an etcd command line carries over.
type Config struct {
	Name                     string        // --name
	DataDir                  string        // --data-dir
	ListenClientURLs         []string      // --listen-client-urls
	AdvertiseClientURLs      []string      // --advertise-client-urls
	ListenPeerURLs           []string      // --listen-peer-urls
	InitialAdvertisePeerURLs []string      // --initial-advertise-peer-urls
	InitialCluster           string        // --initial-cluster: name=url[,name=url...]
	InitialClusterState      string        // --initial-cluster-state: new | existing
	InitialClusterToken      string        // --initial-cluster-token
	HeartbeatInterval        time.Duration // --heartbeat-interval (ms on the command line)
	ElectionTimeout          time.Duration // --election-timeout (ms on the command line)
	SnapshotCount            uint64        // --snapshot-count
	QuotaBackendBytes        int64         // --quota-backend-bytes
	MaxRequestBytes          int           // --max-request-bytes
	MaxTxnOps                int           // --max-txn-ops
	ListenMetricsURLs        []string      // --listen-metrics-urls
	LogLevel                 string        // --log-level: debug|info|warn|error
	LogFormat                string        // --log-format: json|text
	EnablePprof              bool          // --enable-pprof: /debug/pprof on the client URLs

	// RequestTimeout bounds how long a client request waits for raft
	// (proposal commit or read barrier) before failing with "request timed out".
	RequestTimeout time.Duration
	// LeaseCheckpointInterval is how often the leader records remaining lease
	// TTLs through raft, so a new leader neither resets nor shortens them.
	LeaseCheckpointInterval time.Duration // --lease-checkpoint-interval
	// LeaseExpiryRate caps lease revocations per second (--lease-expiry-rate),
	// so thousands of leases expiring together do not stall the cluster.
	LeaseExpiryRate int
	// WatchProgressNotifyInterval is the period of progress notifications for
	// watches that asked for them.
	WatchProgressNotifyInterval time.Duration

	// Logger, when set, is used instead of one built from LogLevel/LogFormat.
	Logger *slog.Logger
}

// Defaults, as etcd has them unless noted.
const (
	DefaultName                = "default"
	DefaultListenClientURL     = "http://127.0.0.1:2379"
	DefaultListenPeerURL       = "http://127.0.0.1:2380"
	DefaultClusterToken        = "tenure-cluster"
	DefaultHeartbeatInterval   = 100 * time.Millisecond
	DefaultElectionTimeout     = 1000 * time.Millisecond
	DefaultSnapshotCount       = 10000
	DefaultQuotaBackendBytes   = 2 << 30
	DefaultMaxRequestBytes     = 3 << 19 // 1.5 MiB
	DefaultMaxTxnOps           = 128
	DefaultRequestTimeout      = 5 * time.Second
	DefaultLeaseCheckpoint     = 1 * time.Second
	DefaultLeaseExpiryRate     = 1000 // revocations per second (Tenure's own)
	DefaultWatchProgressNotify = 10 * time.Minute
)

// DefaultConfig returns a single-member configuration: client URL
// http://127.0.0.1:2379, peer URL http://127.0.0.1:2380, data in ./default.tenure.
func DefaultConfig() Config {
	return Config{
		Name:                        DefaultName,
		DataDir:                     "",
		ListenClientURLs:            []string{DefaultListenClientURL},
		AdvertiseClientURLs:         []string{DefaultListenClientURL},
		ListenPeerURLs:              []string{DefaultListenPeerURL},
		InitialAdvertisePeerURLs:    []string{DefaultListenPeerURL},
		InitialCluster:              "",
		InitialClusterState:         "new",
		InitialClusterToken:         DefaultClusterToken,
		HeartbeatInterval:           DefaultHeartbeatInterval,
		ElectionTimeout:             DefaultElectionTimeout,
		SnapshotCount:               DefaultSnapshotCount,
		QuotaBackendBytes:           DefaultQuotaBackendBytes,
		MaxRequestBytes:             DefaultMaxRequestBytes,
		MaxTxnOps:                   DefaultMaxTxnOps,
		LogLevel:                    "info",
		LogFormat:                   "json",
		RequestTimeout:              DefaultRequestTimeout,
		LeaseCheckpointInterval:     DefaultLeaseCheckpoint,
		LeaseExpiryRate:             DefaultLeaseExpiryRate,
		WatchProgressNotifyInterval: DefaultWatchProgressNotify,
	}
}
