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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

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

// fetchPeerHashes asks each peer (in parallel, one client URL after another
// until one answers) for HashKV at rev.
func fetchPeerHashes(ctx context.Context, self uint64, rev int64, peers []raftnode.Member, creds credentials.TransportCredentials) []peerHash {
	var (
		mu  sync.Mutex
		out []peerHash
		wg  sync.WaitGroup
	)
	for _, p := range peers {
		if p.ID == self || len(p.ClientURLs) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last peerHash
			for _, u := range p.ClientURLs {
				last = peerHash{id: p.ID, url: u}
				last.resp, last.err = hashKVAt(ctx, u, rev, creds)
				if last.err == nil {
					break
				}
			}
			mu.Lock()
			out = append(out, last)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func hashKVAt(ctx context.Context, url string, rev int64, creds credentials.TransportCredentials) (*pb.HashKVResponse, error) {
	target, secure := strings.CutPrefix(url, "https://")
	target = strings.TrimPrefix(target, "http://")
	tc := insecure.NewCredentials()
	if secure {
		if creds == nil {
			return nil, errors.New("https client URL and no --cert-file to dial it with")
		}
		tc = creds
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(tc))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// Fail fast: a peer that is down (a whole cluster restarting) is
	// skipped at once instead of holding this member's start.
	return pb.NewMaintenanceClient(conn).HashKV(ctx, &pb.HashKVRequest{Revision: rev})
}
