package main

import (
	"io"
	"log/slog"
	"runtime"
	"testing"
)

func TestParseServeAdaptiveProcsFlag(t *testing.T) {
	base := []string{"--name=a", "--initial-advertise-peer-urls=http://10.0.0.1:2380"}
	env := mapEnv(nil)

	o, _, _, err := parseServeFlags(base, env)
	if err != nil || !o.adaptProcs {
		t.Fatalf("default: --adaptive-procs %v err %v, want on", o.adaptProcs, err)
	}
	o, _, _, err = parseServeFlags(append(base, "--adaptive-procs=false"), env)
	if err != nil || o.adaptProcs {
		t.Fatalf("--adaptive-procs=false: %v err %v, want off", o.adaptProcs, err)
	}
	o, _, _, err = parseServeFlags(base, mapEnv(map[string]string{"TENURE_ADAPTIVE_PROCS": "false"}))
	if err != nil || o.adaptProcs {
		t.Fatalf("TENURE_ADAPTIVE_PROCS=false: %v err %v, want off", o.adaptProcs, err)
	}
}

// The operator's GOMAXPROCS governs alone, and the flag turns it off; on a
// machine with more than one CPU it is on by default.
func TestStartProcsDefersToGOMAXPROCSInTheEnvironment(t *testing.T) {
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)

	c := startProcs(true, mapEnv(map[string]string{"GOMAXPROCS": "2"}), lg)
	c.Stop()
	if c.Active() {
		t.Fatal("controller active with GOMAXPROCS set in the environment; the operator's value must govern")
	}
	c = startProcs(false, mapEnv(nil), lg)
	c.Stop()
	if c.Active() {
		t.Fatal("controller active with --adaptive-procs=false")
	}
	runtime.GOMAXPROCS(2)
	c = startProcs(true, mapEnv(nil), lg)
	defer c.Stop()
	if !c.Active() || c.Max() != 2 {
		t.Fatalf("controller active %v, max %d by default with GOMAXPROCS 2, want active and 2", c.Active(), c.Max())
	}
}
