package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/cluster"
)

// TestTenureCLI runs the tenure binary's client commands against a cluster:
// each one-request command prints etcdctl's text and, with -w json, the
// response; a failed request exits 1 with the server's error.
func TestTenureCLI(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 90*time.Second)
	bin := cluster.TenureBinary(t)
	eps := strings.Join(c.Endpoints(), ",")
	exe := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append(args, "--endpoints", eps, "--command-timeout", "10s")...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exe(args...)
		if err != nil {
			t.Fatalf("tenure %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	if out := run("put", "/cli/a", "1"); out != "OK\n" {
		t.Errorf("put: %q", out)
	}
	run("put", "/cli/b", "2")
	if out := run("get", "/cli/", "--prefix"); out != "/cli/a\n1\n/cli/b\n2\n" {
		t.Errorf("get --prefix: %q", out)
	}
	var got struct {
		Header struct{ Revision int64 } `json:"header"`
		Kvs    []struct{ Key []byte }   `json:"kvs"`
		Count  int64                    `json:"count"`
	}
	if err := json.Unmarshal([]byte(run("get", "/cli/a", "-w", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Count != 1 || len(got.Kvs) != 1 || string(got.Kvs[0].Key) != "/cli/a" || got.Header.Revision == 0 {
		t.Errorf("get -w json: %+v", got)
	}
	if out := run("del", "/cli/b"); out != "1\n" {
		t.Errorf("del: %q", out)
	}

	out := run("lease", "grant", "60")
	m := regexp.MustCompile(`^lease ([0-9a-f]{16}) granted with TTL\(60s\)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("lease grant: %q", out)
	}
	id := m[1]
	run("put", "/cli/leased", "v", "--lease", id)
	out = run("lease", "timetolive", id, "--keys")
	if !strings.Contains(out, "lease "+id+" granted with TTL(60s)") || !strings.Contains(out, "attached keys([/cli/leased])") {
		t.Errorf("lease timetolive --keys: %q", out)
	}
	if out := run("lease", "revoke", id); out != fmt.Sprintf("lease %s revoked\n", id) {
		t.Errorf("lease revoke: %q", out)
	}
	if out := run("lease", "timetolive", id); out != fmt.Sprintf("lease %s already expired\n", id) {
		t.Errorf("lease timetolive after revoke: %q", out)
	}
	if out := run("get", "/cli/leased"); out != "" {
		t.Errorf("the revoked lease's key is still there: %q", out)
	}
	out, err := exe("lease", "revoke", id)
	if code := exitCode(err); code != 1 || !strings.Contains(out, "failed to revoke lease") || !strings.Contains(out, "requested lease not found") {
		t.Errorf("revoke of a revoked lease: exit %d, %q", code, out)
	}

	if out := run("member", "list"); strings.Count(out, ", started, ") != len(c.Members) || strings.Contains(out, "unstarted") {
		t.Errorf("member list: %q, want %d started members", out, len(c.Members))
	}

	if err := json.Unmarshal([]byte(run("get", "/cli/a", "-w", "json")), &got); err != nil {
		t.Fatal(err)
	}
	rev := got.Header.Revision
	if out := run("compact", fmt.Sprint(rev)); out != fmt.Sprintf("compacted revision %d\n", rev) {
		t.Errorf("compact: %q", out)
	}
	out, err = exe("get", "/cli/a", "--rev", fmt.Sprint(rev-1))
	if code := exitCode(err); code != 1 || !strings.Contains(out, "required revision has been compacted") {
		t.Errorf("get below the compacted revision: exit %d, %q", code, out)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
