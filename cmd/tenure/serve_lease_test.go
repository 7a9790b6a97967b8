package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseServeLeaseFlags(t *testing.T) {
	base := []string{"--name=a", "--initial-advertise-peer-urls=http://10.0.0.1:2380"}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	c, _, err := parseServeConfig(append(base, "--lease-expiry-rate=250", "--lease-checkpoint-interval=2s"), env(nil))
	if err != nil || c.LeaseExpiryRate != 250 || c.LeaseCheckpointInterval != 2*time.Second {
		t.Fatalf("flags: rate %d checkpoint %v err %v", c.LeaseExpiryRate, c.LeaseCheckpointInterval, err)
	}
	c, _, err = parseServeConfig(base, env(map[string]string{"TENURE_LEASE_EXPIRY_RATE": "77", "TENURE_LEASE_CHECKPOINT_INTERVAL": "500ms"}))
	if err != nil || c.LeaseExpiryRate != 77 || c.LeaseCheckpointInterval != 500*time.Millisecond {
		t.Fatalf("env: rate %d checkpoint %v err %v", c.LeaseExpiryRate, c.LeaseCheckpointInterval, err)
	}
	c, _, err = parseServeConfig(base, env(nil))
	if err != nil || c.LeaseExpiryRate != 1000 || c.LeaseCheckpointInterval != time.Second {
		t.Fatalf("defaults: rate %d checkpoint %v err %v", c.LeaseExpiryRate, c.LeaseCheckpointInterval, err)
	}
	if _, _, err = parseServeConfig(append(base, "--lease-expiry-rate=-5"), env(nil)); err == nil || !strings.Contains(err.Error(), "--lease-expiry-rate: must be > 0") {
		t.Fatalf("negative rate: %v", err)
	}
}
