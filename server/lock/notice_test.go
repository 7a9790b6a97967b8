package lock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/tenure-io/tenure/server/mvcc"
)

// The leader's grant hook sees each grant of a key an OpAcquire wrote, with
// the acquiring member and request; a grant it pushes wakes the waiter once,
// and the member's own apply of the same grant later wakes nobody again.
func TestGrantHookAndPushedGrantWakeOnce(t *testing.T) {
	h := newHarness(t)
	var hooked []Note
	h.m.SetGrantHook(func(n Note) { hooked = append(hooked, n) })
	h.grant(0x1, 0x2, 0x3)
	owner, err := h.op(&Op{Kind: OpAcquire, Name: []byte("p"), Lease: 0x1, ReqID: 41, Origin: 7})
	if err != nil || !owner.Granted {
		t.Fatalf("first acquire: %+v %v", owner, err)
	}
	if len(hooked) != 1 || hooked[0].Key != owner.Key || hooked[0].Origin != 7 || hooked[0].ReqID != 41 || hooked[0].Token != owner.Token {
		t.Fatalf("grant hook got %+v, want the grant of %s from member 7, request 41", hooked, owner.Key)
	}
	next, err := h.op(&Op{Kind: OpAcquire, Name: []byte("p"), Lease: 0x2, ReqID: 42, Origin: 9})
	if err != nil || next.Granted {
		t.Fatalf("second acquire: %+v %v", next, err)
	}
	// A plain-KV waiter (clientv3 Mutex) has no origin: nothing to push.
	h.put("p/3", 0x3)
	w := h.m.WaitKey(next.Key)
	defer w.Close()

	// What the leader pushed reaches the waiter before this member applies.
	pushed := Note{Kind: NoteGranted, Lock: "p", Key: next.Key, Token: next.Token, Lease: 0x2, Rev: 99, ReqID: 42}
	got, err := UnmarshalGrantNotice(MarshalGrantNotice(pushed))
	if err != nil || fmt.Sprint(got) != fmt.Sprint(pushed) {
		t.Fatalf("notice round trip: %+v %v, want %+v", got, err, pushed)
	}
	before := h.m.Wakeups()
	if woken := h.m.DeliverGrant(got); woken != 1 {
		t.Fatalf("DeliverGrant woke %d calls, want 1", woken)
	}
	if n, ok := recv(t, w); !ok || n.ReqID != 42 || n.Token != next.Token {
		t.Fatalf("waiter got %+v (%v), want the pushed grant", n, ok)
	}
	if h.m.DeliverGrant(got) != 0 {
		t.Fatal("the same grant pushed twice woke the waiter twice")
	}
	if o := h.owner("p"); o.Key != owner.Key {
		t.Fatalf("a pushed grant changed this member's state: owner %+v", o)
	}
	hooked = nil
	h.release("p", 0x1, owner.Token)
	if got := h.m.Wakeups() - before; got != 1 {
		t.Fatalf("%d wake-ups for one hand-off (pushed, then applied), want 1", got)
	}
	if len(hooked) != 1 || hooked[0].Key != next.Key || hooked[0].Origin != 9 || hooked[0].ReqID != 42 {
		t.Fatalf("grant hook after the release got %+v, want the grant of %s from member 9", hooked, next.Key)
	}
	if h.m.PushedGrantsDelivered() != 1 {
		t.Fatalf("PushedGrantsDelivered %d, want 1", h.m.PushedGrantsDelivered())
	}
	hooked = nil
	h.release("p", 0x2, next.Token)
	if len(hooked) != 0 {
		t.Fatalf("grant of a plain-KV key went to the hook: %+v", hooked)
	}
	if o := h.owner("p"); o.Key != "p/3" {
		t.Fatalf("owner %+v, want the plain-KV key p/3", o)
	}
}

// A re-acquire from another member moves where the grant is pushed.
func TestGrantFollowsTheLatestAcquire(t *testing.T) {
	h := newHarness(t)
	var hooked []Note
	h.m.SetGrantHook(func(n Note) { hooked = append(hooked, n) })
	h.grant(0x1, 0x2)
	owner := h.acquire("q", 0x1)
	if _, err := h.op(&Op{Kind: OpAcquire, Name: []byte("q"), Lease: 0x2, ReqID: 1, Origin: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.op(&Op{Kind: OpAcquire, Name: []byte("q"), Lease: 0x2, ReqID: 2, Origin: 6}); err != nil {
		t.Fatal(err)
	}
	hooked = nil
	h.release("q", 0x1, owner.Token)
	if len(hooked) != 1 || hooked[0].Origin != 6 || hooked[0].ReqID != 2 {
		t.Fatalf("grant hook got %+v, want member 6, request 2", hooked)
	}
}

func TestGrantNoticeMalformed(t *testing.T) {
	good := MarshalGrantNotice(Note{Kind: NoteGranted, Lock: "l", Key: "l/1", Token: 3, Lease: 1, Rev: 4, ReqID: 5})
	bad := map[string][]byte{
		"empty":         nil,
		"version":       append([]byte{9}, good[1:]...),
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte(nil), good...), 0),
		"no key":        MarshalGrantNotice(Note{Kind: NoteGranted, Lock: "l"}),
		"huge name len": binary.BigEndian.AppendUint32(append([]byte(nil), good[:33]...), 1<<31),
	}
	for name, b := range bad {
		if _, err := UnmarshalGrantNotice(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzUnmarshalGrantNotice(f *testing.F) {
	f.Add(MarshalGrantNotice(Note{Kind: NoteGranted, Lock: "l", Key: "l/1", Token: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := UnmarshalGrantNotice(b)
		if err != nil {
			return
		}
		if m, err := UnmarshalGrantNotice(MarshalGrantNotice(n)); err != nil || fmt.Sprint(m) != fmt.Sprint(n) {
			t.Fatalf("re-encoded %+v: %+v %v", n, m, err)
		}
	})
}

func TestResultNoticeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  any
		err  error
	}{
		{"acquire", &AcquireResult{Key: "l/1", Token: 3, ModRev: 4, Granted: true, Rev: 5, Owner: Owner{Key: "l/1", Token: 3, Lease: 1}, Waiters: 2, Blocked: true}, nil},
		{"queued", &AcquireResult{Key: "l/2", Token: 6, ModRev: 6, Rev: 6, Owner: Owner{Key: "l/1", Token: 3, Lease: 1}, Waiters: 2}, nil},
		{"release", &ReleaseResult{Released: true, Rev: 9}, nil},
		{"too many waiters", nil, ErrTooManyWaiters},
		{"unknown lease", nil, mvcc.ErrLeaseNotFound},
	} {
		b, ok := MarshalResultNotice(77, tc.out, tc.err)
		if !ok {
			t.Fatalf("%s: not encodable", tc.name)
		}
		id, out, opErr, err := UnmarshalResultNotice(b)
		if err != nil || id != 77 || opErr != tc.err || fmt.Sprint(out) != fmt.Sprint(tc.out) {
			t.Fatalf("%s: got %d %+v %v %v, want 77 %+v %v", tc.name, id, out, opErr, err, tc.out, tc.err)
		}
		if _, _, _, err := UnmarshalResultNotice(b[:len(b)-1]); err == nil {
			t.Fatalf("%s: truncated notice decoded", tc.name)
		}
		if _, _, _, err := UnmarshalResultNotice(append(append([]byte(nil), b...), 0)); err == nil {
			t.Fatalf("%s: notice with a trailing byte decoded", tc.name)
		}
	}
	// What a notice cannot carry is left to the member's own apply.
	if _, ok := MarshalResultNotice(1, nil, errors.New("something else")); ok {
		t.Fatal("an unknown error was encoded")
	}
	if _, ok := MarshalResultNotice(1, nil, nil); ok {
		t.Fatal("a nil outcome was encoded")
	}
	if _, _, _, err := UnmarshalResultNotice(MarshalGrantNotice(Note{Kind: NoteGranted, Key: "k"})); err == nil {
		t.Fatal("a grant notice decoded as a result")
	}
}

func TestPeekOrigin(t *testing.T) {
	op := &Op{Kind: OpRelease, ReqID: 12, Name: []byte("n"), Value: []byte("vv"), Origin: 34}
	b := op.Marshal()
	if o, id, ok := PeekOrigin(b); !ok || o != 34 || id != 12 {
		t.Fatalf("PeekOrigin: %d %d %v, want 34 12 true", o, id, ok)
	}
	if o, id, ok := PeekOrigin(b[:len(b)-8]); !ok || o != 0 || id != 12 {
		t.Fatalf("PeekOrigin of an op without an origin: %d %d %v, want 0 12 true", o, id, ok)
	}
	for _, cut := range []int{1, 9, len(b) - 30} {
		if _, _, ok := PeekOrigin(b[:len(b)-cut]); ok {
			t.Fatalf("PeekOrigin of an op cut by %d bytes: ok", cut)
		}
	}
}

func FuzzUnmarshalResultNotice(f *testing.F) {
	b, _ := MarshalResultNotice(5, &AcquireResult{Key: "a/1", Owner: Owner{Key: "a/0"}}, nil)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		id, out, opErr, err := UnmarshalResultNotice(b)
		if err != nil {
			return
		}
		again, ok := MarshalResultNotice(id, out, opErr)
		if !ok {
			t.Fatalf("decoded %+v %v does not re-encode", out, opErr)
		}
		id2, out2, opErr2, err := UnmarshalResultNotice(again)
		if err != nil || id2 != id || opErr2 != opErr || fmt.Sprint(out2) != fmt.Sprint(out) {
			t.Fatalf("re-decoded %d %+v %v %v", id2, out2, opErr2, err)
		}
	})
}
