package api

import (
	"bytes"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func checkRange(r *pb.RangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return rpctypes.ErrGRPCInvalidSortOption
	}
	return nil
}

func checkPut(r *pb.PutRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return rpctypes.ErrGRPCLeaseProvided
	}
	return nil
}

func checkDelete(r *pb.DeleteRangeRequest) error {
	if len(r.Key) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	return nil
}

// checkTxn validates a txn (recursively) and applies etcd's rule that one txn
// branch may not write a key twice (a put and another put or a delete over it).
func checkTxn(r *pb.TxnRequest, maxOps int) error {
	if err := checkTxnOps(r, maxOps); err != nil {
		return err
	}
	_, _, err := txnWrites(r)
	return err
}

func checkTxnOps(r *pb.TxnRequest, maxOps int) error {
	if len(r.Compare) > maxOps || len(r.Success) > maxOps || len(r.Failure) > maxOps {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, c := range r.Compare {
		if len(c.Key) == 0 {
			return rpctypes.ErrGRPCEmptyKey
		}
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if err := checkOp(op, maxOps); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkOp(op *pb.RequestOp, maxOps int) error {
	switch o := op.Request.(type) {
	case *pb.RequestOp_RequestRange:
		return checkRange(o.RequestRange)
	case *pb.RequestOp_RequestPut:
		return checkPut(o.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return checkDelete(o.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return checkTxnOps(o.RequestTxn, maxOps)
	default:
		return rpctypes.ErrGRPCEmptyKey // an empty op carries no key
	}
}

type interval struct{ start, end []byte } // end nil: single key

func (iv interval) contains(key []byte) bool {
	if iv.end == nil {
		return bytes.Equal(iv.start, key)
	}
	if bytes.Compare(key, iv.start) < 0 {
		return false
	}
	return len(iv.end) == 1 && iv.end[0] == 0 || bytes.Compare(key, iv.end) < 0
}

// txnWrites returns the keys put and the ranges deleted by either branch of r,
// failing with ErrGRPCDuplicateKey when one branch writes a key twice.
func txnWrites(r *pb.TxnRequest) (map[string]struct{}, []interval, error) {
	allPuts := map[string]struct{}{}
	var allDels []interval
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		puts := map[string]struct{}{}
		var dels []interval
		for _, op := range ops {
			switch o := op.Request.(type) {
			case *pb.RequestOp_RequestPut:
				k := string(o.RequestPut.Key)
				if _, dup := puts[k]; dup {
					return nil, nil, rpctypes.ErrGRPCDuplicateKey
				}
				puts[k] = struct{}{}
			case *pb.RequestOp_RequestDeleteRange:
				d := o.RequestDeleteRange
				var end []byte
				if len(d.RangeEnd) > 0 {
					end = d.RangeEnd
				}
				dels = append(dels, interval{d.Key, end})
			case *pb.RequestOp_RequestTxn:
				np, nd, err := txnWrites(o.RequestTxn)
				if err != nil {
					return nil, nil, err
				}
				for k := range np {
					if _, dup := puts[k]; dup {
						return nil, nil, rpctypes.ErrGRPCDuplicateKey
					}
					puts[k] = struct{}{}
				}
				dels = append(dels, nd...)
			}
		}
		for k := range puts {
			for _, d := range dels {
				if d.contains([]byte(k)) {
					return nil, nil, rpctypes.ErrGRPCDuplicateKey
				}
			}
			allPuts[k] = struct{}{}
		}
		allDels = append(allDels, dels...)
	}
	return allPuts, allDels, nil
}
