package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLayoutAndArgs(t *testing.T) {
	dir := "/w/r1-put-1-tenure/try0"
	members, initial := layout(dir, []int{1001, 1002, 1003, 1004, 1005, 1006}, 3)
	if len(members) != 3 {
		t.Fatalf("%d members", len(members))
	}
	wantInitial := "m1=http://127.0.0.1:1002,m2=http://127.0.0.1:1004,m3=http://127.0.0.1:1006"
	if initial != wantInitial {
		t.Errorf("initial cluster %q, want %q", initial, wantInitial)
	}
	m := members[1]
	if m.name != "m2" || m.clientURL != "http://127.0.0.1:1003" || m.peerURL != "http://127.0.0.1:1004" ||
		m.dataDir != dir+"/data/m2" || m.logPath != dir+"/logs/m2.log" {
		t.Errorf("member 2: %+v", *m)
	}

	o := DefaultOptions()
	etcd := System{Label: "etcd 3.7.3", Kind: "etcd", Bin: "bin/etcd"}
	tenure := System{Label: "tenure", Kind: "tenure", Bin: "bin/tenure", PreArgs: []string{"serve"}}
	want := []string{
		"--name=m2",
		"--data-dir=/w/r1-put-1-tenure/try0/data/m2",
		"--listen-client-urls=http://127.0.0.1:1003",
		"--advertise-client-urls=http://127.0.0.1:1003",
		"--listen-peer-urls=http://127.0.0.1:1004",
		"--initial-advertise-peer-urls=http://127.0.0.1:1004",
		"--initial-cluster=" + wantInitial,
		"--initial-cluster-state=new",
		"--initial-cluster-token=bench-42",
		"--heartbeat-interval=100",
		"--election-timeout=1000",
		"--log-level=warn",
	}
	// Every system gets exactly the same flags; only PreArgs come first.
	if got := memberArgs(etcd, o, m, initial, "bench-42"); !slices.Equal(got, want) {
		t.Errorf("etcd args\n got  %q\n want %q", got, want)
	}
	if got := memberArgs(tenure, o, m, initial, "bench-42"); !slices.Equal(got, append([]string{"serve"}, want...)) {
		t.Errorf("tenure args\n got  %q\n want serve + %q", got, want)
	}
	// Members' command lines must not share the system's PreArgs backing
	// array (appending to it would make one member's flags overwrite another's).
	pre := make([]string, 1, 32)
	pre[0] = "serve"
	roomy := System{Label: "tenure", Kind: "tenure", Bin: "bin/tenure", PreArgs: pre}
	a1 := memberArgs(roomy, o, members[0], initial, "t")
	a2 := memberArgs(roomy, o, members[2], initial, "t")
	if a1[1] != "--name=m1" || a2[1] != "--name=m3" || pre[:cap(pre)][1] != "" {
		t.Errorf("command lines share PreArgs: %q / %q", a1[:2], a2[:2])
	}
	o.SnapshotCount, o.QuotaBackendBytes, o.LogLevel = 5000, 8<<30, ""
	got := memberArgs(etcd, o, m, initial, "bench-42")
	wantOpt := append(slices.Clone(want[:len(want)-1]), "--snapshot-count=5000", "--quota-backend-bytes=8589934592")
	if !slices.Equal(got, wantOpt) {
		t.Errorf("options\n got  %q\n want %q", got, wantOpt)
	}
}

func TestDefaultOptions(t *testing.T) {
	o := DefaultOptions()
	if o.Size != 3 || o.HeartbeatMS != 100 || o.ElectionMS != 1000 || o.SnapshotCount != 0 || o.QuotaBackendBytes != 0 || o.LogLevel != "warn" {
		t.Errorf("%+v", o)
	}
}

func TestFreePorts(t *testing.T) {
	// A port in use is never handed out.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	for round := 0; round < 5; round++ {
		ports, err := freePorts(9) // a ZooKeeper ensemble's 3 × 3
		if err != nil {
			t.Fatal(err)
		}
		if len(ports) != 9 {
			t.Fatalf("%d ports", len(ports))
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if p <= 0 || p > 65535 {
				t.Errorf("port %d", p)
			}
			if seen[p] {
				t.Errorf("port %d twice in %v", p, ports)
			}
			if p == busyPort {
				t.Errorf("port %d is in use", p)
			}
			seen[p] = true
		}
	}
}

func TestAgreedLeader(t *testing.T) {
	eps := []string{"http://a", "http://b", "http://c"}
	type st struct {
		leader, self uint64
		err          error
	}
	tests := []struct {
		name     string
		status   map[string]st
		leader   uint64 // the id returned; 0 with an error
		leaderEP string
		err      string // substring; "" for none
		asked    int    // endpoints asked before the answer
	}{
		{"agree, b leads", map[string]st{"http://a": {2, 1, nil}, "http://b": {2, 2, nil}, "http://c": {2, 3, nil}}, 2, "http://b", "", 3},
		{"agree, c leads", map[string]st{"http://a": {3, 1, nil}, "http://b": {3, 2, nil}, "http://c": {3, 3, nil}}, 3, "http://c", "", 3},
		// A leader outside the endpoints: no error here (the caller rejects it).
		{"leader elsewhere", map[string]st{"http://a": {9, 1, nil}, "http://b": {9, 2, nil}, "http://c": {9, 3, nil}}, 9, "", "", 3},
		{"no leader", map[string]st{"http://a": {2, 1, nil}, "http://b": {0, 2, nil}, "http://c": {2, 3, nil}}, 0, "", "http://b: no leader yet", 2},
		{"disagree", map[string]st{"http://a": {1, 1, nil}, "http://b": {1, 2, nil}, "http://c": {3, 3, nil}}, 0, "", "members disagree on the leader", 3},
		{"unreachable", map[string]st{"http://a": {0, 0, errors.New("connection refused")}}, 0, "", "status http://a: connection refused", 1},
		// A member without a header (self 0) is not taken for the leader.
		{"no header", map[string]st{"http://a": {2, 0, nil}, "http://b": {2, 2, nil}, "http://c": {2, 0, nil}}, 2, "http://b", "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := 0
			id, ep, err := agreedLeader(eps, func(ep string) (uint64, uint64, error) {
				asked++
				s := tt.status[ep]
				return s.leader, s.self, s.err
			})
			if id != tt.leader || ep != tt.leaderEP || asked != tt.asked {
				t.Errorf("leader %d at %q after %d asked, want %d at %q after %d", id, ep, asked, tt.leader, tt.leaderEP, tt.asked)
			}
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("error %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("error %v, want %q", err, tt.err)
			}
		})
	}
}

func TestVmRSS(t *testing.T) {
	status := "Name:\ttenure\nVmPeak:\t 2180852 kB\nVmSize:\t 2180852 kB\nVmHWM:\t   40000 kB\nVmRSS:\t   32596 kB\nRssAnon:\t   20000 kB\nThreads:\t12\n"
	if got, want := vmRSS(status), int64(32596*1024); got != want {
		t.Errorf("vmRSS = %d, want %d", got, want)
	}
	if got := vmRSS("Name:\tkthreadd\nState:\tS (sleeping)\n"); got != 0 {
		t.Errorf("no VmRSS line: %d, want 0", got)
	}
}

func TestRSSOfAProcess(t *testing.T) {
	p, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{members: []*member{{name: "self", cmd: &exec.Cmd{Process: p}}}}
	rss, err := c.RSS()
	if err != nil {
		t.Fatal(err)
	}
	// A Go test binary is a few MiB resident, certainly not a GiB.
	if len(rss) != 1 || rss[0] < 1<<20 || rss[0] > 1<<30 || rss[0]%1024 != 0 {
		t.Errorf("RSS of the test process: %v", rss)
	}
}

func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	write := func(path string, n int) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	m1 := filepath.Join(dir, "data", "m1")
	write(filepath.Join(m1, "member", "wal", "0.wal"), 1<<20)
	write(filepath.Join(m1, "member", "snap", "db"), 64<<10)
	// m2: a sparse file of 64 MiB with nothing written; du counts allocated
	// blocks, so it is (almost) free.
	m2 := filepath.Join(dir, "data", "m2")
	if err := os.MkdirAll(m2, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(m2, "db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	c := &Cluster{Dir: dir, members: []*member{{name: "m1", dataDir: m1}, {name: "m2", dataDir: m2}}}
	du, err := c.DiskUsage()
	if err != nil {
		t.Fatal(err)
	}
	written := int64(1<<20 + 64<<10)
	// Allocation is in file-system blocks (4 KiB here; both sizes are multiples).
	if len(du) != 2 || du[0] < written || du[0] > written+64<<10 {
		t.Errorf("m1: %v bytes, want %d (+ at most 64 KiB of block slack)", du, written)
	}
	if len(du) == 2 && du[1] > 1<<20 {
		t.Errorf("m2 (sparse 64 MiB, nothing written): %d bytes allocated counted, want < 1 MiB", du[1])
	}
	// RemoveData removes the data dirs (and only them).
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveData(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("data dir after RemoveData: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs")); err != nil {
		t.Errorf("logs dir after RemoveData: %v", err)
	}
	// A member whose data dir is gone is an error, not 0 bytes.
	if _, err := c.DiskUsage(); err == nil {
		t.Error("DiskUsage of missing data dirs: no error")
	}
}

// TestTenureCluster starts a real 3-member cluster of bench/bin/tenure
// (make -C bench tenure), checks that the members agree on a leader that
// is one of them, measures RSS and disk as the 1M-key suite does, restarts
// it, kills the leader and stops it. It takes a few seconds; it is skipped
// with -short or when the binary is missing (TENURE_BIN names another).
func TestTenureCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no cluster")
	}
	bin := os.Getenv("TENURE_BIN")
	if bin == "" {
		bin, _ = filepath.Abs("../../bin/tenure")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no tenure binary (make -C bench tenure): %v", err)
	}
	ctx := t.Context()
	dir := t.TempDir()
	o := DefaultOptions()
	o.ReadyTimeout = 20 * time.Second
	o.ClientWindowBytes = FixedClientWindowBytes // the clients below run with it (-client-window)
	c, err := Start(ctx, System{Label: "tenure", Kind: "tenure", Bin: bin, PreArgs: []string{"serve"}}, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if n := len(c.ClientConfig().DialOptions); n != 2 {
		t.Errorf("the cluster's clients got %d dial options, want the two fixed windows of Options.ClientWindowBytes", n)
	}
	if len(c.Endpoints) != 3 || !slices.Contains(c.Endpoints, c.Leader) {
		t.Fatalf("endpoints %v, leader %q", c.Endpoints, c.Leader)
	}
	if !strings.HasPrefix(c.CommandLine(0), bin+" serve --name=m1 ") {
		t.Errorf("command line %q", c.CommandLine(0))
	}

	// Every member names the same leader, and that leader's own status
	// says it is the one serving c.Leader.
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ids := map[string]uint64{}
	var leader uint64
	for _, ep := range c.Endpoints {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			t.Fatalf("status %s: %v", ep, err)
		}
		ids[ep] = st.Header.MemberId
		if leader != 0 && st.Leader != leader {
			t.Errorf("%s names leader %x, another member %x", ep, st.Leader, leader)
		}
		leader = st.Leader
	}
	if ids[c.Leader] != leader {
		t.Errorf("c.Leader %s is member %x, the members name %x", c.Leader, ids[c.Leader], leader)
	}

	rss, err := c.RSS()
	if err != nil {
		t.Fatal(err)
	}
	du, err := c.DiskUsage()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if rss[i] < 1<<20 || du[i] <= 0 {
			t.Errorf("member %d: RSS %d, disk %d", i+1, rss[i], du[i])
		}
	}

	restart, err := c.Restart(ctx, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if restart <= 0 || restart > 20*time.Second || !slices.Contains(c.Endpoints, c.Leader) {
		t.Errorf("restart took %v, leader %q", restart, c.Leader)
	}

	killed, err := c.KillEndpoint(c.Leader)
	if err != nil || killed.IsZero() {
		t.Fatalf("kill: %v", err)
	}
	if _, err := c.KillEndpoint("http://127.0.0.1:1"); err == nil {
		t.Error("KillEndpoint of an unknown endpoint: no error")
	}
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(15 * time.Second): // SIGTERM, SIGKILL after 3 s
		t.Fatal("Stop did not return within 15 s")
	}
	for _, m := range c.members {
		select {
		case <-m.done:
		default:
			t.Errorf("member %s still running after Stop", m.name)
		}
	}
}
