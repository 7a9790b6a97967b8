package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/server/failpoint"
)

// scheduler injects one fault at a time, chosen and timed by a seeded RNG,
// heals it, and checks that the cluster comes back. Workloads run
// throughout. The RNG decides the schedule; the interleaving with the
// workloads' requests is up to the machine, so a seed reproduces the fault
// schedule, not the exact history.
type scheduler struct {
	r   *run
	rng *rand.Rand
}

type faultKind struct {
	name   string
	weight int
	do     func(s *scheduler)
}

// crashFailpoints are the storage failpoints a member is crashed at in the
// fault phase. mvcc-compact-midway needs a compaction and is exercised by
// the 17780 scenario.
var crashFailpoints = []string{
	failpoint.RaftBeforeSave,
	failpoint.RaftAfterSave,
	failpoint.ApplyBeforeCommit,
	failpoint.ApplyAfterCommit,
	failpoint.CompactBeforeTrim,
	failpoint.SnapshotBeforeSave,
	failpoint.SnapshotAfterSave,
}

func (s *scheduler) kinds() []faultKind {
	return []faultKind{
		{"kill", 3, (*scheduler).kill},
		{"pause", 3, (*scheduler).pause},
		{"partition", 3, (*scheduler).partition},
		{"oneway", 2, (*scheduler).oneway},
		{"delay", 2, (*scheduler).delay},
		{"drop", 2, (*scheduler).drop},
		{"clientblackhole", 1, (*scheduler).clientBlackhole},
		{"failpoint", 2, (*scheduler).failpointCrash},
		{"replace", 1, (*scheduler).replace},
	}
}

func (s *scheduler) loop(deadline time.Time) {
	kinds := s.kinds()
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	for time.Now().Before(deadline) {
		s.ensureUp()
		n := s.rng.IntN(total)
		var k faultKind
		for _, k = range kinds {
			if n < k.weight {
				break
			}
			n -= k.weight
		}
		k.do(s)
		s.r.c.Heal()
		s.wait(300*time.Millisecond, 1500*time.Millisecond)
	}
	s.ensureUp()
}

// wait lets the workloads run between lo and hi (a schedule step, not
// synchronisation).
func (s *scheduler) wait(lo, hi time.Duration) {
	d := lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
	t := time.NewTimer(d)
	<-t.C
}

func (s *scheduler) hold() time.Duration {
	return 500*time.Millisecond + time.Duration(s.rng.Int64N(int64(3*time.Second)))
}

func (s *scheduler) n() int { return len(s.r.c.Members) }

// target picks the leader half of the time (when one is known), otherwise
// a random member.
func (s *scheduler) target() int {
	if s.rng.IntN(2) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l, err := s.r.c.Leader(ctx)
		cancel()
		if err == nil {
			return l
		}
	}
	return s.rng.IntN(s.n())
}

func (s *scheduler) others(i int) []int {
	var o []int
	for j := 0; j < s.n(); j++ {
		if j != i {
			o = append(o, j)
		}
	}
	return o
}

// ensureUp restarts any member that exited without the scheduler killing
// it (a crash is an anomaly), and waits until every member serves.
func (s *scheduler) ensureUp() {
	c := s.r.c
	for i := range c.Members {
		if !c.Running(i) {
			if code := c.ExitCode(i); code == 0 {
				// a clean stop: SIGTERM/SIGINT from outside the harness (the
				// scheduler never sends them), not the server's doing
				s.r.logf("member %d stopped cleanly (signal from outside the harness?); restarting", i)
				s.r.fault("external-stop")
			} else {
				s.r.anomaly("member %d exited on its own with code %d", i, code)
			}
			c.RestartWithEnv(i, nil)
			s.r.fault("restart")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		s.r.anomaly("cluster not ready 45s after faults were healed: %v", err)
	}
}

func (s *scheduler) restart(i int, env []string) {
	s.r.c.RestartWithEnv(i, env)
	s.r.fault("restart")
}

// victims picks the members a process fault hits: target(), and on a
// cluster of 5 or more, a third of the time a second member too — never
// more than a minority, so a quorum stays up and must make progress.
func (s *scheduler) victims() []int {
	i := s.target()
	if s.n() < 5 || s.rng.IntN(3) != 0 {
		return []int{i}
	}
	o := s.others(i)
	return []int{i, o[s.rng.IntN(len(o))]}
}

func (s *scheduler) kill() {
	vs := s.victims()
	h := s.hold()
	s.r.logf("fault: kill -9 member(s) %v, restart after %v", vs, h)
	var killed []int
	for _, i := range vs {
		if s.r.c.Running(i) {
			s.r.fault("kill")
			s.r.c.Kill(i)
			killed = append(killed, i)
		}
	}
	sleep(h)
	for _, i := range killed {
		s.restart(i, nil)
	}
}

func (s *scheduler) pause() {
	vs := s.victims()
	h := s.hold() + time.Duration(s.rng.Int64N(int64(2*time.Second)))
	s.r.logf("fault: SIGSTOP member(s) %v for %v", vs, h)
	var paused []int
	for _, i := range vs {
		if s.r.c.Running(i) {
			s.r.fault("pause")
			s.r.c.Pause(i)
			paused = append(paused, i)
		}
	}
	sleep(h)
	for _, i := range paused {
		s.r.c.Resume(i)
	}
}

func (s *scheduler) partition() {
	n := s.n()
	i := s.target()
	var minority []int
	if n >= 5 && s.rng.IntN(2) == 0 {
		j := (i + 1 + s.rng.IntN(n-1)) % n
		minority = []int{i, j}
	} else {
		minority = []int{i}
	}
	in := map[int]bool{}
	for _, m := range minority {
		in[m] = true
	}
	var majority []int
	for j := 0; j < n; j++ {
		if !in[j] {
			majority = append(majority, j)
		}
	}
	h := s.hold()
	s.r.logf("fault: partition %v | %v for %v", minority, majority, h)
	s.r.fault("partition")
	s.r.c.Partition(minority, majority)
	if s.rng.IntN(3) == 0 {
		// the minority's clients are cut off too
		for _, m := range minority {
			s.r.c.ClientProxy(m).Blackhole()
		}
	}
	sleep(h)
	s.r.c.Heal()
}

func (s *scheduler) oneway() {
	i := s.target()
	o := s.others(i)
	j := o[s.rng.IntN(len(o))]
	from, to := i, j
	if s.rng.IntN(2) == 0 {
		from, to = j, i
	}
	h := s.hold()
	s.r.logf("fault: one-way partition %d -> %d for %v", from, to, h)
	s.r.fault("oneway")
	s.r.c.OneWayPartition(from, to)
	sleep(h)
	s.r.c.Heal()
}

func (s *scheduler) delay() {
	d := time.Duration(10+s.rng.IntN(150)) * time.Millisecond
	j := time.Duration(1+s.rng.IntN(100)) * time.Millisecond
	h := s.hold()
	all := s.rng.IntN(2) == 0
	i := s.rng.IntN(s.n())
	s.r.logf("fault: delay %v jitter %v on %s for %v", d, j, map[bool]string{true: "every link", false: fmt.Sprintf("member %d's links", i)}[all], h)
	s.r.fault("delay")
	for a := 0; a < s.n(); a++ {
		for b := 0; b < s.n(); b++ {
			if a != b && (all || a == i || b == i) {
				s.r.c.PeerLink(a, b).Delay(d, j)
			}
		}
		if all || a == i {
			s.r.c.ClientProxy(a).Delay(d, j)
		}
	}
	sleep(h)
	s.r.c.Heal()
}

func (s *scheduler) drop() {
	i := s.rng.IntN(s.n())
	s.r.logf("fault: drop every connection of member %d", i)
	s.r.fault("drop")
	for _, j := range s.others(i) {
		s.r.c.PeerLink(i, j).DropConnections()
		s.r.c.PeerLink(j, i).DropConnections()
	}
	s.r.c.ClientProxy(i).DropConnections()
}

func (s *scheduler) clientBlackhole() {
	i := s.rng.IntN(s.n())
	h := s.hold()
	s.r.logf("fault: blackhole member %d's client link for %v", i, h)
	s.r.fault("clientblackhole")
	s.r.c.ClientProxy(i).Blackhole()
	sleep(h)
	s.r.c.Heal()
}

// failpointCrash restarts a member with a storage failpoint armed to exit
// on its Nth hit, lets the load drive it there, then restarts it without.
func (s *scheduler) failpointCrash() {
	i := s.target()
	name := crashFailpoints[s.rng.IntN(len(crashFailpoints))]
	hit := 1 + s.rng.IntN(20)
	s.r.logf("fault: member %d restarted with %s=%d*exit", i, name, hit)
	if !s.r.c.Running(i) {
		return
	}
	s.r.fault("failpoint")
	s.r.c.Kill(i)
	s.restart(i, []string{fmt.Sprintf("TENURE_FAILPOINTS=%s=%d*exit", name, hit)})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	code, err := s.r.c.WaitExit(ctx, i)
	cancel()
	switch {
	case err != nil:
		s.r.logf("failpoint %s not reached on member %d within 8s; killing it", name, i)
		s.r.fault("failpoint-not-hit")
		if s.r.c.Running(i) {
			s.r.c.Kill(i)
		}
	case code == failpoint.ExitCode:
		s.r.logf("member %d crashed at %s", i, name)
	default:
		s.r.anomaly("member %d armed with %s exited with code %d (not the failpoint's %d)", i, name, code, failpoint.ExitCode)
	}
	s.restart(i, nil)
	rctx, rcancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer rcancel()
	if err := s.r.c.WaitMemberReady(rctx, i); err != nil {
		s.r.anomaly("member %d did not serve again after a crash at %s: %v", i, name, err)
	}
}

// replace removes member i from the cluster (MemberRemove while it runs;
// for the leader, Tenure hands leadership over first), kills what is left
// of the process, adds a new member at the same peer URL (MemberAdd) and
// starts it with a fresh data dir and --initial-cluster-state existing: it
// must catch up (snapshot + log) and serve. Requests go through the other
// members.
func (s *scheduler) replace() {
	i := s.target()
	c := s.r.c
	if !c.Running(i) {
		return
	}
	var eps []string
	for _, j := range s.others(i) {
		eps = append(eps, c.Endpoint(j))
	}
	cli := c.NewClient(eps...)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := s.memberID(ctx, cli, i)
	if err != nil || id == 0 {
		s.r.logf("fault: replace member %d: member list: id %x, %v (skipped)", i, id, err)
		return
	}
	lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
	l, _ := c.Leader(lctx)
	lcancel()
	s.r.logf("fault: replace member %d (id %x, the leader: %v): member remove, member add, fresh data dir", i, id, l == i)
	s.r.fault("replace")
	// The strict reconfiguration check (on by default, in etcd as in
	// Tenure) refuses removing a running member as "unhealthy cluster"
	// until this member's streams to its peers have been up 5 s, as after
	// a restart fault: retry that answer, as an operator would.
	for {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = cli.MemberRemove(rctx, id)
		rcancel()
		if err == nil || !errors.Is(err, rpctypes.ErrUnhealthy) || ctx.Err() != nil {
			break
		}
		sleep(200 * time.Millisecond)
	}
	if err != nil {
		// unknown outcome: the member list says
		if still, lerr := s.memberID(ctx, cli, i); lerr == nil && still == id {
			// every member served before this fault and nothing else is
			// injected: a membership change must go through
			s.r.anomaly("replace: member remove of member %d (%x) on a healthy cluster failed: %v, and it is still a member", i, id, err)
			return
		}
		s.r.logf("replace: member remove of %x: %v (it is gone anyway)", id, err)
	}
	if c.KillIfRunning(i) {
		s.r.logf("replace: removed member %d exited by itself with code %d", i, c.ExitCode(i))
	}
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cli.MemberAdd(actx, []string{c.PeerURL(i)})
		acancel()
		if err == nil {
			s.r.logf("replace: member %d added again as %x", i, resp.Member.ID)
			break
		}
		if nid, lerr := s.memberID(ctx, cli, i); lerr == nil && nid != 0 {
			s.r.logf("replace: member add: %v, but %x is in the member list", err, nid)
			break
		}
		if ctx.Err() != nil {
			s.r.anomaly("replace: member add of %s never succeeded on the remaining %d-member cluster: %v", c.PeerURL(i), s.n()-1, err)
			return
		}
		sleep(200 * time.Millisecond)
	}
	c.Replace(i)
	s.r.fault("restart")
	if err := c.WaitMemberReady(ctx, i); err != nil {
		s.r.anomaly("replace: the new member %d did not serve within 60s of joining: %v", i, err)
	}
	s.r.logMembers()
}

// memberID is the ID of the member at member i's peer URL (0 and no error:
// not a member).
func (s *scheduler) memberID(ctx context.Context, cli *clientv3.Client, i int) (uint64, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ml, err := cli.MemberList(lctx)
	if err != nil {
		return 0, err
	}
	for _, m := range ml.Members {
		for _, u := range m.PeerURLs {
			if u == s.r.c.PeerURL(i) {
				return m.ID, nil
			}
		}
	}
	return 0, nil
}

// healAll lifts every network fault and resumes any paused member.
func (s *scheduler) healAll() {
	s.r.c.Heal()
}

// sleep lets time pass for a fault's duration (a schedule step, not
// synchronisation).
func sleep(d time.Duration) {
	t := time.NewTimer(d)
	<-t.C
}
