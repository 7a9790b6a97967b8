package main

import (
	"strings"
	"testing"
	"time"
)

// etcd's flags for automatic compaction, watch progress and the gateway
// carry over, as an etcd command line (kubeadm's manifests among them)
// writes them.
func TestParseServeEtcdFlags(t *testing.T) {
	base := []string{"--name=a", "--initial-advertise-peer-urls=http://10.0.0.1:2380"}
	none := func(string) string { return "" }

	c, _, err := parseServeConfig(base, none)
	if err != nil || c.AutoCompactionRetention != "0" || c.AutoCompactionMode != "periodic" || !c.EnableGRPCGateway || c.WatchProgressNotifyInterval != 10*time.Minute {
		t.Fatalf("defaults: %q %q gateway %v progress %v, err %v", c.AutoCompactionMode, c.AutoCompactionRetention, c.EnableGRPCGateway, c.WatchProgressNotifyInterval, err)
	}
	c, _, err = parseServeConfig(append(base, "--auto-compaction-mode=revision", "--auto-compaction-retention=1000",
		"--enable-grpc-gateway=false", "--experimental-watch-progress-notify-interval=5s"), none)
	if err != nil || c.AutoCompactionMode != "revision" || c.AutoCompactionRetention != "1000" || c.EnableGRPCGateway || c.WatchProgressNotifyInterval != 5*time.Second {
		t.Fatalf("flags: %q %q gateway %v progress %v, err %v", c.AutoCompactionMode, c.AutoCompactionRetention, c.EnableGRPCGateway, c.WatchProgressNotifyInterval, err)
	}
	c, _, err = parseServeConfig(append(base, "--watch-progress-notify-interval=2s"), none)
	if err != nil || c.WatchProgressNotifyInterval != 2*time.Second {
		t.Fatalf("--watch-progress-notify-interval: %v, err %v", c.WatchProgressNotifyInterval, err)
	}
	if _, _, err := parseServeConfig(append(base, "--auto-compaction-retention=1x"), none); err == nil || !strings.Contains(err.Error(), "--auto-compaction-retention") {
		t.Fatalf("bad retention: %v", err)
	}
	if _, _, err := parseServeConfig(append(base, "--watch-progress-notify-interval=-1s"), none); err == nil || !strings.Contains(err.Error(), "--watch-progress-notify-interval") {
		t.Fatalf("negative progress interval: %v", err)
	}
}

// The initial corruption check is asked for as etcd 3.6+ does
// (--feature-gates) or as etcd 3.5 and kubeadm's manifests do
// (--experimental-initial-corrupt-check); a gate Tenure does not have is
// refused by name instead of ignored.
func TestParseServeInitialCorruptCheckFlags(t *testing.T) {
	base := []string{"--name", "m1"}
	none := func(string) string { return "" }
	c, _, err := parseServeConfig(base, none)
	if err != nil || c.InitialCorruptCheck {
		t.Fatalf("default: %v, err %v", c.InitialCorruptCheck, err)
	}
	for _, args := range [][]string{
		{"--feature-gates=InitialCorruptCheck=true"},
		{"--feature-gates", "InitialCorruptCheck=true"},
		{"--experimental-initial-corrupt-check=true"},
		{"--experimental-initial-corrupt-check"},
	} {
		c, _, err := parseServeConfig(append(base, args...), none)
		if err != nil || !c.InitialCorruptCheck {
			t.Fatalf("%v: check %v, err %v", args, c.InitialCorruptCheck, err)
		}
	}
	c, _, err = parseServeConfig(append(base, "--feature-gates=InitialCorruptCheck=false"), none)
	if err != nil || c.InitialCorruptCheck {
		t.Fatalf("InitialCorruptCheck=false: %v, err %v", c.InitialCorruptCheck, err)
	}
	c, _, err = parseServeConfig(base, func(k string) string {
		if k == "TENURE_FEATURE_GATES" {
			return "InitialCorruptCheck=true"
		}
		return ""
	})
	if err != nil || !c.InitialCorruptCheck {
		t.Fatalf("TENURE_FEATURE_GATES: %v, err %v", c.InitialCorruptCheck, err)
	}
	for arg, want := range map[string]string{
		"--feature-gates=StopGRPCServiceOnDefrag=true": "unrecognized feature gate: StopGRPCServiceOnDefrag",
		"--feature-gates=InitialCorruptCheck":          "missing bool value",
		"--feature-gates=InitialCorruptCheck=maybe":    "invalid value",
	} {
		if _, _, err := parseServeConfig(append(base, arg), none); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: err %v, want it to say %q", arg, err, want)
		}
	}
}

// An etcd container's environment configures tenure serve as it does etcd:
// ETCD_<FLAG> sets a flag neither the command line nor TENURE_<FLAG> sets,
// and says so when it is shadowed; a malformed value names its variable.
func TestParseServeEtcdEnvironment(t *testing.T) {
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	c, ws, err := parseServeConfig(nil, env(map[string]string{
		"ETCD_NAME":                               "infra0",
		"ETCD_INITIAL_ADVERTISE_PEER_URLS":        "http://10.0.0.1:2380",
		"ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK": "true",
		"ETCD_HEARTBEAT_INTERVAL":                 "200",
	}))
	if err != nil || c.Name != "infra0" || c.InitialCluster != "infra0=http://10.0.0.1:2380" || !c.InitialCorruptCheck ||
		c.HeartbeatInterval != 200*time.Millisecond || len(ws) != 0 {
		t.Fatalf("from ETCD_: name %q cluster %q check %v heartbeat %v warnings %q err %v",
			c.Name, c.InitialCluster, c.InitialCorruptCheck, c.HeartbeatInterval, ws, err)
	}
	c, ws, err = parseServeConfig([]string{"--name=cli"}, env(map[string]string{"ETCD_NAME": "e", "TENURE_DATA_DIR": "/t", "ETCD_DATA_DIR": "/e"}))
	if err != nil || c.Name != "cli" || c.DataDir != "/t" || len(ws) != 2 ||
		!strings.Contains(strings.Join(ws, "\n"), "ETCD_NAME is ignored: --name was given on the command line") ||
		!strings.Contains(strings.Join(ws, "\n"), "ETCD_DATA_DIR is ignored: TENURE_DATA_DIR is set") {
		t.Fatalf("shadowed: name %q data-dir %q warnings %q err %v", c.Name, c.DataDir, ws, err)
	}
	if _, _, err := parseServeConfig(nil, env(map[string]string{"ETCD_SNAPSHOT_COUNT": "lots"})); err == nil || !strings.Contains(err.Error(), "ETCD_SNAPSHOT_COUNT") {
		t.Fatalf("malformed ETCD_SNAPSHOT_COUNT: %v", err)
	}
}

// etcd flags Tenure has no setting for: accepted when they ask for what
// Tenure does anyway (etcd's own docker example passes --logger=zap
// --log-outputs=stderr), accepted with a "has no effect" warning when they
// tune something Tenure does not have, and refused with the reason when
// they ask for something Tenure does not do — never "unknown flag".
func TestParseServeEtcdOnlyFlags(t *testing.T) {
	base := []string{"--name=a"}
	none := func(string) string { return "" }
	_, ws, err := parseServeConfig(append(base, "--logger=zap", "--log-outputs=stderr", "--pre-vote=true", "--enable-v2=false",
		"--auto-tls=false", "--unsafe-no-fsync=false", "--metrics=extensive", "--tls-min-version=TLS1.2", "--max-wals=5",
		"--experimental-enable-lease-checkpoint", "--corrupt-check-time=0s", "--max-learners=1"), none)
	if err != nil {
		t.Fatalf("etcd flags that describe Tenure: %v", err)
	}
	if len(ws) != 1 || !strings.Contains(ws[0], "--max-wals has no effect") {
		t.Fatalf("warnings = %q, want one saying --max-wals has no effect", ws)
	}
	for arg, why := range map[string]string{
		"--unsafe-no-fsync=true":               "always syncs",
		"--auto-tls":                           "does not generate certificates",
		"--log-outputs=/var/log/etcd.log":      "logs to stderr",
		"--pre-vote=false":                     "pre-vote is always on",
		"--discovery-srv=example.com":          "no DNS discovery",
		"--max-learners=3":                     "one learner at a time",
		"--tls-min-version=TLS1.3":             "minimum is TLS1.2",
		"--experimental-corrupt-check-time=5m": "periodic corruption check",
	} {
		_, _, err := parseServeConfig(append(base, arg), none)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: err = %v, want the reason (%q)", arg, err, why)
		}
	}
	if _, _, err := parseServeConfig(base, func(k string) string {
		if k == "ETCD_UNSAFE_NO_FSYNC" {
			return "true"
		}
		return ""
	}); err == nil || !strings.Contains(err.Error(), "ETCD_UNSAFE_NO_FSYNC") {
		t.Errorf("ETCD_UNSAFE_NO_FSYNC=true: err = %v, want it refused by name", err)
	}

	if c, _, err := parseServeConfig(base, none); err != nil || !c.StrictReconfigCheck {
		t.Fatalf("--strict-reconfig-check default: %v, err %v (etcd's default is true)", c.StrictReconfigCheck, err)
	}
	if c, _, err := parseServeConfig(append(base, "--strict-reconfig-check=false"), none); err != nil || c.StrictReconfigCheck {
		t.Fatalf("--strict-reconfig-check=false: %v, err %v", c.StrictReconfigCheck, err)
	}

	c, _, err := parseServeConfig(append(base, "--grpc-keepalive-min-time=10s", "--grpc-keepalive-interval=1m", "--grpc-keepalive-timeout=3s"), none)
	if err != nil || c.GRPCKeepAliveMinTime != 10*time.Second || c.GRPCKeepAliveInterval != time.Minute || c.GRPCKeepAliveTimeout != 3*time.Second {
		t.Fatalf("keepalive flags: %v %v %v, err %v", c.GRPCKeepAliveMinTime, c.GRPCKeepAliveInterval, c.GRPCKeepAliveTimeout, err)
	}
	c, _, err = parseServeConfig(base, none)
	if err != nil || c.GRPCKeepAliveMinTime != 5*time.Second || c.GRPCKeepAliveInterval != 2*time.Hour || c.GRPCKeepAliveTimeout != 20*time.Second {
		t.Fatalf("keepalive defaults (etcd's): %v %v %v, err %v", c.GRPCKeepAliveMinTime, c.GRPCKeepAliveInterval, c.GRPCKeepAliveTimeout, err)
	}
	if _, _, err := parseServeConfig(append(base, "--grpc-keepalive-timeout=-1s"), none); err == nil || !strings.Contains(err.Error(), "--grpc-keepalive-timeout") {
		t.Fatalf("negative keepalive timeout: %v", err)
	}
}

// etcd's --snapshot-catchup-entries (and its experimental- spelling),
// --initial-election-tick-advance, --listen-client-http-urls and the slow
// apply and request warning thresholds set
// Tenure's settings of the same meaning.
func TestParseServeRaftAndHTTPFlags(t *testing.T) {
	base := []string{"--name=a"}
	none := func(string) string { return "" }
	c, _, err := parseServeConfig(base, none)
	if err != nil || c.SnapshotCatchUpEntries != 5000 || !c.InitialElectionTickAdvance || len(c.ListenClientHTTPURLs) != 0 {
		t.Fatalf("defaults: catch-up %d, tick advance %v, http URLs %v, err %v", c.SnapshotCatchUpEntries, c.InitialElectionTickAdvance, c.ListenClientHTTPURLs, err)
	}
	c, _, err = parseServeConfig(append(base, "--snapshot-catchup-entries=100", "--initial-election-tick-advance=false",
		"--listen-client-http-urls=http://127.0.0.1:2382"), none)
	if err != nil || c.SnapshotCatchUpEntries != 100 || c.InitialElectionTickAdvance || len(c.ListenClientHTTPURLs) != 1 || c.ListenClientHTTPURLs[0] != "http://127.0.0.1:2382" {
		t.Fatalf("flags: catch-up %d, tick advance %v, http URLs %v, err %v", c.SnapshotCatchUpEntries, c.InitialElectionTickAdvance, c.ListenClientHTTPURLs, err)
	}
	c, _, err = parseServeConfig(append(base, "--warning-apply-duration=50ms", "--experimental-warning-unary-request-duration=1s"), none)
	if err != nil || c.WarningApplyDuration != 50*time.Millisecond || c.WarningUnaryRequestDuration != time.Second {
		t.Fatalf("warning durations: %v %v, err %v", c.WarningApplyDuration, c.WarningUnaryRequestDuration, err)
	}
	c, _, err = parseServeConfig(append(base, "--warning-unary-request-duration=2s"), none)
	if err != nil || c.WarningApplyDuration != 100*time.Millisecond || c.WarningUnaryRequestDuration != 2*time.Second {
		t.Fatalf("warning durations: %v %v, err %v", c.WarningApplyDuration, c.WarningUnaryRequestDuration, err)
	}
	if _, _, err := parseServeConfig(append(base, "--warning-apply-duration=-1s"), none); err == nil || !strings.Contains(err.Error(), "--warning-apply-duration") {
		t.Fatalf("negative apply warning duration: %v", err)
	}
	if c.PeerTLS.SkipClientSANVerify {
		t.Fatal("the peer SAN check is off by default")
	}
	c, _, err = parseServeConfig(append(base, "--peer-skip-client-san-verification"), none)
	if err != nil || !c.PeerTLS.SkipClientSANVerify {
		t.Fatalf("--peer-skip-client-san-verification: %v, err %v", c.PeerTLS.SkipClientSANVerify, err)
	}
	c, _, err = parseServeConfig(append(base, "--experimental-snapshot-catchup-entries=200"), none)
	if err != nil || c.SnapshotCatchUpEntries != 200 {
		t.Fatalf("--experimental-snapshot-catchup-entries: %d, err %v", c.SnapshotCatchUpEntries, err)
	}
	// As in etcd, more entries may be kept than are compacted at a time.
	if c, _, err := parseServeConfig(append(base, "--snapshot-count=100", "--snapshot-catchup-entries=5000"), none); err != nil || c.SnapshotCatchUpEntries != 5000 {
		t.Fatalf("catch-up entries above the snapshot count: %d, err %v", c.SnapshotCatchUpEntries, err)
	}
	if _, _, err := parseServeConfig(append(base, "--snapshot-catchup-entries=0"), none); err == nil || !strings.Contains(err.Error(), "--snapshot-catchup-entries: must be > 0") {
		t.Fatalf("no catch-up entries: %v", err)
	}
	if _, _, err := parseServeConfig(append(base, "--listen-client-http-urls=127.0.0.1:2382"), none); err == nil || !strings.Contains(err.Error(), "--listen-client-http-urls") {
		t.Fatalf("client HTTP URL without a scheme: %v", err)
	}
}
