package lincheck

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(client int, in Input, call, ret int64, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func put(k, v string) Input      { return Input{Kind: OpPut, Key: k, Value: v} }
func get(k string) Input         { return Input{Kind: OpGet, Key: k} }
func cas(k, exp, v string) Input { return Input{Kind: OpCAS, Key: k, Expect: exp, Value: v} }
func val(v string) Output        { return Output{Value: v} }
func casOut(ok bool) Output      { return Output{Succeeded: ok} }
func unknown() Output            { return Output{Unknown: true} }

func TestModel(t *testing.T) {
	const inf = 1000
	tests := []struct {
		name string
		ok   bool
		h    []porcupine.Operation
	}{
		{"sequential put get", true, []porcupine.Operation{
			op(0, put("x", "1"), 0, 10, Output{}),
			op(1, get("x"), 20, 30, val("1")),
		}},
		{"stale read after put returned", false, []porcupine.Operation{
			op(0, put("x", "1"), 0, 10, Output{}),
			op(1, get("x"), 20, 30, val("")),
		}},
		{"concurrent read may see old or new", true, []porcupine.Operation{
			op(0, put("x", "1"), 0, 100, Output{}),
			op(1, get("x"), 10, 20, val("")),
			op(2, get("x"), 30, 40, val("1")),
		}},
		{"read goes back in time", false, []porcupine.Operation{
			op(0, put("x", "1"), 0, 100, Output{}),
			op(1, get("x"), 10, 20, val("1")),
			op(2, get("x"), 30, 40, val("")),
		}},
		{"cas success and failure", true, []porcupine.Operation{
			op(0, put("x", "a"), 0, 10, Output{}),
			op(1, cas("x", "a", "b"), 20, 30, casOut(true)),
			op(2, cas("x", "a", "c"), 40, 50, casOut(false)),
			op(0, get("x"), 60, 70, val("b")),
		}},
		{"two concurrent cas both succeed", false, []porcupine.Operation{
			op(0, put("x", "a"), 0, 10, Output{}),
			op(1, cas("x", "a", "b"), 20, 30, casOut(true)),
			op(2, cas("x", "a", "c"), 20, 30, casOut(true)),
		}},
		{"cas on absent key", true, []porcupine.Operation{
			op(0, cas("x", "", "1"), 0, 10, casOut(true)),
			op(1, get("x"), 20, 30, val("1")),
		}},
		{"unknown put may have applied", true, []porcupine.Operation{
			op(0, put("x", "1"), 0, inf, unknown()),
			op(1, get("x"), 20, 30, val("1")),
			op(1, get("x"), 40, 50, val("1")),
		}},
		{"unknown put may not have applied", true, []porcupine.Operation{
			op(0, put("x", "1"), 0, inf, unknown()),
			op(1, get("x"), 20, 30, val("")),
		}},
		{"unknown put cannot un-apply", false, []porcupine.Operation{
			op(0, put("x", "1"), 0, inf, unknown()),
			op(1, get("x"), 20, 30, val("1")),
			op(1, get("x"), 40, 50, val("")),
		}},
		{"unknown cas applies only if it held", false, []porcupine.Operation{
			op(0, put("x", "a"), 0, 10, Output{}),
			op(1, cas("x", "z", "b"), 20, inf, unknown()),
			op(2, get("x"), 30, 40, val("b")),
		}},
		{"keys are independent", true, []porcupine.Operation{
			op(0, put("x", "1"), 0, 10, Output{}),
			op(1, put("y", "2"), 0, 10, Output{}),
			op(2, get("y"), 20, 30, val("2")),
			op(2, get("x"), 40, 50, val("1")),
		}},
		{"wrong value on one key", false, []porcupine.Operation{
			op(0, put("x", "1"), 0, 10, Output{}),
			op(1, put("y", "2"), 0, 10, Output{}),
			op(2, get("x"), 20, 30, val("2")),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model, tt.h); got != tt.ok {
				t.Fatalf("linearizable = %v, want %v", got, tt.ok)
			}
		})
	}
}

func TestRecorderAndCheck(t *testing.T) {
	r := NewRecorder()
	c := r.Now()
	r.Record(0, put("x", "1"), c, Output{})
	c = r.Now()
	r.RecordUnknown(1, put("x", "2"), c)
	r.RecordUnknown(1, get("x"), r.Now()) // dropped
	c = r.Now()
	r.Record(2, get("x"), c, val("1"))
	h := r.History()
	if len(h) != 3 {
		t.Fatalf("history has %d ops, want 3", len(h))
	}
	for _, o := range h {
		if o.Output.(Output).Unknown {
			for _, p := range h {
				if p.Return > o.Return || p.Call > o.Return {
					t.Fatalf("unknown op does not return at the end of history: %+v", h)
				}
			}
		}
	}
	if res, err := Check(h, 10*time.Second); err != nil || res.Verdict != porcupine.Ok {
		t.Fatalf("check: %v %v", res, err)
	}

	// A violation saves the history and the visualization.
	t.Setenv("TENURE_TEST_ARTIFACTS", t.TempDir())
	bad := append(h, op(3, get("x"), h[len(h)-1].Return+10, h[len(h)-1].Return+20, val("9")))
	res, err := Check(bad, 10*time.Second)
	if err != nil || res.Verdict != porcupine.Illegal {
		t.Fatalf("check of a violation: %v %v", res, err)
	}
	for _, f := range []string{"history.json", "visualization.html"} {
		if _, err := os.Stat(filepath.Join(res.Dir, f)); err != nil {
			t.Errorf("artifact %s: %v", f, err)
		}
	}
}
