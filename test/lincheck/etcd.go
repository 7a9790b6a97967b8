package lincheck

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Run performs in against an etcd-API key-value store: a put, a
// linearizable get, or a compare-and-set whose Expect "" means the key
// must be absent. On error the output is meaningless and the operation's
// effect unknown.
func Run(ctx context.Context, kv clientv3.KV, in Input) (Output, error) {
	var out Output
	switch in.Kind {
	case OpPut:
		_, err := kv.Put(ctx, in.Key, in.Value)
		return out, err
	case OpGet:
		r, err := kv.Get(ctx, in.Key)
		if err == nil && len(r.Kvs) > 0 {
			out.Value = string(r.Kvs[0].Value)
		}
		return out, err
	case OpCAS:
		cmp := clientv3.Compare(clientv3.Value(in.Key), "=", in.Expect)
		if in.Expect == "" {
			cmp = clientv3.Compare(clientv3.CreateRevision(in.Key), "=", 0)
		}
		r, err := kv.Txn(ctx).If(cmp).Then(clientv3.OpPut(in.Key, in.Value)).Commit()
		if err == nil {
			out.Succeeded = r.Succeeded
		}
		return out, err
	default:
		return out, fmt.Errorf("lincheck: unknown operation %q", in.Kind)
	}
}
