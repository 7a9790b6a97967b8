package mvcc

import (
	"bytes"
	"cmp"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Txn executes an etcd transaction as etcd does (server/etcdserver/txn):
// every compare — including those of nested transactions on the chosen
// path — is evaluated first against the state before the transaction; then
// the chosen operations are validated (puts: ErrKeyNotFound,
// ErrLeaseNotFound; ranges: ErrFutureRev, ErrCompacted) and, only if all
// pass, executed in order, sharing one revision. Ranges inside see the
// transaction's earlier writes. Header.Revision of the response is the
// txn's revision (the current one if nothing changed); nested range, put and
// delete responses carry their own Header.Revision, nested txn responses an
// empty Header, as in etcd.
func (t *Txn) Txn(req *pb.TxnRequest) (*pb.TxnResponse, error) {
	path, err := t.comparePath(req, nil)
	if err != nil {
		return nil, err
	}
	if _, err := t.checkOps(req, path); err != nil {
		return nil, err
	}
	resp := &pb.TxnResponse{}
	if _, err := t.execTxn(req, path, resp); err != nil {
		return nil, err
	}
	resp.Header = &pb.ResponseHeader{Revision: t.viewRev()}
	return resp, nil
}

// comparePath evaluates compares depth-first along the chosen branches.
func (t *Txn) comparePath(req *pb.TxnRequest, path []bool) ([]bool, error) {
	ok := true
	for _, c := range req.Compare {
		r, err := t.compare(c)
		if err != nil {
			return nil, err
		}
		if !r {
			ok = false
			break
		}
	}
	path = append(path, ok)
	for _, op := range branch(req, ok) {
		if tv, isTxn := op.Request.(*pb.RequestOp_RequestTxn); isTxn && tv.RequestTxn != nil {
			var err error
			if path, err = t.comparePath(tv.RequestTxn, path); err != nil {
				return nil, err
			}
		}
	}
	return path, nil
}

func branch(req *pb.TxnRequest, ok bool) []*pb.RequestOp {
	if ok {
		return req.Success
	}
	return req.Failure
}

// checkOps validates the ops on the chosen path; it returns the number of
// path entries consumed.
func (t *Txn) checkOps(req *pb.TxnRequest, path []bool) (int, error) {
	used := 1
	for _, op := range branch(req, path[0]) {
		switch tv := op.Request.(type) {
		case *pb.RequestOp_RequestPut:
			if tv.RequestPut != nil {
				if _, err := t.checkPut(tv.RequestPut); err != nil {
					return 0, err
				}
			}
		case *pb.RequestOp_RequestRange:
			if tv.RequestRange != nil {
				if _, err := checkRev(tv.RequestRange.Revision, t.viewRev(), t.s.stagedCompact); err != nil {
					return 0, err
				}
			}
		case *pb.RequestOp_RequestTxn:
			if tv.RequestTxn != nil {
				n, err := t.checkOps(tv.RequestTxn, path[used:])
				if err != nil {
					return 0, err
				}
				used += n
			}
		}
	}
	return used, nil
}

func (t *Txn) execTxn(req *pb.TxnRequest, path []bool, resp *pb.TxnResponse) (int, error) {
	used := 1
	resp.Succeeded = path[0]
	ops := branch(req, path[0])
	resp.Responses = make([]*pb.ResponseOp, 0, len(ops))
	for _, op := range ops {
		ro := &pb.ResponseOp{}
		switch tv := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			r := tv.RequestRange
			if r == nil {
				r = &pb.RangeRequest{}
			}
			rr, err := t.Range(r)
			if err != nil {
				return 0, err
			}
			ro.Response = &pb.ResponseOp_ResponseRange{ResponseRange: rr}
		case *pb.RequestOp_RequestPut:
			r := tv.RequestPut
			if r == nil {
				r = &pb.PutRequest{}
			}
			prev, err := t.latest(r.Key)
			if err != nil {
				return 0, err
			}
			if (r.IgnoreValue || r.IgnoreLease) && prev == nil {
				// only possible if an earlier op of this txn deleted the key
				return 0, fmt.Errorf("tenure: mvcc: txn put: %w", ErrKeyNotFound)
			}
			pr, err := t.put(r, prev)
			if err != nil {
				return 0, err
			}
			ro.Response = &pb.ResponseOp_ResponsePut{ResponsePut: pr}
		case *pb.RequestOp_RequestDeleteRange:
			r := tv.RequestDeleteRange
			if r == nil {
				r = &pb.DeleteRangeRequest{}
			}
			dr, err := t.DeleteRange(r)
			if err != nil {
				return 0, err
			}
			ro.Response = &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}
		case *pb.RequestOp_RequestTxn:
			tr := &pb.TxnResponse{Header: &pb.ResponseHeader{}}
			if tv.RequestTxn != nil {
				n, err := t.execTxn(tv.RequestTxn, path[used:], tr)
				if err != nil {
					return 0, err
				}
				used += n
			}
			ro.Response = &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}
		}
		resp.Responses = append(resp.Responses, ro)
	}
	return used, nil
}

// compare is etcd's applyCompare: over a key or a range, every existing key
// must satisfy the comparison; a VALUE compare on no key fails; other
// targets on no key compare against zero.
func (t *Txn) compare(c *pb.Compare) (bool, error) {
	kvs, err := t.collect(c.Key, c.RangeEnd)
	if err != nil {
		return false, err
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false, nil
		}
		return compareKV(c, &mvccpb.KeyValue{}), nil
	}
	for _, kv := range kvs {
		if c.Target == pb.Compare_VALUE {
			if err := t.loadValue(kv); err != nil {
				return false, err
			}
		}
		if !compareKV(c, kv) {
			return false, nil
		}
	}
	return true, nil
}

func compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var r int
	switch c.Target {
	case pb.Compare_VALUE:
		var v []byte
		if tv, ok := c.TargetUnion.(*pb.Compare_Value); ok {
			v = tv.Value
		}
		r = bytes.Compare(kv.Value, v)
	case pb.Compare_CREATE:
		r = cmp.Compare(kv.CreateRevision, c.GetCreateRevision())
	case pb.Compare_MOD:
		r = cmp.Compare(kv.ModRevision, c.GetModRevision())
	case pb.Compare_VERSION:
		r = cmp.Compare(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		r = cmp.Compare(kv.Lease, c.GetLease())
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return r == 0
	case pb.Compare_NOT_EQUAL:
		return r != 0
	case pb.Compare_GREATER:
		return r > 0
	case pb.Compare_LESS:
		return r < 0
	}
	return true
}
