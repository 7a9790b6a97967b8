package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watches: watchers over every key the workloads write ("/"), checked
// against the committed history read back at the end with a fresh watch
// from revision 1 (itself cross-checked against a full Get):
//
//   - ordered: revisions never decrease; within a revision, events come in
//     the committed order;
//   - unique: no event is delivered twice (also across resumptions);
//   - reliable: no gap — from its start to its last event, a watcher
//     receives exactly the committed events;
//   - atomic: all events of a revision arrive in one response;
//   - resumable: each watcher is restarted from last+1 at random times
//     (and clientv3 resumes it on its own after dropped connections); the
//     three checks above span the restarts;
//   - bookmarkable: progress notifications (WithProgressNotify and
//     RequestProgress) never go backwards, are never behind an event
//     already delivered, and no later event is at or below them.
type watches struct {
	r     *run
	seed  uint64
	ws    []*watcher
	ref   []wevent // the committed history, once check has read it
	refOK bool
}

// committedPuts is the set of (key, value) written by the committed history
// of "/" (nil if check could not read it back).
func (w *watches) committedPuts() map[[2]string]bool {
	if !w.refOK {
		return nil
	}
	m := map[[2]string]bool{}
	for _, e := range w.ref {
		if e.Type == "PUT" {
			m[[2]string{e.Key, e.Value}] = true
		}
	}
	return m
}

type wevent struct {
	Rev     int64  `json:"rev"`
	Key     string `json:"key"`
	Type    string `json:"type"`
	Value   string `json:"value,omitempty"`
	ModRev  int64  `json:"mod"`
	Version int64  `json:"ver"`
	Resp    int    `json:"resp"` // index of the response that carried it
}

// wresp is one response (or the start of a watch call) as a watcher saw it,
// for the saved history.
type wresp struct {
	At       time.Duration `json:"at"`
	Resp     int           `json:"resp"`           // -1: a watch call started
	From     int64         `json:"from,omitempty"` // start revision of a new call
	Header   int64         `json:"hdr,omitempty"`
	Member   uint64        `json:"member,omitempty"`
	Progress bool          `json:"progress,omitempty"`
	N        int           `json:"n,omitempty"`
	First    int64         `json:"first,omitempty"`
	Last     int64         `json:"last,omitempty"`
}

type watcher struct {
	id        int
	start     int64
	mu        sync.Mutex
	log       []wresp
	events    []wevent
	progress  []int64
	resps     int
	restarts  int
	lastEvent int64
	lastProg  int64
}

func newWatches(r *run, seed uint64) *watches { return &watches{r: r, seed: seed} }

func (w *watches) run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := 0; id < 2; id++ {
		var cli *clientv3.Client
		if id == 0 {
			cli = w.r.c.NewClient(w.r.c.Endpoints()...)
		} else {
			cli = w.r.c.NewClient(w.r.c.Endpoint(1 % len(w.r.c.Members)))
		}
		start := int64(1)
		if id == 1 {
			// from "now": a revision read first
			for ctx.Err() == nil {
				gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := cli.Get(gctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				cancel()
				if err == nil {
					start = resp.Header.Revision + 1
					break
				}
			}
		}
		wt := &watcher{id: id, start: start}
		w.ws = append(w.ws, wt)
		rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.watch(ctx, cli, wt, rng)
		}()
	}
	wg.Wait()
}

func (w *watches) watch(ctx context.Context, cli *clientv3.Client, wt *watcher, rng *rand.Rand) {
	from := wt.start
	for ctx.Err() == nil {
		wctx, wcancel := context.WithCancel(ctx)
		if wt.id == 1 {
			wctx = clientv3.WithRequireLeader(wctx)
		}
		wt.mu.Lock()
		wt.log = append(wt.log, wresp{At: w.r.mono(), Resp: -1, From: from})
		wt.mu.Unlock()
		wch := cli.Watch(wctx, "/", clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
		restart := time.NewTimer(time.Duration(2000+rng.IntN(8000)) * time.Millisecond)
		tick := time.NewTicker(700 * time.Millisecond)
	loop:
		for {
			select {
			case resp, ok := <-wch:
				if !ok {
					break loop
				}
				if err := resp.Err(); err != nil {
					if resp.CompactRevision > 0 {
						w.r.anomaly("watch %d: compacted at %d while resuming from %d (nothing compacts during the fault phase)", wt.id, resp.CompactRevision, from)
					}
					break loop
				}
				w.r.op()
				if next := w.record(wt, resp); next > from {
					from = next
				}
			case <-restart.C:
				break loop
			case <-tick.C:
				pctx, cancel := context.WithTimeout(wctx, time.Second)
				cli.RequestProgress(pctx)
				cancel()
			}
		}
		wcancel()
		restart.Stop()
		tick.Stop()
		// drain so that the client frees the watcher
		for range wch {
		}
		wt.mu.Lock()
		wt.restarts++
		wt.mu.Unlock()
	}
}

// record stores a response and applies the online bookmark checks; returns
// the revision to resume from.
func (w *watches) record(wt *watcher, resp clientv3.WatchResponse) int64 {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	idx := wt.resps
	wt.resps++
	lr := wresp{At: w.r.mono(), Resp: idx, Header: resp.Header.Revision, Member: resp.Header.MemberId, Progress: resp.IsProgressNotify(), N: len(resp.Events)}
	if n := len(resp.Events); n > 0 {
		lr.First, lr.Last = resp.Events[0].Kv.ModRevision, resp.Events[n-1].Kv.ModRevision
	}
	wt.log = append(wt.log, lr)
	if resp.IsProgressNotify() {
		p := resp.Header.Revision
		if p < wt.lastProg {
			w.r.anomaly("watch %d: progress notification went backwards: %d after %d", wt.id, p, wt.lastProg)
		}
		if p < wt.lastEvent {
			w.r.anomaly("watch %d: progress notification at %d after an event at %d was delivered", wt.id, p, wt.lastEvent)
		}
		wt.lastProg = max(wt.lastProg, p)
		wt.progress = append(wt.progress, p)
		return max(wt.lastEvent, p) + 1
	}
	for _, e := range resp.Events {
		ev := toEvent(e)
		ev.Resp = idx
		if ev.Rev <= wt.lastProg {
			w.r.anomaly("watch %d: event at revision %d (%s) delivered after a progress notification at %d", wt.id, ev.Rev, ev.Key, wt.lastProg)
		}
		wt.events = append(wt.events, ev)
		wt.lastEvent = max(wt.lastEvent, ev.Rev)
	}
	return wt.lastEvent + 1
}

func toEvent(e *clientv3.Event) wevent {
	ev := wevent{Rev: e.Kv.ModRevision, Key: string(e.Kv.Key), Type: "PUT", ModRev: e.Kv.ModRevision, Version: e.Kv.Version, Value: string(e.Kv.Value)}
	if e.Type == mvccpb.DELETE {
		ev.Type = "DELETE"
		ev.Value = ""
	}
	return ev
}

func (e wevent) same(o wevent) bool {
	return e.Rev == o.Rev && e.Key == o.Key && e.Type == o.Type && e.Value == o.Value && e.ModRev == o.ModRev
}

func (w *watches) check(ctx context.Context) {
	ref, final, err := w.reference(ctx)
	if err != nil {
		w.r.anomaly("watches: reading the committed history back: %v", err)
		return
	}
	w.ref, w.refOK = ref, true
	byRev := map[int64][]wevent{}
	for _, e := range ref {
		byRev[e.Rev] = append(byRev[e.Rev], e)
	}
	b, _ := json.Marshal(ref)
	w.r.save("watch-reference.json", b)
	for _, wt := range w.ws {
		b, _ := json.Marshal(wt.events)
		w.r.save(fmt.Sprintf("watch-%d.json", wt.id), b)
		b, _ = json.Marshal(wt.log)
		w.r.save(fmt.Sprintf("watch-%d-responses.json", wt.id), b)
		w.checkWatcher(wt, ref, byRev)
	}
	w.r.logf("watches: reference has %d events up to revision %d; watchers: %s", len(ref), final, w.describe())
}

func (w *watches) describe() string {
	s := ""
	for _, wt := range w.ws {
		s += fmt.Sprintf("[%d: from %d, %d events, %d progress, %d restarts] ", wt.id, wt.start, len(wt.events), len(wt.progress), wt.restarts)
	}
	return s
}

func (w *watches) checkWatcher(wt *watcher, ref []wevent, byRev map[int64][]wevent) {
	bad := 0
	report := func(format string, args ...any) {
		if bad < 5 {
			w.r.anomaly(fmt.Sprintf("watch %d (from %d): ", wt.id, wt.start)+format, args...)
		}
		bad++
	}
	// ordered + unique
	seen := map[[2]string]bool{}
	var prev int64
	for _, e := range wt.events {
		if e.Rev < prev {
			report("unordered: revision %d after %d", e.Rev, prev)
		}
		prev = e.Rev
		k := [2]string{fmt.Sprint(e.Rev), e.Key}
		if seen[k] {
			report("duplicate event %s at revision %d", e.Key, e.Rev)
		}
		seen[k] = true
	}
	// atomic: every revision's events in one response, all of them
	perResp := map[[2]int64]int{}
	for _, e := range wt.events {
		perResp[[2]int64{int64(e.Resp), e.Rev}]++
	}
	respOf := map[int64]int{}
	for k, n := range perResp {
		rev, resp := k[1], int(k[0])
		if r0, ok := respOf[rev]; ok && r0 != resp {
			report("revision %d split across responses %d and %d", rev, r0, resp)
		}
		respOf[rev] = resp
		if want := len(byRev[rev]); n != want && want > 0 {
			report("response %d carries %d of revision %d's %d events", resp, n, rev, want)
		}
	}
	// reliable: exactly the committed events in [start, last]
	if len(wt.events) == 0 {
		return
	}
	last := wt.events[len(wt.events)-1].Rev
	var want []wevent
	for _, e := range ref {
		if e.Rev >= wt.start && e.Rev <= last {
			want = append(want, e)
		}
	}
	i, j := 0, 0
	for i < len(want) || j < len(wt.events) {
		switch {
		case i < len(want) && j < len(wt.events) && want[i].same(wt.events[j]):
			i++
			j++
		case i < len(want) && (j >= len(wt.events) || want[i].Rev <= wt.events[j].Rev):
			report("missed event %s %s at revision %d", want[i].Type, want[i].Key, want[i].Rev)
			i++
		default:
			report("event %s %s at revision %d (value %q) is not in the committed history", wt.events[j].Type, wt.events[j].Key, wt.events[j].Rev, wt.events[j].Value)
			j++
		}
	}
	if bad > 5 {
		w.r.anomaly("watch %d: %d more watch anomalies not shown", wt.id, bad-5)
	}
}

// reference reads the committed history of "/" from revision 1 with a
// fresh watch on a healed cluster, and checks it against a full Get at the
// final revision.
func (w *watches) reference(ctx context.Context) ([]wevent, int64, error) {
	cli := w.r.c.NewClient(w.r.c.Endpoints()...)
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	state, err := cli.Get(gctx, "/", clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, 0, err
	}
	final := state.Header.Revision
	ref, err := w.history(ctx, cli, final)
	if err != nil {
		return nil, final, err
	}
	w.checkReplay(ref, state)
	// every member serves the same history (watches are served from each
	// member's own store: a member missing or altering a revision in its
	// history would break watchers resumed there)
	for i := range w.r.c.Members {
		h, err := w.history(ctx, w.r.c.Client(i), final)
		if err != nil {
			w.r.anomaly("watches: reading member %d's history: %v", i, err)
			continue
		}
		for j := 0; j < len(ref) || j < len(h); j++ {
			if j >= len(ref) || j >= len(h) || !ref[j].same(h[j]) {
				var a, b wevent
				if j < len(ref) {
					a = ref[j]
				}
				if j < len(h) {
					b = h[j]
				}
				w.r.anomaly("watches: member %d's history differs from the cluster's at event %d: %+v, cluster %+v", i, j, b, a)
				break
			}
		}
	}
	return ref, final, nil
}

// history reads the events of "/" from revision 1 through final with a
// watch through cli.
func (w *watches) history(ctx context.Context, cli *clientv3.Client, final int64) ([]wevent, error) {
	// a long soak's history is long: allow about 2000 revisions a second
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second+time.Duration(final/2000)*time.Second)
	defer wcancel()
	var ref []wevent
	var last int64
	wch := cli.Watch(wctx, "/", clientv3.WithPrefix(), clientv3.WithRev(1), clientv3.WithProgressNotify())
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for last < final {
		select {
		case resp, ok := <-wch:
			if !ok {
				return nil, fmt.Errorf("reference watch ended at revision %d of %d: %v", last, final, wctx.Err())
			}
			if err := resp.Err(); err != nil {
				return nil, fmt.Errorf("reference watch: %v", err)
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= final {
				last = final
			}
			for _, e := range resp.Events {
				ev := toEvent(e)
				if ev.Rev <= final {
					ref = append(ref, ev)
				}
				last = max(last, ev.Rev)
			}
		case <-tick.C:
			cli.RequestProgress(wctx)
		}
	}
	return ref, nil
}

// checkReplay replays the history and compares it with the Get at its end.
func (w *watches) checkReplay(ref []wevent, state *clientv3.GetResponse) {
	final := state.Header.Revision
	// replay and compare with the Get
	type kv struct {
		v        string
		mod, ver int64
	}
	m := map[string]kv{}
	for _, e := range ref {
		if e.Type == "DELETE" {
			delete(m, e.Key)
		} else {
			m[e.Key] = kv{e.Value, e.ModRev, e.Version}
		}
	}
	got := map[string]kv{}
	for _, k := range state.Kvs {
		got[string(k.Key)] = kv{string(k.Value), k.ModRevision, k.Version}
	}
	diff := 0
	for k, v := range got {
		if m[k] != v {
			diff++
			if diff <= 5 {
				w.r.anomaly("watches: key %s at revision %d is %+v, the watch history replays to %+v", k, final, v, m[k])
			}
		}
	}
	for k, v := range m {
		if _, ok := got[k]; !ok {
			diff++
			if diff <= 5 {
				w.r.anomaly("watches: key %s is absent at revision %d, the watch history replays to %+v", k, final, v)
			}
		}
	}
}
