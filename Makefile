# Tenure — the coordination service.
GO        ?= go
BIN       ?= bin
PKGS_RACE := ./server/... ./cmd/...

.PHONY: run build test test-unit test-e2e vet fmt chaos bench bench-full clean

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

fmt:
	gofmt -w $$(git ls-files '*.go')

bench:
	$(MAKE) -C bench bench

bench-full:
	$(MAKE) -C bench bench-full

clean:
	rm -rf $(BIN)
