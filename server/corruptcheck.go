package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/credentials"

	"github.com/tenure-io/tenure/server/api"
	"github.com/tenure-io/tenure/server/raftnode"
)

// ErrDataInconsistency is what a member refuses to start with when its
// store's HashKV differs from a peer's at the same revision: one of them
// diverged (a bad disk, a bug), and a member that joins raft with diverged
// data serves wrong answers to every client routed to it.
var ErrDataInconsistency = errors.New("found data inconsistency with peers")

// peerHash is one peer's answer to HashKV at the local revision.
type peerHash struct {
	id   uint64
	url  string
	resp *pb.HashKVResponse
	err  error
}

// initialCorruptCheck is etcd's initial corruption check: before a member
// that has history joins raft, it asks every peer for HashKV at its own
// current revision (over the peers' client URLs, with the member's client
// credentials) and compares. A peer it cannot ask, or that compacted past
// that revision, or has not reached it, is skipped with a warning — a
// cluster restarting all at once must still come up — so the check can only
// fail on evidence: a peer with the same compaction and a different hash.
func initialCorruptCheck(ctx context.Context, lg *slog.Logger, self uint64, local *pb.HashKVResponse,
	peers []raftnode.Member, creds credentials.TransportCredentials, timeout time.Duration) error {
	lg.Info("starting initial corruption check", "local-member-id", fmt.Sprintf("%x", self),
		"local-member-revision", local.HashRevision, "timeout", timeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answers := fetchPeerHashes(ctx, self, local.HashRevision, peers, creds)
	var mismatched []string
	for _, p := range answers {
		peer := fmt.Sprintf("%x", p.id)
		switch {
		case p.err != nil:
			lg.Warn("cannot fetch hash from remote peer; skipped", "remote-peer-id", peer, "remote-peer-endpoint", p.url, "err", p.err)
		case p.resp.CompactRevision != local.CompactRevision:
			lg.Warn("remote peer compacted to another revision; hashes not comparable; skipped", "remote-peer-id", peer,
				"local-member-compact-revision", local.CompactRevision, "remote-peer-compact-revision", p.resp.CompactRevision)
		case p.resp.Hash != local.Hash:
			lg.Error("found different hash values from remote peer", "remote-peer-id", peer, "remote-peer-endpoint", p.url,
				"revision", local.HashRevision, "compact-revision", local.CompactRevision,
				"local-member-hash", local.Hash, "remote-peer-hash", p.resp.Hash)
			mismatched = append(mismatched, peer)
		}
	}
	if len(mismatched) > 0 {
		return fmt.Errorf("%x: %w (%s at revision %d); the member was not started: its data-dir or theirs holds diverged data",
			self, ErrDataInconsistency, strings.Join(mismatched, ", "), local.HashRevision)
	}
	lg.Info("initial corruption checking passed; no corruption", "local-member-id", fmt.Sprintf("%x", self))
	return nil
}

// fetchPeerHashes asks each peer, in parallel, for HashKV at rev, at the
// client URL requests are forwarded to (api.DialMember).
func fetchPeerHashes(ctx context.Context, self uint64, rev int64, peers []raftnode.Member, creds credentials.TransportCredentials) []peerHash {
	var (
		mu  sync.Mutex
		out []peerHash
		wg  sync.WaitGroup
	)
	for _, p := range peers {
		if p.ID == self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := peerHash{id: p.ID, url: strings.Join(p.ClientURLs, ",")}
			if conn := api.DialMember(p, creds); conn == nil {
				h.err = errors.New("no client URL this member can dial (https needs --cert-file)")
			} else {
				// Fail fast: a peer that is down (a whole cluster restarting)
				// is skipped at once instead of holding this member's start.
				h.resp, h.err = pb.NewMaintenanceClient(conn).HashKV(ctx, &pb.HashKVRequest{Revision: rev})
				_ = conn.Close()
			}
			mu.Lock()
			out = append(out, h)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
