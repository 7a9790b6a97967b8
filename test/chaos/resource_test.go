package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

// TestResourceProcess starts the fenced resource as the harness does (this
// test binary re-executed with TENURE_CHAOS_ROLE=resource) and checks its
// rule: an increment is accepted iff its token is at least the highest
// seen, and the state it reports is what it decided.
func TestResourceProcess(t *testing.T) {
	r := &run{tb: t}
	c, err := r.startChild("resource", roleResource, filepath.Join(t.TempDir(), "resource.log"))
	if err != nil {
		t.Fatal(err)
	}
	var first struct{ Addr string }
	select {
	case line := <-c.lines:
		if err := json.Unmarshal([]byte(line), &first); err != nil || first.Addr == "" {
			t.Fatalf("first line %q: %v", line, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no address within 30s")
	}
	rc := newResourceClient(first.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []struct {
		client int
		token  int64
		want   bool
	}{
		{0, 5, true}, {1, 3, false}, {0, 5, true}, {2, 9, true}, {0, 5, false}, {1, 9, true}, {3, 12, true}, {2, 11, false},
	}
	wantCount := 0
	for i, s := range steps {
		res, err := rc.increment(ctx, s.client, i, s.token)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Accepted != s.want || res.Seq != int64(i+1) {
			t.Fatalf("step %d (client %d token %d): accepted %v seq %d, want %v seq %d", i, s.client, s.token, res.Accepted, res.Seq, s.want, i+1)
		}
		if s.want {
			wantCount++
		}
	}
	if _, err := rc.increment(ctx, 0, 99, 0); err == nil {
		t.Fatal("token 0 accepted as a request")
	}
	st, err := rc.state(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Count != wantCount || len(st.Accepted) != wantCount || len(st.Rejected) != len(steps)-wantCount || st.Highest != 12 {
		t.Fatalf("state: count %d, %d accepted, %d rejected, highest %d; want %d, %d, %d, 12", st.Count, len(st.Accepted), len(st.Rejected), st.Highest, wantCount, wantCount, len(steps)-wantCount)
	}
	for _, e := range st.Rejected {
		if e.Client == 1 && e.N == 1 && e.Token != 3 {
			t.Fatalf("rejected effect %+v", e)
		}
	}
	c.closeStdin()
	if !c.wait(10 * time.Second) {
		t.Fatal("the resource did not exit 10s after its stdin closed")
	}
	if code, _ := c.exitCode(); code != 0 {
		t.Fatalf("the resource exited with %d", code)
	}
}
