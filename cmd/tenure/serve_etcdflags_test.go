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
