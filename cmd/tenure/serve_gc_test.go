package main

import (
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

func TestParseServeGCMinHeapFlag(t *testing.T) {
	base := []string{"--name=a", "--initial-advertise-peer-urls=http://10.0.0.1:2380"}
	env := mapEnv(nil)

	o, _, _, err := parseServeFlags(base, env)
	if err != nil || o.gcMinHeap != 64<<20 {
		t.Fatalf("default: --gc-min-heap-bytes %d err %v, want 64 MiB", o.gcMinHeap, err)
	}
	o, _, _, err = parseServeFlags(append(base, "--gc-min-heap-bytes=0"), env)
	if err != nil || o.gcMinHeap != 0 {
		t.Fatalf("0: --gc-min-heap-bytes %d err %v, want 0", o.gcMinHeap, err)
	}
	o, _, _, err = parseServeFlags(base, mapEnv(map[string]string{"TENURE_GC_MIN_HEAP_BYTES": "1048576"}))
	if err != nil || o.gcMinHeap != 1<<20 {
		t.Fatalf("TENURE_GC_MIN_HEAP_BYTES=1048576: --gc-min-heap-bytes %d err %v", o.gcMinHeap, err)
	}
	// A bad value is reported with the server's own problems, all at once.
	_, _, _, err = parseServeFlags(append(base, "--gc-min-heap-bytes=-1", "--max-txn-ops=0"), env)
	if err == nil || !strings.Contains(err.Error(), "--gc-min-heap-bytes: must be >= 0 (0 turns it off), got -1") ||
		!strings.Contains(err.Error(), "--max-txn-ops") {
		t.Fatalf("-1 with a bad --max-txn-ops: %v; want both named", err)
	}
}

func TestStartGCTunerDefersToGOGCInTheEnvironment(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))

	tu := startGCTuner(64<<20, func(k string) string {
		if k == "GOGC" {
			return "200"
		}
		return ""
	}, lg)
	defer tu.Stop()
	if tu.Active() {
		t.Fatal("tuner active with GOGC set in the environment; the operator's GOGC must govern")
	}

	tu = startGCTuner(0, func(string) string { return "" }, lg)
	defer tu.Stop()
	if tu.Active() {
		t.Fatal("tuner active with --gc-min-heap-bytes=0")
	}

	tu = startGCTuner(64<<20, func(string) string { return "" }, lg)
	defer tu.Stop()
	if !tu.Active() {
		t.Fatal("tuner inactive by default")
	}
}
