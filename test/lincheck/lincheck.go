// Package lincheck records concurrent client operations against a
// key-value register and checks them for linearizability with porcupine.
//
// The model is a register per key (history partitioned by key) supporting
// Put, Get and CAS (a txn comparing the value and putting on success).
// Operations whose outcome is unknown (an error or timeout on a write) are
// recorded as possibly applied: their return time is the end of the
// history, so the checker may place them anywhere after their call,
// including "never" (after every other operation), as Jepsen and etcd's
// robustness tests do. Failed reads are dropped: they have no effect.
package lincheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// OpKind is an operation type.
type OpKind string

const (
	OpPut OpKind = "put"
	OpGet OpKind = "get"
	OpCAS OpKind = "cas" // if value == Expect (Expect "" = absent) then put Value
)

// Input is an operation's request.
type Input struct {
	Kind   OpKind `json:"kind"`
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`  // put/cas: new value
	Expect string `json:"expect,omitempty"` // cas: expected current value ("" = absent)
}

// Output is an operation's result.
type Output struct {
	Unknown   bool   `json:"unknown,omitempty"`   // error/timeout: may or may not have taken effect
	Value     string `json:"value,omitempty"`     // get: value read ("" = absent)
	Succeeded bool   `json:"succeeded,omitempty"` // cas: the comparison held
}

// Model is the porcupine model of a per-key register with put, get and CAS.
// The state of a partition is the key's current value ("" = absent).
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return "" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		st, in, out := state.(string), input.(Input), output.(Output)
		switch in.Kind {
		case OpPut:
			return true, in.Value
		case OpGet:
			return out.Value == st, st
		case OpCAS:
			holds := st == in.Expect
			if out.Unknown {
				if holds {
					return true, in.Value
				}
				return true, st
			}
			if out.Succeeded != holds {
				return false, st
			}
			if holds {
				return true, in.Value
			}
			return true, st
		}
		return false, st
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(Input), output.(Output)
		res := ""
		switch in.Kind {
		case OpPut:
			res = fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
		case OpGet:
			res = fmt.Sprintf("get(%s) -> %q", in.Key, out.Value)
		case OpCAS:
			res = fmt.Sprintf("cas(%s, %q -> %q) -> %v", in.Key, in.Expect, in.Value, out.Succeeded)
		}
		if out.Unknown {
			res += " [unknown]"
		}
		return res
	},
	DescribeState: func(state interface{}) string { return fmt.Sprintf("%q", state.(string)) },
}

// Recorder collects a concurrent history. Safe for concurrent use.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// NewRecorder starts a history; times are monotonic nanoseconds since now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the current monotonic timestamp; take it just before sending a request.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Record logs a completed operation with its call time (from Now, taken
// before the request) and the return time taken now.
func (r *Recorder) Record(client int, in Input, call int64, out Output) {
	ret := r.Now()
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	r.mu.Unlock()
}

// RecordUnknown logs an operation whose outcome is unknown (error or
// timeout). Writes are kept as possibly applied, returning at the end of
// the history; reads are dropped.
func (r *Recorder) RecordUnknown(client int, in Input, call int64) {
	if in.Kind == OpGet {
		return
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: Output{Unknown: true}, Return: -1})
	r.mu.Unlock()
}

// Len is the number of recorded operations.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// History returns the recorded operations; unknown-outcome operations
// return after every other event.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var end int64
	for _, op := range r.ops {
		end = max(end, op.Call, op.Return)
	}
	out := append([]porcupine.Operation(nil), r.ops...)
	for i := range out {
		if out[i].Return < 0 {
			out[i].Return = end + 1
		}
	}
	return out
}

// Result of a check.
type Result struct {
	Verdict porcupine.CheckResult
	Dir     string // where the history and visualization were saved (when not Ok)
}

// Check checks history against Model. When it is not linearizable (or the
// check timed out) it saves history.json and the porcupine visualization
// (visualization.html) under $TENURE_TEST_ARTIFACTS (default: a new temp
// directory that is kept) and returns the directory.
func Check(history []porcupine.Operation, timeout time.Duration) (Result, error) {
	verdict, info := porcupine.CheckOperationsVerbose(Model, history, timeout)
	res := Result{Verdict: verdict}
	if verdict == porcupine.Ok {
		return res, nil
	}
	base := os.Getenv("TENURE_TEST_ARTIFACTS")
	if base != "" {
		if err := os.MkdirAll(base, 0o755); err != nil {
			return res, err
		}
	}
	dir, err := os.MkdirTemp(base, "lincheck-")
	if err != nil {
		return res, err
	}
	res.Dir = dir
	type rec struct {
		Client int    `json:"client"`
		Input  Input  `json:"input"`
		Output Output `json:"output"`
		Call   int64  `json:"call"`
		Return int64  `json:"return"`
	}
	recs := make([]rec, len(history))
	for i, op := range history {
		recs[i] = rec{op.ClientId, op.Input.(Input), op.Output.(Output), op.Call, op.Return}
	}
	b, _ := json.MarshalIndent(recs, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return res, err
	}
	return res, porcupine.VisualizePath(Model, info, filepath.Join(dir, "visualization.html"))
}

// CheckT runs Check and fails t unless the history is linearizable,
// printing where the visualization was saved.
func CheckT(t testing.TB, history []porcupine.Operation, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := Check(history, timeout)
	t.Logf("linearizability check of %d operations: %s in %v", len(history), res.Verdict, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Errorf("saving linearizability artifacts: %v", err)
	}
	switch res.Verdict {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Errorf("history is NOT linearizable; visualization: %s (history: %s)",
			filepath.Join(res.Dir, "visualization.html"), filepath.Join(res.Dir, "history.json"))
	default:
		t.Errorf("linearizability check inconclusive (%s) after %v; visualization: %s",
			res.Verdict, timeout, filepath.Join(res.Dir, "visualization.html"))
	}
}
