// Package api is Tenure's edge: the etcd v3 gRPC services (KV, Lease,
// Cluster, Maintenance; Watch comes from package watch) on top of the raft
// node, the applier and the stores.
//
// Contract:
//   - Every request is validated before anything is proposed; bad input gets
//     etcd's error (rpctypes) and changes nothing.
//   - Writes are proposed through the applier and answered after they are
//     applied on this member. Linearizable reads wait for a ReadIndex barrier,
//     serializable reads are served from the local store.
//   - Internal errors are mapped to etcd's gRPC status codes and messages
//     here and only here (ToGRPC), so clientv3's rpctypes recognises them.
//   - Nothing here blocks the apply loop.
package api
