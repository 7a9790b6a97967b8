package api

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tenure-io/tenure/server/lock"
)

func TestLockErrorsMapToGRPC(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{lock.ErrLeaseRequired, codes.InvalidArgument, "lease is required"},
		{lock.ErrInvalidName, codes.InvalidArgument, "invalid lock name"},
		{lock.ErrDelayTooLong, codes.InvalidArgument, "60s"},
		{lock.ErrTooManyWaiters, codes.ResourceExhausted, "a coordinator is not a queue"},
		{lock.ErrWaiterRemoved, codes.Aborted, "before the lock was granted"},
		{fmt.Errorf("wrapped: %w", lock.ErrWaiterRemoved), codes.Aborted, "before the lock was granted"},
		{lock.ErrUnknownLock, codes.NotFound, "unknown lock"},
	} {
		got := status.Convert(ToGRPC(tc.err))
		if got.Code() != tc.code || !strings.Contains(got.Message(), tc.msg) {
			t.Errorf("ToGRPC(%v) = %v %q, want %v containing %q", tc.err, got.Code(), got.Message(), tc.code, tc.msg)
		}
	}
}

func TestLockNameValidation(t *testing.T) {
	for _, name := range [][]byte{nil, {}, []byte("a\x00b"), make([]byte, lock.MaxNameBytes+1)} {
		if err := lock.ValidName(name); err != lock.ErrInvalidName {
			t.Errorf("ValidName(%q) = %v", name, err)
		}
	}
	if err := lock.ValidName([]byte("jobs/shard-7")); err != nil {
		t.Errorf("ValidName(jobs/shard-7) = %v", err)
	}
}
