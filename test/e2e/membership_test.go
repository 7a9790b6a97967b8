package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/cluster"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// joinMember starts `tenure serve --initial-cluster-state existing` for a
// member already added under name with peer URL peer; it is killed on cleanup.
func joinMember(t *testing.T, c *cluster.Cluster, name, peer, client string) string {
	t.Helper()
	ml, err := c.ClientAll().MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ic []string
	for _, m := range ml.Members {
		n := m.Name
		if n == "" {
			n = name
		}
		for _, u := range m.PeerURLs {
			ic = append(ic, n+"="+u)
		}
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cluster.TenureBinary(t), "serve",
		"--name", name, "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", strings.Join(ic, ","), "--initial-cluster-state", "existing",
		"--heartbeat-interval", fmt.Sprint(heartbeatMs), "--election-timeout", fmt.Sprint(electionMs))
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("joined member %s log:\n%s", name, strings.Join(lines, "\n"))
		}
	})
	return logPath
}

// writer puts unique keys until stopped and remembers every acknowledged one.
type writer struct {
	mu    sync.Mutex
	acked []string
	errs  int
	stop  chan struct{}
	done  chan struct{}
}

func startWriter(cli *clientv3.Client, prefix string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			k := fmt.Sprintf("%s%06d", prefix, i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := cli.Put(ctx, k, "v")
			cancel()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, k)
			} else {
				w.errs++
			}
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) finish() ([]string, int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.errs
}

func memberIDByName(ctx context.Context, cli *clientv3.Client, name string) (uint64, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return 0, err
	}
	for _, m := range ml.Members {
		if m.Name == name {
			return m.ID, nil
		}
	}
	return 0, fmt.Errorf("member %s not (yet) named in %v", name, ml.Members)
}

// etcdctl member add (learner) → new `tenure serve --initial-cluster-state
// existing` → member promote (refused before it caught up) → member remove of
// the leader, all under concurrent writes; no acknowledged write is lost.
// etcdctlMembership runs an etcdctl membership command, again while it is
// refused as "unhealthy cluster": with --strict-reconfig-check (on by
// default, in etcd as in Tenure) a change is refused until the member's
// raft streams to its peers have been up for 5 s, as on a cluster just
// started or just changed.
func etcdctlMembership(t *testing.T, c *cluster.Cluster, ctx context.Context, args ...string) (out string, err error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err = c.Etcdctl(ctx, args...)
		if err == nil || !strings.Contains(err.Error(), "unhealthy cluster") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestMembershipAddPromoteRemoveUnderLoad(t *testing.T) {
	c := start(t, cluster.Options{})
	ctx := testCtx(t, 180*time.Second)
	cli := c.ClientAll()
	w := startWriter(cli, "/members/w/")

	// A learner that never started cannot be promoted: clear error.
	ghost := freePort(t)
	out, err := etcdctlMembership(t, c, ctx, "member", "add", "ghost", "--learner", "--peer-urls=http://"+ghost)
	if err != nil {
		t.Fatalf("member add ghost: %v\n%s", err, out)
	}
	var ghostID uint64
	if ml, err := cli.MemberList(ctx); err == nil {
		for _, m := range ml.Members {
			if m.IsLearner {
				ghostID = m.ID
			}
		}
	}
	if ghostID == 0 {
		t.Fatal("learner not listed after member add")
	}
	out, err = c.Etcdctl(ctx, "member", "promote", fmt.Sprintf("%x", ghostID))
	if err == nil || !strings.Contains(err.Error(), "can only promote a learner member which is in sync with leader") {
		t.Fatalf("promote of a learner that never caught up: %v\n%s", err, out)
	}
	if out, err := etcdctlMembership(t, c, ctx, "member", "remove", fmt.Sprintf("%x", ghostID)); err != nil {
		t.Fatalf("member remove ghost: %v\n%s", err, out)
	}

	// Add a real learner and start it.
	peer, client := freePort(t), freePort(t)
	out, err = etcdctlMembership(t, c, ctx, "member", "add", "m3", "--learner", "--peer-urls=http://"+peer)
	if err != nil {
		t.Fatalf("member add m3: %v\n%s", err, out)
	}
	if !strings.Contains(out, "ETCD_INITIAL_CLUSTER_STATE=\"existing\"") {
		t.Errorf("member add output lacks the join instructions:\n%s", out)
	}
	joinMember(t, c, "m3", peer, client)
	newCli := c.NewClient("http://" + client)
	eventually(t, 60*time.Second, "m3 serves serializable reads", func() error {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := newCli.Get(actx, "/members/probe", clientv3.WithSerializable())
		return err
	})
	// The joined member publishes its name once it hears from the leader.
	var id3 uint64
	eventually(t, 60*time.Second, "m3 joined and named", func() (err error) {
		id3, err = memberIDByName(ctx, cli, "m3")
		return err
	})
	// Promote through every endpoint in turn: followers forward to the leader.
	eventually(t, 60*time.Second, "m3 promoted", func() error {
		out, err := c.Etcdctl(ctx, "member", "promote", fmt.Sprintf("%x", id3))
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	if ml, err := cli.MemberList(ctx); err != nil || len(ml.Members) != 4 {
		t.Fatalf("member list after promote: %v %v", ml, err)
	} else {
		for _, m := range ml.Members {
			if m.IsLearner {
				t.Fatalf("member %s still a learner", m.Name)
			}
		}
	}

	// Remove the leader.
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaderID, err := memberIDByName(ctx, cli, c.Members[l].Name)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := etcdctlMembership(t, c, ctx, "member", "remove", fmt.Sprintf("%x", leaderID)); err != nil {
		t.Fatalf("member remove leader m%d: %v\n%s", l, err, out)
	}
	// A removed member stops by itself (TestRemovedMemberStops).
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	if _, err := c.WaitExit(wctx, l); err != nil {
		t.Fatalf("the removed leader m%d did not stop: %v", l, err)
	}
	wcancel()
	var rest []string
	for i := range c.Members {
		if i != l {
			rest = append(rest, c.Endpoint(i))
		}
	}
	rest = append(rest, "http://"+client)
	restCli := c.NewClient(rest...)
	eventually(t, 30*time.Second, "writes after removing the leader", func() error {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := restCli.Put(actx, "/members/after-remove", "ok")
		return err
	})
	ml, err := restCli.MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list after removing the leader: %v %v", ml, err)
	}

	// Let the writer run a little past the changes, then check every ack.
	time.Sleep(200 * time.Millisecond)
	acked, errs := w.finish()
	if len(acked) == 0 {
		t.Fatal("no write was acknowledged")
	}
	got, err := restCli.Get(ctx, "/members/w/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, kv := range got.Kvs {
		have[string(kv.Key)] = true
	}
	for _, k := range acked {
		if !have[k] {
			t.Errorf("acknowledged write %s lost", k)
		}
	}
	// The new member has every acknowledged write too.
	eventually(t, 10*time.Second, "m3 caught up", func() error {
		g, err := newCli.Get(ctx, "/members/w/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if int(g.Count) < len(acked) {
			return fmt.Errorf("m3 has %d keys, %d acknowledged", g.Count, len(acked))
		}
		return nil
	})
	t.Logf("%d writes acknowledged (%d failed during membership changes), none lost", len(acked), errs)
}

// A removed member stops by itself, with etcd's log line, whether it
// applied its own removal or was paused (SIGSTOP) while the cluster removed
// it and learns it from its peers when it resumes; started again on its old
// data-dir it stops again instead of campaigning forever while its clients
// time out. The members that stay keep serving.
func TestRemovedMemberStops(t *testing.T) {
	c := start(t, cluster.Options{})
	ctx := testCtx(t, 180*time.Second)
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live, paused := (l+1)%3, (l+2)%3
	ids := map[int]uint64{}
	for _, i := range []int{live, paused} {
		id, err := memberIDByName(ctx, c.Client(l), c.Members[i].Name)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	removeThroughLeader := func(i int) {
		t.Helper()
		// etcd refuses to remove a member whose stream went quiet less than
		// its health interval (5 s) ago ("unhealthy cluster"): retried.
		eventually(t, 30*time.Second, fmt.Sprintf("member remove m%d", i), func() error {
			out, err := c.Etcdctl(ctx, "--endpoints="+c.Endpoint(l), "member", "remove", fmt.Sprintf("%x", ids[i]))
			if err != nil {
				return fmt.Errorf("%v\n%s", err, out)
			}
			return nil
		})
	}
	const removedLine = "the member has been permanently removed from the cluster"
	waitStopped := func(i int, how string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		code, err := c.WaitExit(wctx, i)
		if err != nil {
			t.Fatalf("removed member m%d (%s) did not stop by itself: %v", i, how, err)
		}
		b, _ := os.ReadFile(c.Members[i].LogPath)
		if !strings.Contains(string(b), removedLine) {
			t.Fatalf("removed member m%d (%s) stopped (code %d) without logging %q", i, how, code, removedLine)
		}
		if c.Opts.Binary == cluster.Tenure {
			if code != 1 {
				t.Fatalf("removed member m%d (%s) exited with code %d, want 1", i, how, code)
			}
			if !strings.Contains(string(b), "the data-dir used by this member must be removed") {
				t.Fatalf("removed member m%d (%s) does not say what to do with its data-dir", i, how)
			}
		}
		t.Logf("m%d (%s) stopped by itself, exit code %d", i, how, code)
	}

	// Paused while the cluster removes it: it cannot apply its removal.
	c.Pause(paused)
	removeThroughLeader(paused)
	c.Resume(paused)
	waitStopped(paused, "paused during its removal")

	// Running: it applies its own removal.
	removeThroughLeader(live)
	waitStopped(live, "applied its own removal")

	// Started again on their data-dirs: each learns it is removed and stops.
	for _, i := range []int{live, paused} {
		if err := os.Truncate(c.Members[i].LogPath, 0); err != nil {
			t.Fatal(err)
		}
		c.Restart(i)
		waitStopped(i, "restarted on its old data-dir")
	}

	// The one member left is the whole cluster now.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Client(l).Put(pctx, "/members/after-removals", "ok"); err != nil {
		t.Fatalf("write to the member left: %v", err)
	}
	ml, err := c.Client(l).MemberList(pctx)
	if err != nil || len(ml.Members) != 1 {
		t.Fatalf("member list after removing two members: %v %v", ml, err)
	}
}

// A script replacing members runs etcdctl's membership commands back to
// back, each as soon as the previous one returns. Raft refuses a change
// proposed while it still counts the previous one as pending; every
// command must still succeed within etcdctl's own 5 s command timeout.
// The race itself is pinned by raftnode's TestBackToBackMembershipChanges
// (its window is too narrow to hit reliably from outside); this checks the
// commands end to end, and passes against etcd too.
func TestEtcdctlMembershipChangesBackToBack(t *testing.T) {
	c := start(t, cluster.Options{})
	ctx := testCtx(t, 120*time.Second)
	for k := 0; k < 6; k++ {
		peer := "http://" + freePort(t)
		args := []string{"member", "add", fmt.Sprintf("b2b%d", k), "--peer-urls=" + peer, "-w", "json"}
		if k%2 == 0 {
			args = append(args, "--learner")
		}
		var out string
		var err error
		if k == 0 { // only the first waits out the strict check's 5 s after start
			out, err = etcdctlMembership(t, c, ctx, args...)
		} else {
			out, err = c.Etcdctl(ctx, args...)
		}
		if err != nil {
			t.Fatalf("change %d: member add: %v\n%s", k, err, out)
		}
		var added struct {
			Member struct{ ID uint64 } `json:"member"`
		}
		if err := json.Unmarshal([]byte(out), &added); err != nil || added.Member.ID == 0 {
			t.Fatalf("change %d: member add answered %q (%v)", k, out, err)
		}
		if out, err := c.Etcdctl(ctx, "member", "remove", strconv.FormatUint(added.Member.ID, 16)); err != nil {
			t.Fatalf("change %d: member remove: %v\n%s", k, err, out)
		}
	}
	ml, err := c.ClientAll().MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("after six adds and removes: %v %v", ml, err)
	}
}
