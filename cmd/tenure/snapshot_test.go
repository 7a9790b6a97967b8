package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnapshotCommandErrors(t *testing.T) {
	dir := t.TempDir()
	notSnap := filepath.Join(dir, "not.db")
	if err := os.WriteFile(notSnap, []byte("this is not a snapshot, just text that is long enough"), 0o600); err != nil {
		t.Fatal(err)
	}
	used := filepath.Join(dir, "used")
	if err := os.MkdirAll(filepath.Join(used, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"snapshot"}, "needs a subcommand"},
		{"save without file", []string{"snapshot", "save"}, "exactly one file name"},
		{"save from two endpoints", []string{"snapshot", "save", filepath.Join(dir, "s.db"), "--endpoints", "127.0.0.1:1,127.0.0.1:2"}, "one endpoint"},
		{"status of a missing file", []string{"snapshot", "status", filepath.Join(dir, "missing.db")}, "no such file"},
		{"status of a non-snapshot", []string{"snapshot", "status", notSnap}, "not a Tenure snapshot file"},
		{"restore: name not listed", []string{"snapshot", "restore", notSnap, "--data-dir", filepath.Join(dir, "r1"), "--name", "x",
			"--initial-cluster", "a=http://127.0.0.1:2380"}, `--name "x" is not listed`},
		{"restore: peer URLs differ", []string{"snapshot", "restore", notSnap, "--data-dir", filepath.Join(dir, "r2"), "--name", "a",
			"--initial-cluster", "a=http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2390"}, "does not match"},
		{"restore: not a snapshot", []string{"snapshot", "restore", notSnap, "--data-dir", filepath.Join(dir, "r3")}, "not a Tenure snapshot file"},
		{"restore: used data dir", []string{"snapshot", "restore", notSnap, "--data-dir", used}, "exists and is not empty"},
		{"restore: data dir given a flag", []string{"snapshot", "restore", notSnap, "--data-dir", "--name=a"},
			`--data-dir: got "--name=a", which is spelled like a flag`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, nil, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("code %d, stderr %q; want a failure mentioning %q", code, stderr, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "r3")); !os.IsNotExist(err) {
		t.Fatalf("a failed restore left its data dir behind: %v", err)
	}
}
