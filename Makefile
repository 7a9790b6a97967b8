# Tenure — the coordination service.
GO        ?= go
BIN       ?= bin
PKGS_RACE := ./server/... ./cmd/... ./api/... ./test/proxy/... ./test/lincheck/... ./test/cluster/...

.PHONY: run build test test-unit test-e2e vet fmt chaos bench bench-full clean proto

## run: a single-member server, client URL http://127.0.0.1:2379, data in ./default.tenure
run:
	$(GO) run ./cmd/tenure serve

## build: bin/tenure and bin/etcdctl (etcdctl 3.7.3 built from its Go module)
build:
	$(GO) build -o $(BIN)/tenure ./cmd/tenure
	$(GO) build -o $(BIN)/etcdctl go.etcd.io/etcd/etcdctl/v3

## test: everything CI runs — vet, unit tests with the race detector, end-to-end cluster tests
test: vet test-unit test-e2e chaos

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test-unit:
	$(GO) test -race -count=1 -timeout 20m $(PKGS_RACE)

test-e2e:
	$(GO) test -count=1 -timeout 20m ./test/...

## chaos: a short seeded fault-injection run (~3 min: 100s of faults + checks + etcd-bug scenarios);
## ends with one summary line, non-zero on anomalies. Long soak: go run ./test/chaos --duration 30m --seed S
CHAOS_DURATION ?= 100s
CHAOS_SEED     ?= 0
chaos:
	$(GO) run ./test/chaos --duration $(CHAOS_DURATION) --seed $(CHAOS_SEED)

## proto: regenerate api/tenurev1 (tenure.v1) from its .proto; installs the generators it needs
PROTOC_GEN_GO_VERSION      ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.5.1
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
proto:
	@command -v protoc >/dev/null || (command -v apt-get >/dev/null && apt-get install -y protobuf-compiler) || { echo "install protoc (Debian: apt-get install protobuf-compiler)"; exit 1; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	PATH="$(GOBIN_DIR):$$PATH" protoc -I api/tenurev1 --go_out=paths=source_relative:api/tenurev1 \
		--go-grpc_out=paths=source_relative:api/tenurev1 api/tenurev1/tenure.proto

fmt:
	gofmt -w $$(git ls-files '*.go')

bench:
	$(MAKE) -C bench bench

bench-full:
	$(MAKE) -C bench bench-full

clean:
	rm -rf $(BIN)
