package server

import (
	"path"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// registerReflection serves gRPC server reflection (v1 and v1alpha), so that
// grpcurl and similar tools can describe and call every service — etcd's as
// well as tenure.v1 — without a copy of the protos.
//
// etcd's generated packages register their files under bare names
// ("rpc.proto", "kv.proto") while importing one another by full path
// ("etcd/api/mvccpb/kv.proto"). Served from the global registry as they are,
// the imports do not resolve, and a client fails on every etcd service with
// "File not found: etcd/api/mvccpb/kv.proto". The descriptors served here are
// the same files, renamed to the paths their importers use.
func registerReflection(s *grpc.Server) {
	opts := reflection.ServerOptions{Services: s, DescriptorResolver: lazyFiles{}}
	reflectionv1.RegisterServerReflectionServer(s, reflection.NewServerV1(opts))
	reflectionv1alpha.RegisterServerReflectionServer(s, reflection.NewServer(opts))
}

// reflectionFiles is built once per process, at the first reflection
// request (about 20 ms here, which a member's start need not pay): the
// global registry does not change after package initialisation.
var reflectionFiles = sync.OnceValue(func() *protoregistry.Files {
	return consistentFiles(protoregistry.GlobalFiles)
})

// lazyFiles resolves through reflectionFiles.
type lazyFiles struct{}

func (lazyFiles) FindFileByPath(p string) (protoreflect.FileDescriptor, error) {
	return reflectionFiles().FindFileByPath(p)
}

func (lazyFiles) FindDescriptorByName(n protoreflect.FullName) (protoreflect.Descriptor, error) {
	return reflectionFiles().FindDescriptorByName(n)
}

// consistentFiles copies every file of src into a new registry in which each
// import resolves: a file registered under a bare name that some file imports
// by a longer path ending in that name is renamed to that path, and imports
// found nowhere are dropped (etcd's HTTP-gateway annotations are only options;
// no type refers to them). Files that still fail to build are left out, with
// the files that depend on them.
func consistentFiles(src *protoregistry.Files) *protoregistry.Files {
	var protos []*descriptorpb.FileDescriptorProto
	src.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		protos = append(protos, protodesc.ToFileDescriptorProto(fd))
		return true
	})
	known := make(map[string]bool, len(protos))
	for _, p := range protos {
		known[p.GetName()] = true
	}

	// Imports by full path of files registered under their bare name. A bare
	// name claimed by two different full paths is ambiguous and left alone.
	rename := map[string]string{}
	ambiguous := map[string]bool{}
	for _, p := range protos {
		for _, dep := range p.GetDependency() {
			base := path.Base(dep)
			if known[dep] || base == dep || !known[base] {
				continue
			}
			if prev, ok := rename[base]; ok && prev != dep {
				ambiguous[base] = true
			}
			rename[base] = dep
		}
	}
	for base := range ambiguous {
		delete(rename, base)
	}
	// Where an import points once the files are renamed, and whether any
	// file is there.
	resolves := func(dep string) (string, bool) {
		if to, ok := rename[dep]; ok {
			return to, true // imported by the bare name of a renamed file
		}
		return dep, known[dep] || rename[path.Base(dep)] == dep
	}
	for _, p := range protos {
		if to, ok := rename[p.GetName()]; ok {
			p.Name = &to
		}
		rewriteImports(p, resolves)
	}

	// Add files once their imports are in; stop when a pass adds nothing.
	files := new(protoregistry.Files)
	pending := protos
	for len(pending) > 0 {
		var next []*descriptorpb.FileDescriptorProto
		for _, p := range pending {
			if !importsPresent(files, p) {
				next = append(next, p)
				continue
			}
			fd, err := protodesc.NewFile(p, files)
			if err != nil {
				continue
			}
			if err := files.RegisterFile(fd); err != nil {
				continue
			}
		}
		if len(next) == len(pending) {
			break
		}
		pending = next
	}
	return files
}

// rewriteImports renames p's imports through resolves and drops those that
// resolve nowhere, keeping the public and weak import indices pointing at the
// same files.
func rewriteImports(p *descriptorpb.FileDescriptorProto, resolves func(string) (string, bool)) {
	public := map[int32]bool{}
	for _, i := range p.GetPublicDependency() {
		public[i] = true
	}
	weak := map[int32]bool{}
	for _, i := range p.GetWeakDependency() {
		weak[i] = true
	}
	var deps []string
	var pubs, weaks []int32
	for i, dep := range p.GetDependency() {
		to, ok := resolves(dep)
		if !ok {
			continue
		}
		n := int32(len(deps))
		if public[int32(i)] {
			pubs = append(pubs, n)
		}
		if weak[int32(i)] {
			weaks = append(weaks, n)
		}
		deps = append(deps, to)
	}
	p.Dependency, p.PublicDependency, p.WeakDependency = deps, pubs, weaks
}

func importsPresent(files *protoregistry.Files, p *descriptorpb.FileDescriptorProto) bool {
	for _, dep := range p.GetDependency() {
		if _, err := files.FindFileByPath(dep); err != nil {
			return false
		}
	}
	return true
}
