# The two commands of the README's quick start are `make demo` and `make test`.

GO        ?= go
BIN       := bin/tashkent
DEMO_DIR  ?= .demo

.PHONY: build demo down test test-short vet bench-certifier compat-deps faults

build:
	$(GO) build -o $(BIN) ./cmd/tashkent

# Brings up a local 3-replica cluster in $(DEMO_DIR), runs a short workload
# and prints what happened and how to connect. `make down` stops it.
# The proxies compile the C capture against the PostgreSQL server headers
# (scripts/pg-server-headers.sh finds or fetches them); without them they
# capture in PL/pgSQL, and say so.
demo: build
	TASHKENT_PG_INCLUDEDIR="$$(bash scripts/pg-server-headers.sh || true)" ./$(BIN) up --data-dir $(DEMO_DIR)

down: build
	./$(BIN) down --data-dir $(DEMO_DIR)

# The client libraries of the compatibility suites (psycopg, asyncpg,
# node-postgres, pgjdbc), from PyPI, npm and Maven Central.
compat-deps:
	bash compat/install.sh

# The whole test suite: real PostgreSQL 15 instances, real processes, real
# clients, the race detector. This is what CI runs. It tests the C capture
# (TASHKENT_REQUIRE_C_CAPTURE: its tests fail rather than skip where it
# cannot be built), against the server headers scripts/pg-server-headers.sh
# finds or fetches.
test: compat-deps
	gofmt -l . | (! grep .) || (echo "gofmt would change the files above" && exit 1)
	$(GO) vet ./...
	include=$$(bash scripts/pg-server-headers.sh) && \
		TASHKENT_PG_INCLUDEDIR="$$include" TASHKENT_REQUIRE_C_CAPTURE=1 $(GO) test -race -count=1 -timeout 30m ./...

test-short:
	$(GO) test -short -count=1 ./...

bench-certifier: build
	./$(BIN) certifier-bench

# The fault test's long profile: a real 3-replica cluster with a certifier
# group of FAULTS_CERTIFIERS members (1: one certifier, with the netns
# partitions) under ten minutes of kill -9, SIGSTOP, partitions and client
# disconnects, checked by adya, the bank and long-fork checkers, durability
# and convergence, then the detector self-test (docs/RELIABILITY.md). The
# short profile runs in `make test` (internal/faults). Output stays in a new
# directory under .faults/.
FAULTS_DIR ?= .faults/$(shell date -u +%Y%m%dT%H%M%S)
FAULTS_CERTIFIERS ?= 3
faults: build
	./$(BIN) check --profile long --certifiers $(FAULTS_CERTIFIERS) --out $(FAULTS_DIR)
