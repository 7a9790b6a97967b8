package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/cluster"
)

// hashKVs asks every endpoint for HashKV at rev and fails unless all agree.
func hashKVs(t *testing.T, clients []*clientv3.Client, eps []string, rev int64) *clientv3.HashKVResponse {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	var first *clientv3.HashKVResponse
	for i, cli := range clients {
		resp, err := cli.HashKV(ctx, eps[i], rev)
		if err != nil {
			t.Fatalf("HashKV(%s, %d): %v", eps[i], rev, err)
		}
		if first == nil {
			first = resp
			continue
		}
		if resp.Hash != first.Hash || resp.CompactRevision != first.CompactRevision || resp.HashRevision != first.HashRevision {
			t.Fatalf("HashKV differs: %s hash=%d compact=%d rev=%d, %s hash=%d compact=%d rev=%d",
				eps[0], first.Hash, first.CompactRevision, first.HashRevision, eps[i], resp.Hash, resp.CompactRevision, resp.HashRevision)
		}
	}
	return first
}

// TestSnapshotSaveRestore: etcdctl snapshot save from a running 3-member
// cluster, `tenure snapshot status`, `tenure snapshot restore` of that file
// into three new data directories, a new cluster on them, and HashKV equal
// everywhere (and to the source at the snapshot's revision).
func TestSnapshotSaveRestore(t *testing.T) {
	if cluster.TargetFromEnv(t) != cluster.Tenure {
		t.Skip("snapshot restore is a tenure command")
	}
	src := start(t, cluster.Options{Size: 3})
	ctx := testCtx(t, 90*time.Second)
	cli := src.ClientAll()
	for i := 0; i < 200; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%03d", i%50), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Delete(ctx, "k000"); err != nil {
		t.Fatal(err)
	}
	mid, err := cli.Get(ctx, "k001")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, mid.Header.Revision-20, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	lr, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	last, err := cli.Put(ctx, "leased", "x", clientv3.WithLease(lr.ID))
	if err != nil {
		t.Fatal(err)
	}
	rev := last.Header.Revision

	// Every member of the source agrees (etcdctl endpoint hashkv --cluster).
	var srcClients []*clientv3.Client
	for i := range src.Members {
		srcClients = append(srcClients, src.Client(i))
	}
	var srcHash *clientv3.HashKVResponse
	eventually(t, 10*time.Second, "source members agree on HashKV", func() error {
		h0, err := srcClients[0].HashKV(ctx, src.Endpoint(0), rev)
		if err != nil {
			return err
		}
		for i := 1; i < 3; i++ {
			h, err := srcClients[i].HashKV(ctx, src.Endpoint(i), rev)
			if err != nil {
				return err
			}
			if h.Hash != h0.Hash || h.CompactRevision != h0.CompactRevision {
				return fmt.Errorf("member %d hash %d compact %d, member 0 hash %d compact %d", i, h.Hash, h.CompactRevision, h0.Hash, h0.CompactRevision)
			}
		}
		srcHash = h0
		return nil
	})
	out, err := src.Etcdctl(ctx, "endpoint", "hashkv", "--cluster", "--rev", fmt.Sprint(rev), "-w", "json")
	if err != nil {
		t.Fatal(err)
	}
	var hk []struct {
		Endpoint string
		HashKV   struct{ Hash uint32 }
	}
	if err := json.Unmarshal([]byte(out), &hk); err != nil || len(hk) != 3 {
		t.Fatalf("etcdctl endpoint hashkv --cluster: %v %q", err, out)
	}
	for _, h := range hk {
		if h.HashKV.Hash != srcHash.Hash {
			t.Fatalf("etcdctl endpoint hashkv --cluster: %s has %d, want %d", h.Endpoint, h.HashKV.Hash, srcHash.Hash)
		}
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "snap.db")
	if out, err := src.Etcdctl(ctx, "--endpoints", src.Endpoint(0), "snapshot", "save", file); err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size()%512 != 32 {
		t.Fatalf("snapshot size %d is not 512n+32 (sha256 trailer)", st.Size())
	}

	dst := newProcCluster(t, procOptions{Size: 3})
	status, err := dst.tenure(ctx, "snapshot", "status", file, "-w", "json")
	if err != nil {
		t.Fatalf("tenure snapshot status: %v\n%s", err, status)
	}
	var si struct {
		Revision  int64 `json:"revision"`
		TotalSize int64 `json:"totalSize"`
	}
	if err := json.Unmarshal([]byte(status), &si); err != nil || si.Revision < rev || si.TotalSize != st.Size() {
		t.Fatalf("snapshot status %q: %v (want revision >= %d, size %d)", status, err, rev, st.Size())
	}

	// A corrupt copy is refused and leaves no directory behind.
	bad := filepath.Join(dir, "bad.db")
	b, _ := os.ReadFile(file)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	badDir := filepath.Join(dir, "bad-restore")
	if out, err := dst.tenure(ctx, "snapshot", "restore", bad, "--data-dir", badDir, "--name", "n0",
		"--initial-cluster", dst.initialCluster(), "--initial-advertise-peer-urls", "http://"+dst.peer[0]); err == nil || !strings.Contains(out, "checksum") {
		t.Fatalf("restore of a corrupt file: err=%v out=%s", err, out)
	}
	if _, err := os.Stat(badDir); !os.IsNotExist(err) {
		t.Fatalf("a failed restore left %s behind (%v)", badDir, err)
	}

	for i := range dst.names {
		args := append([]string{"snapshot", "restore", file}, dst.memberArgs(i)...)
		if out, err := dst.tenure(ctx, args...); err != nil {
			t.Fatalf("tenure snapshot restore: %v\n%s", err, out)
		}
	}
	// Restoring into a non-empty directory is refused.
	if out, err := dst.tenure(ctx, append([]string{"snapshot", "restore", file}, dst.memberArgs(0)...)...); err == nil || !strings.Contains(out, "not empty") {
		t.Fatalf("restore into a used directory: err=%v out=%s", err, out)
	}
	dst.startAll()
	if err := dst.waitReady(ctx, nil); err != nil {
		t.Fatal(err)
	}
	var dstClients []*clientv3.Client
	for i := range dst.names {
		dstClients = append(dstClients, dst.client(nil, dst.endpoint(i)))
	}
	got := hashKVs(t, dstClients, dst.endpoints(), rev)
	if got.Hash != srcHash.Hash || got.CompactRevision != srcHash.CompactRevision {
		t.Fatalf("restored cluster HashKV(%d) = %d (compact %d), source %d (compact %d)", rev, got.Hash, got.CompactRevision, srcHash.Hash, srcHash.CompactRevision)
	}

	// A new cluster: new identity, the data of the old one, and it accepts writes.
	dc := dstClients[0]
	ml, err := dc.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 3 || ml.Header.ClusterId == last.Header.ClusterId {
		t.Fatalf("restored cluster: %d members, cluster id %x (source %x)", len(ml.Members), ml.Header.ClusterId, last.Header.ClusterId)
	}
	g, err := dc.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if g.Count != 49 { // k001..k049: k000 was deleted
		t.Fatalf("restored cluster has %d keys under k, want 49", g.Count)
	}
	ttl, err := dc.TimeToLive(ctx, lr.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 {
		t.Fatalf("restored lease: %+v, %v", ttl, err)
	}
	p, err := dc.Put(ctx, "after-restore", "y")
	if err != nil {
		t.Fatal(err)
	}
	if p.Header.Revision <= rev {
		t.Fatalf("revision after restore %d, want > %d", p.Header.Revision, rev)
	}
}
