package main

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestMain lets the test binary serve as a run's helper processes too (it
// re-executes itself with TENURE_CHAOS_ROLE set; see procs.go).
func TestMain(m *testing.M) {
	runRoleFromEnv()
	os.Exit(m.Run())
}

// TestChaosShort is the CI entry: a short seeded run (TENURE_CHAOS_SEED,
// TENURE_CHAOS_DURATION override the defaults). go test -short skips it.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run skipped in -short mode")
	}
	cfg := DefaultConfig()
	cfg.Duration = 30 * time.Second // make chaos runs the longer one
	cfg.LinTimeout = time.Minute
	cfg.Seed = time.Now().UnixNano() % 1_000_000_000
	if s := os.Getenv("TENURE_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("TENURE_CHAOS_SEED=%q: %v", s, err)
		}
		cfg.Seed = v
	}
	if s := os.Getenv("TENURE_CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TENURE_CHAOS_DURATION=%q: %v", s, err)
		}
		cfg.Duration = d
	}
	cfg.Artifacts = os.Getenv("TENURE_TEST_ARTIFACTS")
	cfg.Verbose = testing.Verbose()
	res := Run(t, cfg)
	t.Log(res.Summary)
	if res.Anomalies > 0 {
		t.Errorf("%s", res.Summary)
	}
}
