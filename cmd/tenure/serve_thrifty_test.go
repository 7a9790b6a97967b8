package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseServeThriftyReplicationFlag(t *testing.T) {
	base := []string{"--name=a", "--initial-advertise-peer-urls=http://10.0.0.1:2380"}
	env := func(k string) string { return "" }

	c, _, err := parseServeConfig(base, env)
	if err != nil || c.ThriftyReplication != 5*time.Millisecond {
		t.Fatalf("default: thrifty replication %v err %v, want 5ms", c.ThriftyReplication, err)
	}
	c, _, err = parseServeConfig(append(base, "--thrifty-replication=0"), env)
	if err != nil || c.ThriftyReplication != 0 {
		t.Fatalf("0: thrifty replication %v err %v, want off", c.ThriftyReplication, err)
	}
	c, _, err = parseServeConfig(base, func(k string) string {
		if k == "TENURE_THRIFTY_REPLICATION" {
			return "20ms"
		}
		return ""
	})
	if err != nil || c.ThriftyReplication != 20*time.Millisecond {
		t.Fatalf("TENURE_THRIFTY_REPLICATION=20ms: thrifty replication %v err %v", c.ThriftyReplication, err)
	}
	for _, bad := range []string{"-1ms", "51ms"} {
		_, _, err = parseServeConfig(append(base, "--thrifty-replication="+bad), env)
		if err == nil || !strings.Contains(err.Error(), "--thrifty-replication: must be between 0 (off) and 50ms, got "+bad) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}
