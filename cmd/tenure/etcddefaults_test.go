package main

import (
	"strings"
	"testing"
)

// etcdDefaults is every flag etcd 3.7.3's `etcd --help` lists with a default
// value, set to that value (URL and cluster flags, Tenure's own, left out;
// --max-concurrent-streams, whose help shows the Go constant's name rather
// than a value, too).
var etcdDefaults = []string{
	"--wal-dir=",
	"--snapshot-count=10000",
	"--heartbeat-interval=100",
	"--election-timeout=1000",
	"--initial-election-tick-advance=true",
	"--listen-client-http-urls=",
	"--max-snapshots=5",
	"--max-wals=5",
	"--quota-backend-bytes=0",
	"--backend-bbolt-freelist-type=map",
	"--backend-batch-interval=",
	"--backend-batch-limit=0",
	"--max-txn-ops=128",
	"--max-request-bytes=1572864",
	"--grpc-keepalive-min-time=5s",
	"--grpc-keepalive-interval=2h",
	"--grpc-keepalive-timeout=20s",
	"--socket-reuse-port=false",
	"--socket-reuse-address=false",
	"--raft-read-timeout=5s",
	"--raft-write-timeout=5s",
	"--feature-gates=",
	"--discovery=",
	"--discovery-token=",
	"--discovery-endpoints=",
	"--discovery-dial-timeout=2s",
	"--discovery-request-timeout=5s",
	"--discovery-keepalive-time=2s",
	"--discovery-keepalive-timeout=6s",
	"--discovery-insecure-transport=true",
	"--discovery-insecure-skip-tls-verify=false",
	"--discovery-cert=",
	"--discovery-key=",
	"--discovery-cacert=",
	"--discovery-user=",
	"--discovery-password=",
	"--discovery-fallback=exit",
	"--discovery-proxy=",
	"--discovery-srv=",
	"--discovery-srv-name=",
	"--strict-reconfig-check=true",
	"--pre-vote=true",
	"--auto-compaction-retention=0",
	"--auto-compaction-mode=periodic",
	"--v2-deprecation=write-only",
	"--cert-file=",
	"--key-file=",
	"--client-cert-auth=false",
	"--client-cert-file=",
	"--client-key-file=",
	"--client-crl-file=",
	"--client-cert-allowed-hostname=",
	"--trusted-ca-file=",
	"--auto-tls=false",
	"--peer-cert-file=",
	"--peer-key-file=",
	"--peer-client-cert-auth=false",
	"--peer-client-cert-file=",
	"--peer-client-key-file=",
	"--peer-trusted-ca-file=",
	"--peer-cert-allowed-cn=",
	"--peer-cert-allowed-hostname=",
	"--peer-auto-tls=false",
	"--self-signed-cert-validity=1",
	"--peer-crl-file=",
	"--cipher-suites=",
	"--cors=*",
	"--host-whitelist=*",
	"--tls-min-version=TLS1.2",
	"--tls-max-version=",
	"--auth-token=simple",
	"--enable-pprof=false",
	"--metrics=basic",
	"--logger=zap",
	"--log-outputs=default",
	"--log-level=info",
	"--log-format=json",
	"--enable-log-rotation=false",
	"--log-rotation-config-json={\"maxsize\": 100, \"maxage\": 0, \"maxbackups\": 0, \"localtime\": false, \"compress\": false}",
	"--warning-unary-request-duration=300ms",
	"--enable-distributed-tracing=false",
	"--distributed-tracing-address=localhost:4317",
	"--distributed-tracing-service-name=etcd",
	"--distributed-tracing-instance-id=",
	"--distributed-tracing-sampling-rate=0",
	"--corrupt-check-time=0s",
	"--compact-hash-check-time=1m",
	"--peer-skip-client-san-verification=false",
	"--watch-progress-notify-interval=10m",
	"--warning-apply-duration=100ms",
	"--max-learners=1",
	"--force-new-cluster=false",
	"--unsafe-no-fsync=false",
}

// An etcd command line that spells out etcd's defaults starts Tenure: every
// flag is known and every default is accepted, except the one that asks for
// a check Tenure does not make (--peer-skip-client-san-verification=false),
// which is refused with the reason.
func TestEveryEtcdFlagWithItsDefault(t *testing.T) {
	none := func(string) string { return "" }
	for _, arg := range etcdDefaults {
		_, _, err := parseServeConfig([]string{"--name=a", arg}, none)
		if arg == "--peer-skip-client-san-verification=false" {
			if err == nil || !strings.Contains(err.Error(), "never its SAN") {
				t.Errorf("%s: %v, want the refusal with its reason", arg, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", arg, err)
		}
	}
}
