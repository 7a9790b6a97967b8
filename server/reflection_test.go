package server

import (
	"context"
	"strings"
	"testing"
	"time"

	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// reflectionClient asks a server for descriptors the way grpcurl does: it
// knows no proto of its own, so every file it builds comes from the server,
// with every import asked for by the path the importing file names.
type reflectionClient struct {
	t      *testing.T
	stream reflectionv1.ServerReflection_ServerReflectionInfoClient
	protos map[string]*descriptorpb.FileDescriptorProto
}

func (c *reflectionClient) ask(req *reflectionv1.ServerReflectionRequest) *reflectionv1.ServerReflectionResponse {
	c.t.Helper()
	if err := c.stream.Send(req); err != nil {
		c.t.Fatal(err)
	}
	r, err := c.stream.Recv()
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *reflectionClient) keep(r *reflectionv1.ServerReflectionResponse) error {
	if e := r.GetErrorResponse(); e != nil {
		return &reflectionError{e.GetErrorMessage()}
	}
	for _, raw := range r.GetFileDescriptorResponse().GetFileDescriptorProto() {
		p := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(raw, p); err != nil {
			return err
		}
		c.protos[p.GetName()] = p
	}
	return nil
}

type reflectionError struct{ msg string }

func (e *reflectionError) Error() string { return e.msg }

// service resolves a service by name from a fresh set of files, fetching any import the server did not
// send along by its file name, and builds the files as a client would.
func (c *reflectionClient) service(name string) (protoreflect.ServiceDescriptor, error) {
	c.t.Helper()
	c.protos = map[string]*descriptorpb.FileDescriptorProto{}
	if err := c.keep(c.ask(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: name},
	})); err != nil {
		return nil, err
	}
	for {
		var missing []string
		for _, p := range c.protos {
			for _, dep := range p.GetDependency() {
				if c.protos[dep] == nil {
					missing = append(missing, dep)
				}
			}
		}
		if len(missing) == 0 {
			break
		}
		for _, dep := range missing {
			if err := c.keep(c.ask(&reflectionv1.ServerReflectionRequest{
				MessageRequest: &reflectionv1.ServerReflectionRequest_FileByFilename{FileByFilename: dep},
			})); err != nil {
				return nil, &reflectionError{dep + ": " + err.Error()}
			}
			if c.protos[dep] == nil {
				return nil, &reflectionError{"the server answered for " + dep + " with another file"}
			}
		}
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, p := range c.protos {
		set.File = append(set.File, p)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, err
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, err
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, &reflectionError{name + " is not a service"}
	}
	return sd, nil
}

// Every service the server lists can be described from what reflection
// serves, and called with messages built from those descriptors alone: before
// the renamed registry, every etcd service failed with "File not found:
// etcd/api/mvccpb/kv.proto" (or rpc.proto), so grpcurl could list them but
// neither describe nor call them.
func TestReflectionDescribesAndCallsEveryService(t *testing.T) {
	cli := startSingle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "greeting", "hello"); err != nil {
		t.Fatal(err)
	}
	conn := cli.ActiveConnection()
	stream, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &reflectionClient{t: t, stream: stream}

	list := c.ask(&reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{ListServices: ""}})
	var names []string
	for _, s := range list.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"etcdserverpb.KV", "etcdserverpb.Watch", "etcdserverpb.Lease", "etcdserverpb.Cluster",
		"etcdserverpb.Maintenance", "etcdserverpb.Auth", "v3lockpb.Lock", "v3electionpb.Election", "tenure.v1.Locks"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("reflection does not list %s (it lists %v)", want, names)
		}
	}
	services := map[string]protoreflect.ServiceDescriptor{}
	for _, name := range names {
		sd, err := c.service(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		services[name] = sd
	}
	if t.Failed() {
		t.FailNow()
	}
	if m := services["etcdserverpb.KV"].Methods().ByName("Range"); m == nil || m.Input().FullName() != "etcdserverpb.RangeRequest" {
		t.Fatalf("etcdserverpb.KV.Range described as %v", m)
	}

	// A Range built from the served descriptors, as grpcurl -d '{"key":…}'
	// would send it, returns the key written through clientv3.
	rng := services["etcdserverpb.KV"].Methods().ByName("Range")
	req := dynamicpb.NewMessage(rng.Input())
	req.Set(rng.Input().Fields().ByName("key"), protoreflect.ValueOfBytes([]byte("greeting")))
	resp := dynamicpb.NewMessage(rng.Output())
	if err := conn.Invoke(ctx, "/etcdserverpb.KV/Range", req, resp); err != nil {
		t.Fatal(err)
	}
	kvs := resp.Get(rng.Output().Fields().ByName("kvs")).List()
	if kvs.Len() != 1 {
		t.Fatalf("Range through served descriptors: %d kvs, want 1", kvs.Len())
	}
	kv := kvs.Get(0).Message()
	if v := string(kv.Get(kv.Descriptor().Fields().ByName("value")).Bytes()); v != "hello" {
		t.Fatalf("Range through served descriptors: value %q, want hello", v)
	}

	// The v1alpha service, which older grpcurl builds use, answers alike.
	alpha, err := reflectionv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := alpha.Send(&reflectionv1alpha.ServerReflectionRequest{
		MessageRequest: &reflectionv1alpha.ServerReflectionRequest_FileByFilename{FileByFilename: "etcd/api/mvccpb/kv.proto"},
	}); err != nil {
		t.Fatal(err)
	}
	ar, err := alpha.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if e := ar.GetErrorResponse(); e != nil || len(ar.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("v1alpha FileByFilename etcd/api/mvccpb/kv.proto: %v", e)
	}
}

// consistentFiles renames a bare-named file to the path its importer uses,
// rewrites imports by the bare name, drops imports found nowhere, and leaves
// an already consistent file alone.
func TestConsistentFilesRenamesAndDrops(t *testing.T) {
	str := func(s string) *string { return &s }
	msg := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: str(name), Field: fields}
	}
	ref := func(name, typ string) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: str(name), Number: proto.Int32(1),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			Type:  descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum(), TypeName: str(typ)}
	}
	src := new(protoregistry.Files)
	add := func(p *descriptorpb.FileDescriptorProto) {
		t.Helper()
		p.Syntax = str("proto3")
		// Built alone, with its imports and the types they hold left as
		// placeholders: generated code registers its files without
		// resolving imports either.
		fd, err := protodesc.FileOptions{AllowUnresolvable: true}.New(p, new(protoregistry.Files))
		if err != nil {
			t.Fatal(err)
		}
		if err := src.RegisterFile(fd); err != nil {
			t.Fatal(err)
		}
	}
	add(&descriptorpb.FileDescriptorProto{Name: str("kv.proto"), Package: str("mvccpb"), MessageType: []*descriptorpb.DescriptorProto{msg("KeyValue")}})
	add(&descriptorpb.FileDescriptorProto{Name: str("rpc.proto"), Package: str("etcdserverpb"),
		Dependency:  []string{"etcd/api/mvccpb/kv.proto", "google/api/annotations.proto"},
		MessageType: []*descriptorpb.DescriptorProto{msg("RangeResponse", ref("kvs", ".mvccpb.KeyValue"))}})
	add(&descriptorpb.FileDescriptorProto{Name: str("raft_internal.proto"), Package: str("etcdserverpb"),
		Dependency:  []string{"rpc.proto"},
		MessageType: []*descriptorpb.DescriptorProto{msg("InternalRaftRequest", ref("range", ".etcdserverpb.RangeResponse"))}})
	add(&descriptorpb.FileDescriptorProto{Name: str("tenure/v1/locks.proto"), Package: str("tenure.v1"),
		MessageType: []*descriptorpb.DescriptorProto{msg("LockRequest")}})

	files := consistentFiles(src)
	kv, err := files.FindFileByPath("etcd/api/mvccpb/kv.proto")
	if err != nil {
		t.Fatalf("kv.proto not renamed to its import path: %v", err)
	}
	if _, err := files.FindFileByPath("kv.proto"); err == nil {
		t.Fatal("kv.proto kept under its bare name as well")
	}
	rpc, err := files.FindFileByPath("rpc.proto")
	if err != nil {
		t.Fatal(err)
	}
	if rpc.Imports().Len() != 1 || rpc.Imports().Get(0).Path() != kv.Path() || rpc.Imports().Get(0).IsPlaceholder() {
		t.Fatalf("rpc.proto imports %v, want only the resolved %s", rpc.Imports(), kv.Path())
	}
	d, err := files.FindDescriptorByName("etcdserverpb.InternalRaftRequest")
	if err != nil {
		t.Fatal(err)
	}
	if f := d.(protoreflect.MessageDescriptor).Fields().ByName("range"); f.Message().IsPlaceholder() || f.Message().ParentFile().Path() != "rpc.proto" {
		t.Fatalf("InternalRaftRequest.range resolves to %v", f.Message())
	}
	if _, err := files.FindFileByPath("tenure/v1/locks.proto"); err != nil {
		t.Fatalf("a consistent file was lost: %v", err)
	}
}
