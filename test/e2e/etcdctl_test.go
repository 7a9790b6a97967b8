package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/test/logbuf"
)

func TestEtcdctl(t *testing.T) {
	c := start(t, clusterOpts())
	ctx := testCtx(t, 90*time.Second)
	run := func(args ...string) string {
		t.Helper()
		out, err := c.Etcdctl(ctx, args...)
		if err != nil {
			t.Fatalf("etcdctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	expect := func(out, want string, args ...string) {
		t.Helper()
		if !strings.Contains(out, want) {
			t.Errorf("etcdctl %s: output %q does not contain %q", strings.Join(args, " "), out, want)
		}
	}

	if out := run("put", "/p/a", "1"); strings.TrimSpace(out) != "OK" {
		t.Errorf("put: %q", out)
	}
	run("put", "/p/b", "2")
	run("put", "/q", "3")
	if out := run("get", "--prefix", "/p/"); out != "/p/a\n1\n/p/b\n2\n" {
		t.Errorf("get --prefix: %q", out)
	}
	if out := run("get", "/p/a", "--print-value-only"); out != "1\n" {
		t.Errorf("get --print-value-only: %q", out)
	}
	if out := run("del", "/p/b"); strings.TrimSpace(out) != "1" {
		t.Errorf("del: %q", out)
	}
	if out := run("del", "/nonexistent"); strings.TrimSpace(out) != "0" {
		t.Errorf("del of a missing key: %q", out)
	}

	// txn reads compares, success ops and failure ops from stdin.
	txn := func(script string) string {
		t.Helper()
		cmd := c.EtcdctlCmd(ctx, "txn")
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("etcdctl txn: %v\n%s", err, out)
		}
		return string(out)
	}
	out := txn("value(\"/p/a\") = \"1\"\n\nput /p/a 2\n\nput /p/a failed\n\n")
	if !strings.HasPrefix(out, "SUCCESS") {
		t.Errorf("txn (holds): %q", out)
	}
	out = txn("value(\"/p/a\") = \"1\"\n\nput /p/a 3\n\nget /p/a\n\n")
	if !strings.HasPrefix(out, "FAILURE") || !strings.Contains(out, "/p/a\n2") {
		t.Errorf("txn (fails): %q", out)
	}

	// watch: replay from a revision, bounded by a timeout.
	var st struct {
		Header struct{ Revision int64 } `json:"header"`
	}
	if err := json.Unmarshal([]byte(run("get", "/q", "-w", "json")), &st); err != nil {
		t.Fatal(err)
	}
	run("put", "/w/x", "wx")
	run("del", "/w/x")
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	wout, _ := c.EtcdctlCmd(wctx, "watch", "--prefix", "/w/", "--rev", fmt.Sprint(st.Header.Revision+1)).CombinedOutput()
	wcancel()
	if !strings.Contains(string(wout), "PUT\n/w/x\nwx\nDELETE\n/w/x\n") {
		t.Errorf("watch --rev: %q", wout)
	}
	// live watch: started first, sees a later put.
	wctx, wcancel = context.WithTimeout(ctx, 10*time.Second)
	wcmd := c.EtcdctlCmd(wctx, "watch", "/live")
	var wbuf logbuf.Buffer
	wcmd.Stdout, wcmd.Stderr = &wbuf, &wbuf
	if err := wcmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 8*time.Second, "live etcdctl watch sees a put", func() error {
		run("put", "/live", "now")
		if !strings.Contains(wbuf.String(), "PUT\n/live\nnow\n") {
			return fmt.Errorf("watch output so far %q", wbuf.String())
		}
		return nil
	})
	wcancel()
	wcmd.Wait()

	// leases.
	out = run("lease", "grant", "60")
	m := regexp.MustCompile(`lease ([0-9a-f]+) granted with TTL\(60s\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("lease grant: %q", out)
	}
	id := m[1]
	run("put", "/leased", "v", "--lease", id)
	expect(run("lease", "keep-alive", "--once", id), fmt.Sprintf("lease %s keepalived with TTL(60)", id), "lease keep-alive --once")
	out = run("lease", "timetolive", id, "--keys")
	if !regexp.MustCompile(`lease ` + id + ` granted with TTL\(60s\), remaining\((5[0-9]|60)s\), attached keys\(\[/leased\]\)`).MatchString(out) {
		t.Errorf("lease timetolive: %q", out)
	}
	expect(run("lease", "list"), id, "lease list")
	expect(run("lease", "revoke", id), fmt.Sprintf("lease %s revoked", id), "lease revoke")
	expect(run("lease", "timetolive", id), "already expired", "lease timetolive after revoke")
	if out := run("get", "/leased"); out != "" {
		t.Errorf("key of a revoked lease still present: %q", out)
	}

	// lock NAME -- cmd runs cmd while holding the lock.
	out = run("lock", "mylock", "--", "sh", "-c", `echo "held key=$ETCD_LOCK_KEY rev=$ETCD_LOCK_REV"`)
	if !regexp.MustCompile(`held key=mylock/[0-9a-f]+ rev=[1-9][0-9]*`).MatchString(out) {
		t.Errorf("lock with command: %q", out)
	}
	// while the lock is held by one etcdctl, another waits.
	hctx, hcancel := context.WithTimeout(ctx, 20*time.Second)
	holder := c.EtcdctlCmd(hctx, "lock", "biglock")
	var hbuf logbuf.Buffer
	holder.Stdout, holder.Stderr = &hbuf, &hbuf
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "etcdctl lock acquired", func() error {
		if !strings.Contains(hbuf.String(), "biglock/") {
			return fmt.Errorf("output %q", hbuf.String())
		}
		return nil
	})
	tctx, tcancel := context.WithTimeout(ctx, time.Second)
	out2, err := c.EtcdctlCmd(tctx, "lock", "biglock", "--", "echo", "SHOULD-NOT-RUN").CombinedOutput()
	tcancel()
	if err == nil || strings.Contains(string(out2), "SHOULD-NOT-RUN") {
		t.Errorf("second locker ran while the lock was held: %v %q", err, out2)
	}
	hcancel()
	holder.Wait()

	// elect: campaign prints the leader key and proposal; --listen observes.
	ectx, ecancel := context.WithTimeout(ctx, 20*time.Second)
	cand := c.EtcdctlCmd(ectx, "elect", "myelection", "alice")
	var ebuf logbuf.Buffer
	cand.Stdout, cand.Stderr = &ebuf, &ebuf
	if err := cand.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "etcdctl elect wins", func() error {
		if !regexp.MustCompile(`myelection/[0-9a-f]+\nalice\n`).MatchString(ebuf.String()) {
			return fmt.Errorf("output %q", ebuf.String())
		}
		return nil
	})
	lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
	lout, _ := c.EtcdctlCmd(lctx, "elect", "--listen", "myelection").CombinedOutput()
	lcancel()
	if !strings.Contains(string(lout), "alice") {
		t.Errorf("elect --listen: %q", lout)
	}
	ecancel()
	cand.Wait()

	// cluster introspection.
	out = run("member", "list")
	for i := range c.Members {
		expect(out, fmt.Sprintf(", started, m%d, ", i), "member list")
	}
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != len(c.Members) {
		t.Errorf("member list has %d lines: %q", n, out)
	}
	out = run("endpoint", "status", "-w", "json")
	var sts []struct {
		Endpoint string
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Leader  uint64
			Version string `json:"version"`
		}
	}
	if err := json.Unmarshal([]byte(out), &sts); err != nil {
		t.Fatalf("endpoint status json: %v\n%s", err, out)
	}
	leaders := 0
	for _, s := range sts {
		if s.Status.Leader == 0 || s.Status.Version == "" {
			t.Errorf("endpoint status %s: %+v", s.Endpoint, s.Status)
		}
		if s.Status.Leader == s.Status.Header.MemberID {
			leaders++
		}
	}
	if len(sts) != len(c.Members) || leaders != 1 {
		t.Errorf("endpoint status: %d endpoints, %d leaders: %s", len(sts), leaders, out)
	}
	expect(run("endpoint", "status"), "true", "endpoint status (table)") // IS LEADER column
	if out := run("endpoint", "health"); strings.Count(out, "is healthy") != len(c.Members) {
		t.Errorf("endpoint health: %q", out)
	}

	// compaction.
	if err := json.Unmarshal([]byte(run("get", "/q", "-w", "json")), &st); err != nil {
		t.Fatal(err)
	}
	rev := fmt.Sprint(st.Header.Revision)
	expect(run("compaction", rev), "compacted revision "+rev, "compaction")
	out, err = c.Etcdctl(ctx, "get", "/q", "--rev", "2")
	if err == nil || !strings.Contains(err.Error(), "required revision has been compacted") {
		t.Errorf("get at compacted revision: %v %q", err, out)
	}
}
