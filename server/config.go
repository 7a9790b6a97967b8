package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/tenure-io/tenure/server/compactor"
)

// Config is everything `tenure serve` takes. Field names follow etcd's flags
// (the flag is given in each comment) so an etcd command line carries over.
type Config struct {
	Name                        string        // --name
	DataDir                     string        // --data-dir
	WALDir                      string        // --wal-dir: the write-ahead log (every raft log fsync) on its own disk; default inside DataDir
	ListenClientURLs            []string      // --listen-client-urls
	AdvertiseClientURLs         []string      // --advertise-client-urls
	ListenPeerURLs              []string      // --listen-peer-urls
	InitialAdvertisePeerURLs    []string      // --initial-advertise-peer-urls
	InitialCluster              string        // --initial-cluster: name=url[,name=url...]
	InitialClusterState         string        // --initial-cluster-state: new | existing
	InitialClusterToken         string        // --initial-cluster-token
	HeartbeatInterval           time.Duration // --heartbeat-interval (ms on the command line)
	ElectionTimeout             time.Duration // --election-timeout (ms on the command line)
	SnapshotCount               uint64        // --snapshot-count
	SnapshotCatchUpEntries      uint64        // --snapshot-catchup-entries: raft log entries kept behind a compaction for slow followers
	WarningApplyDuration        time.Duration // --warning-apply-duration: an apply slower than this is logged ("apply request took too long")
	WarningUnaryRequestDuration time.Duration // --warning-unary-request-duration: a unary request slower than this is logged ("request stats")
	QuotaBackendBytes           int64         // --quota-backend-bytes
	MaxRequestBytes             int           // --max-request-bytes
	MaxTxnOps                   int           // --max-txn-ops
	ListenMetricsURLs           []string      // --listen-metrics-urls
	ListenClientHTTPURLs        []string      // --listen-client-http-urls: HTTP services here only, gRPC alone on the client URLs
	LogLevel                    string        // --log-level: debug|info|warn|error
	LogFormat                   string        // --log-format: json|text
	EnablePprof                 bool          // --enable-pprof: /debug/pprof on the client URLs
	// ThriftyReplication (--thrifty-replication), when positive, lets the
	// leader hold its appends to the followers no commit needs for up to
	// this long and send them merged (docs/architecture.md, "Thrifty
	// replication"); 0 turns it off. Default DefaultThriftyReplication.
	ThriftyReplication time.Duration
	// AutoCompactionMode (--auto-compaction-mode: periodic | revision) and
	// AutoCompactionRetention (--auto-compaction-retention: a duration or
	// hours in periodic mode, revisions in revision mode; "0" = off), as
	// etcd's (server/compactor).
	AutoCompactionMode      string
	AutoCompactionRetention string
	// EnableGRPCGateway (--enable-grpc-gateway, default on as in etcd)
	// serves the v3 API as JSON at /v3/ on the client URLs.
	EnableGRPCGateway bool
	// InitialCorruptCheck (--feature-gates=InitialCorruptCheck=true, or
	// etcd 3.5's --experimental-initial-corrupt-check) makes a member that
	// restarts on a data-dir with history compare its HashKV with its peers'
	// before it joins raft or serves, and refuse to start on a mismatch
	// (corruptcheck.go).
	InitialCorruptCheck bool
	// StrictReconfigCheck (--strict-reconfig-check, default true as in
	// etcd) refuses membership changes that could leave the cluster without
	// a quorum of running members (raftnode/strict.go).
	StrictReconfigCheck bool
	// InitialElectionTickAdvance (--initial-election-tick-advance, default
	// true as in etcd) fast-forwards a starting member's election clock once
	// it reaches a quorum of peers (server/raftnode/tickadvance.go).
	InitialElectionTickAdvance bool
	// gRPC keepalive on the client port, etcd's --grpc-keepalive-*: the
	// shortest ping interval a client may use (MinTime), how long a quiet
	// connection waits before the server pings it (Interval), and how long
	// it waits for the answer before closing it (Timeout).
	GRPCKeepAliveMinTime  time.Duration
	GRPCKeepAliveInterval time.Duration
	GRPCKeepAliveTimeout  time.Duration

	// Client TLS (https:// client URLs), etcd's flags.
	ClientTLS TLSInfo // --cert-file, --key-file, --trusted-ca-file, --client-cert-auth
	// Peer TLS (https:// peer URLs), etcd's flags.
	PeerTLS TLSInfo // --peer-cert-file, --peer-key-file, --peer-trusted-ca-file, --peer-client-cert-auth

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

// TLSInfo names the files of one TLS endpoint (client or peer side).
type TLSInfo struct {
	CertFile      string // this member's certificate (PEM)
	KeyFile       string // its private key (PEM)
	TrustedCAFile string // CA bundle that client (or peer) certificates must chain to
	// ClientCertAuth requires every connecting client (or peer) to present a
	// certificate signed by TrustedCAFile; others are refused in the handshake.
	ClientCertAuth bool
	// ClientCertFile and ClientKeyFile, when set, are what this member
	// presents when it is the one dialing (etcd's --client-cert-file and
	// --peer-client-cert-file): for certificates issued for server use only
	// (without the clientAuth usage). Empty: CertFile and KeyFile.
	ClientCertFile string
	ClientKeyFile  string
	// SkipClientSANVerify (peers only: --peer-skip-client-san-verification)
	// turns off etcd's check that a dialing peer's certificate names the
	// address it connects from (peersan.go).
	SkipClientSANVerify bool
}

// Empty reports whether no TLS file is configured.
func (t TLSInfo) Empty() bool { return t.CertFile == "" && t.KeyFile == "" && t.TrustedCAFile == "" }

// Defaults, as etcd has them unless noted.
const (
	DefaultName                = "default"
	DefaultListenClientURL     = "http://127.0.0.1:2379"
	DefaultListenPeerURL       = "http://127.0.0.1:2380"
	DefaultClusterToken        = "tenure-cluster"
	DefaultHeartbeatInterval   = 100 * time.Millisecond
	DefaultElectionTimeout     = 1000 * time.Millisecond
	DefaultSnapshotCount       = 10000
	DefaultSnapshotCatchUp     = 5000
	DefaultWarningApply        = 100 * time.Millisecond
	DefaultWarningUnary        = 300 * time.Millisecond
	DefaultQuotaBackendBytes   = 2 << 30
	DefaultMaxRequestBytes     = 3 << 19 // 1.5 MiB
	DefaultMaxTxnOps           = 128
	DefaultRequestTimeout      = 5 * time.Second
	DefaultThriftyReplication  = 5 * time.Millisecond
	DefaultLeaseCheckpoint     = 1 * time.Second
	DefaultLeaseExpiryRate     = 1000 // revocations per second (Tenure's own)
	DefaultWatchProgressNotify = 10 * time.Minute
	DefaultGRPCKeepAliveMin    = 5 * time.Second
	DefaultGRPCKeepAlive       = 2 * time.Hour
	DefaultGRPCKeepAliveWait   = 20 * time.Second
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
		SnapshotCatchUpEntries:      DefaultSnapshotCatchUp,
		WarningApplyDuration:        DefaultWarningApply,
		WarningUnaryRequestDuration: DefaultWarningUnary,
		QuotaBackendBytes:           DefaultQuotaBackendBytes,
		MaxRequestBytes:             DefaultMaxRequestBytes,
		MaxTxnOps:                   DefaultMaxTxnOps,
		LogLevel:                    "info",
		LogFormat:                   "json",
		RequestTimeout:              DefaultRequestTimeout,
		LeaseCheckpointInterval:     DefaultLeaseCheckpoint,
		LeaseExpiryRate:             DefaultLeaseExpiryRate,
		WatchProgressNotifyInterval: DefaultWatchProgressNotify,
		ThriftyReplication:          DefaultThriftyReplication,
		AutoCompactionMode:          compactor.ModePeriodic,
		AutoCompactionRetention:     "0",
		EnableGRPCGateway:           true,
		StrictReconfigCheck:         true,
		InitialElectionTickAdvance:  true,
		GRPCKeepAliveMinTime:        DefaultGRPCKeepAliveMin,
		GRPCKeepAliveInterval:       DefaultGRPCKeepAlive,
		GRPCKeepAliveTimeout:        DefaultGRPCKeepAliveWait,
	}
}

// ServerConfig builds the TLS configuration a listener serves with: the
// member's certificate, and with ClientCertAuth the CA pool client
// certificates must chain to. ALPN offers h2 (gRPC requires it) and http/1.1.
func (t TLSInfo) ServerConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if t.TrustedCAFile != "" {
		pool, err := loadCAPool(t.TrustedCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	if t.ClientCertAuth {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientConfig builds the TLS configuration for dialing (peers dial each
// other with the peer certificate, verified against TrustedCAFile).
func (t TLSInfo) ClientConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	certFile, keyFile := t.CertFile, t.KeyFile
	if t.ClientCertFile != "" {
		certFile, keyFile = t.ClientCertFile, t.ClientKeyFile
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.TrustedCAFile != "" {
		pool, err := loadCAPool(t.TrustedCAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func loadCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", file)
	}
	return pool, nil
}
