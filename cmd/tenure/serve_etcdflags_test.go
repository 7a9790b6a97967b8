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
