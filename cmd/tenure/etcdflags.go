package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// etcdOnlyFlag is an etcd server flag for which Tenure has no setting of its
// own. An etcd command line or environment that carries one must still start
// Tenure when what it asks for is what Tenure does anyway (--pre-vote=true,
// --enable-v2=false), and must stop it, saying why, when it asks for
// something Tenure does not do (--unsafe-no-fsync=true, --auto-tls=true):
// "unknown flag" says neither.
type etcdOnlyFlag struct {
	name string
	// accepts lists the values that describe Tenure's behaviour (compared
	// case-insensitively; "" is the flag given empty). nil: the flag tunes
	// something Tenure does not have, so any value is accepted and a
	// warning says it has no effect.
	accepts []string
	isBool  bool
	why     string
}

var etcdOnlyFlags = []etcdOnlyFlag{
	{name: "logger", accepts: []string{"zap"}, why: "Tenure logs with Go's log/slog (--log-format json or text)"},
	{name: "log-outputs", accepts: []string{"default", "stderr"}, why: "Tenure logs to stderr; redirect it to write a file"},
	{name: "enable-log-rotation", accepts: []string{"false"}, isBool: true, why: "Tenure logs to stderr and rotates nothing"},
	{name: "pre-vote", accepts: []string{"true"}, isBool: true, why: "raft pre-vote is always on in Tenure"},
	{name: "enable-v2", accepts: []string{"false"}, isBool: true, why: "Tenure serves the v3 API only (etcd 3.6 removed v2 too)"},
	{name: "v2-deprecation", why: "Tenure has no v2 store"},
	{name: "auto-tls", accepts: []string{"false"}, isBool: true, why: "Tenure does not generate certificates; give --cert-file and --key-file"},
	{name: "peer-auto-tls", accepts: []string{"false"}, isBool: true, why: "Tenure does not generate certificates; give --peer-cert-file and --peer-key-file"},
	{name: "self-signed-cert-validity", why: "Tenure generates no self-signed certificates"},
	{name: "force-new-cluster", accepts: []string{"false"}, isBool: true, why: "Tenure cannot force a new cluster from one member's data; restore a snapshot with `tenure snapshot restore` instead"},
	{name: "unsafe-no-fsync", accepts: []string{"false"}, isBool: true, why: "Tenure always syncs its log: a member that acknowledges writes it could lose breaks every promise a lease or lock makes"},
	{name: "socket-reuse-address", accepts: []string{"false"}, isBool: true, why: "Tenure does not set SO_REUSEADDR"},
	{name: "socket-reuse-port", accepts: []string{"false"}, isBool: true, why: "Tenure does not set SO_REUSEPORT"},
	{name: "experimental-enable-lease-checkpoint", accepts: []string{"true"}, isBool: true, why: "Tenure always checkpoints leases (--lease-checkpoint-interval)"},
	{name: "experimental-enable-lease-checkpoint-persist", accepts: []string{"true"}, isBool: true, why: "Tenure's lease checkpoints are always replicated and persisted"},
	{name: "metrics", accepts: []string{"basic", "extensive"}, why: "Tenure always serves its full metric set, gRPC latency histograms included"},
	{name: "discovery", accepts: []string{""}, why: "Tenure has no discovery service; list the members with --initial-cluster"},
	{name: "discovery-srv", accepts: []string{""}, why: "Tenure has no DNS discovery; list the members with --initial-cluster"},
	{name: "discovery-srv-name", accepts: []string{""}, why: "Tenure has no DNS discovery; list the members with --initial-cluster"},
	{name: "discovery-proxy", accepts: []string{""}, why: "Tenure has no discovery service"},
	{name: "client-crl-file", accepts: []string{""}, why: "Tenure does not check certificate revocation lists; revoke by rotating --trusted-ca-file"},
	{name: "peer-crl-file", accepts: []string{""}, why: "Tenure does not check certificate revocation lists; revoke by rotating --peer-trusted-ca-file"},
	{name: "peer-cert-allowed-cn", accepts: []string{""}, why: "Tenure does not restrict peer certificates by common name; use a CA of its own for peers"},
	{name: "peer-cert-allowed-hostname", accepts: []string{""}, why: "Tenure does not restrict peer certificates by host name; use a CA of its own for peers"},
	{name: "cipher-suites", accepts: []string{""}, why: "Tenure uses Go's default TLS cipher suites"},
	{name: "tls-min-version", accepts: []string{"", "TLS1.2"}, why: "Tenure's TLS minimum is TLS1.2"},
	{name: "tls-max-version", accepts: []string{"", "TLS1.3"}, why: "Tenure's TLS maximum is TLS1.3"},
	{name: "max-learners", accepts: []string{"1"}, why: "Tenure allows one learner at a time, etcd's default"},
	{name: "experimental-max-learners", accepts: []string{"1"}, why: "Tenure allows one learner at a time, etcd's default"},
	// An address alone traces nothing (etcd's default is localhost:4317);
	// asking for traces is refused above.
	{name: "distributed-tracing-address", why: "Tenure exports no traces"},
	{name: "experimental-distributed-tracing-address", why: "Tenure exports no traces"},
	{name: "enable-distributed-tracing", accepts: []string{"false"}, isBool: true, why: "Tenure exports no traces"},
	{name: "experimental-enable-distributed-tracing", accepts: []string{"false"}, isBool: true, why: "Tenure exports no traces"},
	// Tuning of files and engines Tenure does not have: its raft log and
	// state live in one Pebble store (no WAL or snapshot files to keep, no
	// bbolt backend to batch).
	{name: "max-snapshots", why: "Tenure keeps no snapshot files (one Pebble store holds the raft log and the state)"},
	{name: "max-wals", why: "Tenure keeps no WAL files of its own (one Pebble store holds the raft log and the state)"},
	{name: "backend-batch-interval", why: "Tenure has no bbolt backend: each apply batch commits at once"},
	{name: "backend-batch-limit", why: "Tenure has no bbolt backend: each apply batch commits at once"},
	{name: "backend-bbolt-freelist-type", why: "Tenure has no bbolt backend"},
	{name: "max-concurrent-streams", accepts: []string{"4294967295"}, why: "Tenure does not limit the streams of one client connection"},
	{name: "corrupt-check-time", accepts: []string{"0", "0s"}, why: "Tenure does not run etcd's periodic corruption check; compare members with `etcdctl endpoint hashkv --cluster`, or restart with --feature-gates=InitialCorruptCheck=true"},
	{name: "experimental-corrupt-check-time", accepts: []string{"0", "0s"}, why: "Tenure does not run etcd's periodic corruption check; compare members with `etcdctl endpoint hashkv --cluster`, or restart with --feature-gates=InitialCorruptCheck=true"},
	{name: "experimental-compact-hash-check-enabled", accepts: []string{"false"}, isBool: true, why: "Tenure does not run etcd's compaction hash check; compare members with `etcdctl endpoint hashkv --cluster`"},
	{name: "compact-hash-check-time", why: "Tenure does not run etcd's compaction hash check; compare members with `etcdctl endpoint hashkv --cluster`"},
	{name: "compaction-batch-limit", why: "Tenure's history compaction runs in the background in Pebble range deletions, not in batches of bbolt transactions"},
	{name: "compaction-sleep-interval", why: "Tenure's history compaction runs in the background in Pebble range deletions, not in batches of bbolt transactions"},
	{name: "bootstrap-defrag-threshold-megabytes", why: "Tenure's store reclaims space by its own background compactions; there is nothing to defragment"},
	{name: "downgrade-check-time", why: "Tenure has no downgrade process (etcdctl downgrade is refused with the reason)"},
	{name: "raft-read-timeout", why: "Tenure's raft streams detect a dead peer through the election timeout's heartbeats"},
	{name: "raft-write-timeout", why: "Tenure's raft streams detect a dead peer through the election timeout's heartbeats"},
	{name: "log-rotation-config-json", why: "Tenure logs to stderr and rotates nothing"},
	{name: "memory-mlock", accepts: []string{"false"}, isBool: true, why: "Tenure does not lock its memory"},
	// Authentication: Tenure's is off for good (AuthStatus says so, user and
	// role calls are refused); clients are told apart by their certificates.
	{name: "auth-token", why: "Tenure has no user authentication (clients authenticate with certificates: --client-cert-auth)"},
	{name: "auth-token-ttl", why: "Tenure has no user authentication (clients authenticate with certificates: --client-cert-auth)"},
	{name: "bcrypt-cost", why: "Tenure has no user authentication (clients authenticate with certificates: --client-cert-auth)"},
	{name: "client-cert-allowed-hostname", accepts: []string{""}, why: "Tenure does not restrict client certificates by host name; use a CA of its own for clients"},
	// The HTTP gateway: etcd's defaults are what Tenure does.
	{name: "cors", accepts: []string{"", "*"}, why: "Tenure's HTTP endpoints send no CORS headers of their own; put a proxy in front of them for browsers"},
	{name: "host-whitelist", accepts: []string{"", "*"}, why: "Tenure's HTTP endpoints accept any Host header; put a proxy in front of them to restrict it"},
	// Discovery (etcd's v3 discovery): none without its endpoints.
	{name: "discovery-endpoints", accepts: []string{""}, why: "Tenure has no discovery service; list the members with --initial-cluster"},
	{name: "discovery-token", accepts: []string{""}, why: "Tenure has no discovery service; list the members with --initial-cluster"},
	{name: "discovery-fallback", why: "Tenure has no discovery service"},
	{name: "discovery-dial-timeout", why: "Tenure has no discovery service"},
	{name: "discovery-request-timeout", why: "Tenure has no discovery service"},
	{name: "discovery-keepalive-time", why: "Tenure has no discovery service"},
	{name: "discovery-keepalive-timeout", why: "Tenure has no discovery service"},
	{name: "discovery-insecure-transport", why: "Tenure has no discovery service"},
	{name: "discovery-insecure-skip-tls-verify", why: "Tenure has no discovery service"},
	{name: "discovery-cert", why: "Tenure has no discovery service"},
	{name: "discovery-key", why: "Tenure has no discovery service"},
	{name: "discovery-cacert", why: "Tenure has no discovery service"},
	{name: "discovery-user", why: "Tenure has no discovery service"},
	{name: "discovery-password", why: "Tenure has no discovery service"},
	{name: "distributed-tracing-instance-id", why: "Tenure exports no traces"},
	{name: "distributed-tracing-sampling-rate", why: "Tenure exports no traces"},
	{name: "distributed-tracing-service-name", why: "Tenure exports no traces"},
}

// etcdOnlyValue checks one etcd-only flag's value as it is set.
type etcdOnlyValue struct {
	f     *etcdOnlyFlag
	value string
}

func (v *etcdOnlyValue) String() string { return v.value }

func (v *etcdOnlyValue) Set(s string) error {
	if v.f.accepts != nil {
		ok := false
		for _, a := range v.f.accepts {
			if strings.EqualFold(strings.TrimSpace(s), a) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("%q is not supported: %s", s, v.f.why)
		}
	}
	v.value = s
	return nil
}

func (v *etcdOnlyValue) Type() string {
	if v.f.isBool {
		return "bool"
	}
	return "string"
}

// bindEtcdOnlyFlags defines the etcd-only flags, hidden from --help (they
// are listed in docs/operations.md).
func bindEtcdOnlyFlags(fs *pflag.FlagSet) {
	for i := range etcdOnlyFlags {
		f := &etcdOnlyFlags[i]
		fs.Var(&etcdOnlyValue{f: f}, f.name, f.why)
		if f.isBool {
			fs.Lookup(f.name).NoOptDefVal = "true"
		}
		_ = fs.MarkHidden(f.name)
	}
}

// etcdOnlyWarnings names the etcd-only flags that were set and have no
// effect in Tenure.
func etcdOnlyWarnings(fs *pflag.FlagSet) []string {
	var ws []string
	for _, f := range etcdOnlyFlags {
		if fl := fs.Lookup(f.name); fl != nil && fl.Changed && f.accepts == nil {
			ws = append(ws, fmt.Sprintf("--%s has no effect: %s", f.name, f.why))
		}
	}
	return ws
}
