package raftnode

import (
	"bytes"
	"context"
	"encoding/binary"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

type readWaiter struct {
	ctx context.Context
	c   chan error // buffered(1)
}

// ReadIndex is a linearizable barrier: it returns nil once this member's
// applied index is at least the commit index the leader confirmed (with a
// quorum round, ReadOnlySafe) after the call began. Concurrent callers share
// one raft round. Errors: ErrNoLeader, ErrTimeout (ctx done), ErrStopped.
func (n *Node) ReadIndex(ctx context.Context) error {
	if !n.started.Load() {
		return ErrStopped
	}
	if err := n.waitLeader(ctx); err != nil {
		return err
	}
	w := readWaiter{ctx: ctx, c: make(chan error, 1)}
	n.readMu.Lock()
	n.readWaiters = append(n.readWaiters, w)
	n.readMu.Unlock()
	select {
	case n.readc <- struct{}{}:
	default:
	}
	select {
	case err := <-w.c:
		return err
	case <-ctx.Done():
		if lead, _ := n.leader(); lead == 0 {
			return ErrNoLeader
		}
		return ErrTimeout
	case <-n.stopc:
		return ErrStopped
	}
}

func (n *Node) readIndexLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.readc:
		case <-n.stopc:
			n.failReaders(n.takeReaders(), ErrStopped)
			return
		}
		ws := n.takeReaders()
		if len(ws) == 0 {
			continue
		}
		idx, err := n.readRound(ws)
		if err != nil {
			n.failReaders(ws, err)
			if err == ErrStopped {
				return
			}
			continue
		}
		for {
			applied, ch := n.appliedWait()
			if applied >= idx {
				break
			}
			select {
			case <-ch:
			case <-n.stopc:
				n.failReaders(ws, ErrStopped)
				return
			}
		}
		n.failReaders(ws, nil)
	}
}

func (n *Node) takeReaders() []readWaiter {
	n.readMu.Lock()
	defer n.readMu.Unlock()
	ws := n.readWaiters
	n.readWaiters = nil
	return ws
}

func (n *Node) failReaders(ws []readWaiter, err error) {
	for _, w := range ws {
		select {
		case w.c <- err:
		default:
		}
	}
}

func allDone(ws []readWaiter) bool {
	for _, w := range ws {
		if w.ctx.Err() == nil {
			return false
		}
	}
	return true
}

// readRound issues ReadIndex requests (retrying each election timeout, as
// requests can be dropped) until raft returns a read state for one of them
// or every waiter has given up.
func (n *Node) readRound(ws []readWaiter) (uint64, error) {
	retry := time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
	var ids [][]byte
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		id := binary.BigEndian.AppendUint64(nil, n.readSeq.Add(1))
		ids = append(ids, id)
		n.readRounds.Add(1)
		var err error
		if !n.forwardToLeader(&raftpb.Message{Type: raftpb.MsgReadIndex.Enum(), Entries: []*raftpb.Entry{{Data: id}}}) {
			ctx, cancel := context.WithTimeout(context.Background(), retry)
			err = n.rn.ReadIndex(ctx, id)
			cancel()
		}
		if err != nil && n.isStopped() {
			return 0, ErrStopped
		}
		t.Reset(retry)
	wait:
		for {
			select {
			case rs := <-n.readStatec:
				for _, want := range ids {
					if bytes.Equal(rs.RequestCtx, want) {
						return rs.Index, nil
					}
				}
			case <-t.C:
				break wait
			case <-n.stopc:
				return 0, ErrStopped
			}
		}
		if allDone(ws) {
			return 0, ErrTimeout
		}
	}
}

func (n *Node) isStopped() bool {
	select {
	case <-n.stopc:
		return true
	default:
		return false
	}
}
