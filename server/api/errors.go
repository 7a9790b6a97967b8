package api

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/server/apply"
	"github.com/tenure-io/tenure/server/lease"
	"github.com/tenure-io/tenure/server/lock"
	"github.com/tenure-io/tenure/server/mvcc"
	"github.com/tenure-io/tenure/server/raftnode"
)

// errNotEnoughStartedMembers is etcd's answer (code Unknown, as etcd sends
// it; rpctypes has no constant for it).
var errNotEnoughStartedMembers = status.Error(codes.Unknown, "etcdserver: re-configuration failed due to not enough started members")

var errMap = []struct {
	err  error
	grpc error
}{
	{raftnode.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
	{raftnode.ErrTimeout, rpctypes.ErrGRPCTimeout},
	{raftnode.ErrStopped, rpctypes.ErrGRPCStopped},
	{raftnode.ErrProposalDropped, rpctypes.ErrGRPCTimeout},
	{raftnode.ErrMemberNotFound, rpctypes.ErrGRPCMemberNotFound},
	{raftnode.ErrMemberExists, rpctypes.ErrGRPCMemberExist},
	{raftnode.ErrPeerURLExists, rpctypes.ErrGRPCPeerURLExist},
	{raftnode.ErrLearnerNotReady, rpctypes.ErrGRPCLearnerNotReady},
	{raftnode.ErrNotLearner, rpctypes.ErrGRPCMemberNotLearner},
	{raftnode.ErrTooManyLearners, rpctypes.ErrGRPCTooManyLearners},
	{raftnode.ErrUnhealthyCluster, rpctypes.ErrGRPCUnhealthy},
	{raftnode.ErrNotEnoughStartedMembers, errNotEnoughStartedMembers},
	{raftnode.ErrBadLeaderTransferee, rpctypes.ErrGRPCBadLeaderTransferee},
	{apply.ErrTimeout, rpctypes.ErrGRPCTimeout},
	{apply.ErrStopped, rpctypes.ErrGRPCStopped},
	{apply.ErrRequestTooLarge, rpctypes.ErrGRPCRequestTooLarge},
	{apply.ErrNoSpace, rpctypes.ErrGRPCNoSpace},
	{mvcc.ErrCompacted, rpctypes.ErrGRPCCompacted},
	{mvcc.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
	{mvcc.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
	{mvcc.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
	{lease.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
	{lease.ErrLeaseExists, rpctypes.ErrGRPCLeaseExist},
	{lease.ErrLeaseTTLTooLarge, rpctypes.ErrGRPCLeaseTTLTooLarge},
	{lock.ErrLeaseRequired, status.Error(codes.InvalidArgument, lock.ErrLeaseRequired.Error())},
	{lock.ErrInvalidName, status.Error(codes.InvalidArgument, lock.ErrInvalidName.Error())},
	{lock.ErrDelayTooLong, status.Error(codes.InvalidArgument, lock.ErrDelayTooLong.Error())},
	{lock.ErrTooManyWaiters, status.Error(codes.ResourceExhausted, lock.ErrTooManyWaiters.Error())},
	{lock.ErrWaiterRemoved, status.Error(codes.Aborted, lock.ErrWaiterRemoved.Error())},
	{lock.ErrUnknownLock, status.Error(codes.NotFound, lock.ErrUnknownLock.Error())},
}

// ToGRPC maps an internal error to the gRPC status etcd would return.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, m := range errMap {
		if errors.Is(err, m.err) {
			return m.grpc
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled
	}
	return status.Error(codes.Unknown, err.Error())
}
