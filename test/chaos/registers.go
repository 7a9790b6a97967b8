package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tenure-io/tenure/test/lincheck"
)

// registers: put/get/CAS over a few keys, checked for linearizability with
// porcupine (test/lincheck). Errors and timeouts on writes are recorded as
// possibly applied. The key set changes every epoch so that each porcupine
// partition stays small enough to check however long the run is.
type registers struct {
	r       *run
	seed    uint64
	clients int
	rec     *lincheck.Recorder
	// committed returns the (key, value) pairs the committed history wrote
	// (nil: unknown); set by Run.
	committed func() map[[2]string]bool
}

const registerEpoch = 15 * time.Second

func newRegisters(r *run, seed uint64) *registers {
	return &registers{r: r, seed: seed, clients: 4, rec: lincheck.NewRecorder()}
}

func (w *registers) run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := 0; id < w.clients; id++ {
		var cli *clientv3.Client
		if id%2 == 0 {
			cli = w.r.c.NewClient(w.r.c.Endpoint(id / 2 % len(w.r.c.Members)))
		} else {
			cli = w.r.c.NewClient(w.r.c.Endpoints()...)
		}
		rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			lastSeen := map[string]string{}
			for n := 0; ctx.Err() == nil; n++ {
				epoch := int(w.r.mono() / registerEpoch)
				key := fmt.Sprintf("/reg/e%04d/k%d", epoch, rng.IntN(3))
				val := fmt.Sprintf("c%d-%d", id, n)
				var in lincheck.Input
				switch p := rng.IntN(10); {
				case p < 4:
					in = lincheck.Input{Kind: lincheck.OpPut, Key: key, Value: val}
				case p < 7:
					in = lincheck.Input{Kind: lincheck.OpGet, Key: key}
				default:
					in = lincheck.Input{Kind: lincheck.OpCAS, Key: key, Expect: lastSeen[key], Value: val}
				}
				opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
				call := w.rec.Now()
				out, err := lincheck.Run(opCtx, cli, in)
				if err == nil && in.Kind == lincheck.OpGet {
					lastSeen[key] = out.Value
				}
				cancel()
				if ctx.Err() != nil && err != nil {
					// stopped mid-request: still possibly applied
					w.rec.RecordUnknown(id, in, call)
					return
				}
				w.r.op()
				if err != nil {
					w.rec.RecordUnknown(id, in, call)
				} else {
					w.rec.Record(id, in, call, out)
				}
			}
		}()
	}
	wg.Wait()
}

func (w *registers) check(ctx context.Context) {
	h := w.rec.History()
	// lincheck.Check saves its own artifacts under TENURE_TEST_ARTIFACTS.
	if w.r.cfg.Artifacts != "" {
		os.Setenv("TENURE_TEST_ARTIFACTS", w.r.cfg.Artifacts)
	}
	unknown := 0
	for _, op := range h {
		if op.Output.(lincheck.Output).Unknown {
			unknown++
		}
	}
	var dropped, applied int
	if w.committed != nil {
		if c := w.committed(); c != nil {
			h, dropped, applied = resolveUnknown(h, c)
		}
	}
	start := time.Now()
	res, err := lincheck.Check(h, w.r.cfg.LinTimeout)
	w.r.logf("registers: %d operations (%d of unknown outcome: %d never committed, dropped; %d committed), porcupine %s in %v",
		len(h), unknown, dropped, applied, res.Verdict, time.Since(start).Round(time.Millisecond))
	if err != nil {
		w.r.logf("registers: saving porcupine artifacts: %v", err)
	}
	switch res.Verdict {
	case porcupine.Ok:
	case porcupine.Illegal:
		w.r.anomaly("registers: history of %d operations is NOT linearizable (porcupine visualization in %s)", len(h), res.Dir)
		w.saveHistory(h)
	default:
		// An inconclusive check is not a found bug; it is reported so the
		// run can be repeated with a longer --lin-timeout.
		w.r.logf("registers: linearizability check inconclusive after %v (%s)", w.r.cfg.LinTimeout, res.Dir)
		w.r.fault("lincheck-inconclusive")
	}
}

// resolveUnknown settles the writes of unknown outcome (timeouts, errors)
// with the committed history, read back with a watch from revision 1 and
// verified by the watches check: every written value is unique, so a put or
// CAS whose (key, value) the history never wrote had no effect and is
// dropped, and one it did write took effect (a CAS succeeded). Its return
// time stays unknown (after every other operation). Without this, each
// unknown write is a pending operation porcupine must try at every later
// point, and a fault-heavy run's check does not finish.
func resolveUnknown(h []porcupine.Operation, committed map[[2]string]bool) (out []porcupine.Operation, dropped, applied int) {
	out = make([]porcupine.Operation, 0, len(h))
	for _, op := range h {
		in, o := op.Input.(lincheck.Input), op.Output.(lincheck.Output)
		if o.Unknown && in.Kind != lincheck.OpGet {
			if !committed[[2]string{in.Key, in.Value}] {
				dropped++
				continue
			}
			applied++
			op.Output = lincheck.Output{Succeeded: true}
		}
		out = append(out, op)
	}
	return out, dropped, applied
}

func (w *registers) saveHistory(h []porcupine.Operation) {
	type rec struct {
		Client int             `json:"client"`
		Input  lincheck.Input  `json:"input"`
		Output lincheck.Output `json:"output"`
		Call   int64           `json:"call"`
		Return int64           `json:"return"`
	}
	recs := make([]rec, len(h))
	for i, op := range h {
		recs[i] = rec{op.ClientId, op.Input.(lincheck.Input), op.Output.(lincheck.Output), op.Call, op.Return}
	}
	b, _ := json.MarshalIndent(recs, "", " ")
	w.r.save("registers-history.json", b)
}

// counter: clients increment /counter by CAS on its value (read, then
// txn if value == read then put read+1). With S acknowledged increments and
// U increments of unknown outcome, the final value F must satisfy
// S <= F <= S+U on every member, and the key's version must equal F (each
// increment is one put): an entry applied twice (etcd 13766) shows up as
// F > S+U or as members disagreeing.
type counter struct {
	r        *run
	mu       sync.Mutex
	acked    int64
	unknown  int64
	key      string
	nclients int
}

func newCounter(r *run, _ uint64) *counter {
	return &counter{r: r, key: "/counter/main", nclients: 2}
}

func (w *counter) run(ctx context.Context) {
	var wg sync.WaitGroup
	for id := 0; id < w.nclients; id++ {
		cli := w.r.c.NewClient(w.r.c.Endpoints()...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				w.incr(ctx, cli)
			}
		}()
	}
	wg.Wait()
}

// incr does one CAS increment; returns whether it was acknowledged.
func (w *counter) incr(ctx context.Context, cli *clientv3.Client) {
	opCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.Get(opCtx, w.key)
	w.r.op()
	if err != nil {
		return
	}
	cur := int64(0)
	cmp := clientv3.Compare(clientv3.CreateRevision(w.key), "=", 0)
	if len(resp.Kvs) > 0 {
		cur, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
		cmp = clientv3.Compare(clientv3.Value(w.key), "=", string(resp.Kvs[0].Value))
	}
	tr, err := cli.Txn(opCtx).If(cmp).Then(clientv3.OpPut(w.key, strconv.FormatInt(cur+1, 10))).Commit()
	w.r.op()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil:
		w.unknown++
	case tr.Succeeded:
		w.acked++
	}
}

func (w *counter) check(ctx context.Context) {
	checkCounter(ctx, w.r, "counter", w.key, w.acked, w.unknown)
}

// checkCounter reads key on every member (serializable, once the member has
// caught up with a linearizable read) and checks acked <= value <= acked+unknown
// and version == value.
func checkCounter(ctx context.Context, r *run, name, key string, acked, unknown int64) {
	lin, err := r.c.ClientAll().Get(ctx, key)
	if err != nil {
		r.anomaly("%s: final linearizable read failed on a healed cluster: %v", name, err)
		return
	}
	rev := lin.Header.Revision
	for i := range r.c.Members {
		resp, err := waitSerializable(ctx, r, i, key, rev)
		if err != nil {
			r.anomaly("%s: member %d did not catch up to revision %d: %v", name, i, rev, err)
			continue
		}
		var v, ver int64
		if len(resp.Kvs) > 0 {
			v, _ = strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
			ver = resp.Kvs[0].Version
		}
		if v < acked || v > acked+unknown {
			r.anomaly("%s: member %d has %s=%d, want %d acknowledged <= value <= %d (+%d unknown): an increment was lost or applied twice", name, i, key, v, acked, acked+unknown, unknown)
		}
		if ver != v {
			r.anomaly("%s: member %d has %s=%d at version %d: every increment is one put, so they must be equal", name, i, key, v, ver)
		}
	}
	r.logf("%s: %d acknowledged increments, %d unknown, final value in bounds on every member", name, acked, unknown)
}

// waitSerializable reads key from member i's own store at revision rev,
// retrying until the member has applied rev.
func waitSerializable(ctx context.Context, r *run, i int, key string, rev int64, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	deadline := time.Now().Add(20 * time.Second)
	opts = append([]clientv3.OpOption{clientv3.WithSerializable(), clientv3.WithRev(rev)}, opts...)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := r.c.Client(i).Get(actx, key, opts...)
		cancel()
		if err == nil {
			return resp, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, err
		}
		sleep(50 * time.Millisecond)
	}
}
