package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"
)

// The fenced resource: the "small resource process" of the article and of
// issue 6. It keeps the highest fencing token it has seen and a count, and
// applies an increment only if its token is at least the highest; otherwise
// it rejects it. The lock clients (separate processes) call it over HTTP
// while they believe they hold the lock; the harness reads its state at the
// end. It runs as its own process (TENURE_CHAOS_ROLE=resource) so that its
// state is nobody else's memory: a client's only way to land an effect is a
// request that the resource accepts.
//
//	POST /increment?client=C&n=N&token=T → {"accepted":bool,"seq":S,"highest":H,"count":K}
//	GET  /state                          → resourceState
//
// It prints {"addr":"host:port"} on stdout once it listens, and exits when
// its stdin closes (the harness's end) or it is killed.

// effect is one increment the resource decided on.
type effect struct {
	Client int   `json:"client"`
	N      int   `json:"n"` // the client's acquisition number
	Token  int64 `json:"token"`
	// Seq is the order in which the resource decided (1, 2, ... over
	// accepted and rejected effects alike).
	Seq int64 `json:"seq"`
	// At is when it decided, CLOCK_MONOTONIC (monoNow); the harness
	// converts it to run time.
	At time.Duration `json:"at"`
}

// resourceState is the resource's whole state.
type resourceState struct {
	Highest  int64    `json:"highest"`
	Count    int      `json:"count"`
	Accepted []effect `json:"accepted"`
	Rejected []effect `json:"rejected"`
}

// incrementResult is the answer to one increment.
type incrementResult struct {
	Accepted bool  `json:"accepted"`
	Seq      int64 `json:"seq"`
	Highest  int64 `json:"highest"`
	Count    int   `json:"count"`
}

// fencedResource applies an increment only if its token is at least the
// highest it has seen.
type fencedResource struct {
	mu  sync.Mutex
	st  resourceState
	seq int64
}

func (f *fencedResource) increment(client, n int, token int64) incrementResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	e := effect{Client: client, N: n, Token: token, Seq: f.seq, At: monoNow()}
	if token < f.st.Highest {
		f.st.Rejected = append(f.st.Rejected, e)
		return incrementResult{Accepted: false, Seq: e.Seq, Highest: f.st.Highest, Count: f.st.Count}
	}
	f.st.Highest = token
	f.st.Count++
	f.st.Accepted = append(f.st.Accepted, e)
	return incrementResult{Accepted: true, Seq: e.Seq, Highest: f.st.Highest, Count: f.st.Count}
}

func (f *fencedResource) state() resourceState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Accepted = append([]effect(nil), f.st.Accepted...)
	st.Rejected = append([]effect(nil), f.st.Rejected...)
	return st
}

func (f *fencedResource) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /increment", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		client, err1 := strconv.Atoi(q.Get("client"))
		n, err2 := strconv.Atoi(q.Get("n"))
		token, err3 := strconv.ParseInt(q.Get("token"), 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil || token <= 0 {
			http.Error(w, fmt.Sprintf("bad increment %q: %v", req.URL.RawQuery, err), http.StatusBadRequest)
			return
		}
		writeJSON(w, f.increment(client, n, token))
	})
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, f.state())
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// resourceMain is the resource process.
func resourceMain(args []string) int {
	if len(args) != 0 {
		fmt.Fprintf(os.Stderr, "resource: unexpected arguments %q\n", args)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "resource:", err)
		return 1
	}
	f := &fencedResource{}
	srv := &http.Server{Handler: f.handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	if err := json.NewEncoder(os.Stdout).Encode(map[string]string{"addr": ln.Addr().String()}); err != nil {
		return 1
	}
	io.Copy(io.Discard, os.Stdin) // until the harness closes stdin
	srv.Close()
	return 0
}

// resourceClient calls the resource over HTTP.
type resourceClient struct {
	base string
	hc   *http.Client
}

func newResourceClient(addr string) *resourceClient {
	// no retries anywhere: one increment is one request
	tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
	return &resourceClient{base: "http://" + addr, hc: &http.Client{Transport: tr}}
}

func (rc *resourceClient) increment(ctx context.Context, client, n int, token int64) (incrementResult, error) {
	var res incrementResult
	q := url.Values{"client": {strconv.Itoa(client)}, "n": {strconv.Itoa(n)}, "token": {strconv.FormatInt(token, 10)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rc.base+"/increment?"+q.Encode(), nil)
	if err != nil {
		return res, err
	}
	err = rc.do(req, &res)
	return res, err
}

func (rc *resourceClient) state(ctx context.Context) (resourceState, error) {
	var st resourceState
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rc.base+"/state", nil)
	if err != nil {
		return st, err
	}
	err = rc.do(req, &st)
	return st, err
}

func (rc *resourceClient) do(req *http.Request, v any) error {
	resp, err := rc.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL.Path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
