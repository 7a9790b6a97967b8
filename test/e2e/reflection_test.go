package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestReflectionDescribesNativeLocks: a tool without the proto (grpcurl)
// can list the services and get tenure.v1.Locks' descriptor from the
// server itself.
func TestReflectionDescribesNativeLocks(t *testing.T) {
	_, lc := startLocks(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := grpc_reflection_v1.NewServerReflectionClient(lc.cli.ActiveConnection()).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *grpc_reflection_v1.ServerReflectionRequest) *grpc_reflection_v1.ServerReflectionResponse {
		t.Helper()
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if e := r.GetErrorResponse(); e != nil {
			t.Fatalf("reflection error %d: %s", e.ErrorCode, e.ErrorMessage)
		}
		return r
	}
	var names []string
	for _, s := range ask(&grpc_reflection_v1.ServerReflectionRequest{
		MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_ListServices{},
	}).GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"tenure.v1.Locks", "etcdserverpb.KV", "v3lockpb.Lock", "v3electionpb.Election"} {
		if !slices.Contains(names, want) {
			t.Errorf("ListServices lacks %s: %v", want, names)
		}
	}
	files := ask(&grpc_reflection_v1.ServerReflectionRequest{
		MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "tenure.v1.Locks"},
	}).GetFileDescriptorResponse().GetFileDescriptorProto()
	var methods []string
	for _, raw := range files {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(raw, fd); err != nil {
			t.Fatal(err)
		}
		for _, svc := range fd.GetService() {
			if fd.GetPackage()+"."+svc.GetName() != "tenure.v1.Locks" {
				continue
			}
			for _, m := range svc.GetMethod() {
				methods = append(methods, m.GetName())
			}
		}
	}
	for _, want := range []string{"TryLock", "Lock", "Unlock", "CheckFence", "Describe", "WatchOwnership", "Session"} {
		if !slices.Contains(methods, want) {
			t.Errorf("tenure.v1.Locks descriptor lacks %s: %v", want, methods)
		}
	}
}
