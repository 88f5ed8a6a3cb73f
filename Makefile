# The two commands of the README's quick start are `make demo` and `make test`.

GO        ?= go
BIN       := bin/tashkent
DEMO_DIR  ?= .demo
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config

# Every target that builds the extension compiles it against the PostgreSQL
# 15 server headers scripts/pg-server-headers.sh names: pg_config's, or
# Debian's postgresql-server-dev-15 unpacked without installing it (it says
# why when neither works).

.PHONY: build demo down test test-short vet bench-certifier compat-deps faults extension install-extension

build:
	$(GO) build -o $(BIN) ./cmd/tashkent

# Brings up a local 3-replica cluster in $(DEMO_DIR) (PostgreSQL 15 with the
# tashkent extension, an agent per replica, a certifier), runs a short
# workload with clients connected to the replicas and prints what happened
# and how to connect. `make down` stops it. tashkent builds the extension
# from its own source into an installation of its own the first time
# (internal/pgext): it needs make, a C compiler and the server headers.
demo: build
	@include="$$(bash scripts/pg-server-headers.sh)" && \
		TASHKENT_PG_INCLUDEDIR="$$include" ./$(BIN) up --data-dir $(DEMO_DIR)

down: build
	./$(BIN) down --data-dir $(DEMO_DIR)

# The extension alone, built with PGXS in extension/ (tashkent.so): what
# install-extension installs.
extension:
	@include="$$(bash scripts/pg-server-headers.sh)" && \
		$(MAKE) -C extension PG_CONFIG=$(PG_CONFIG) PG_INCLUDEDIR="$$include"

# For a real deployment: installs the extension into the system's
# PostgreSQL 15 (its lib and share directories; run as root), where
# `shared_preload_libraries = 'tashkent'` in postgresql.conf loads it at the
# next server start. Then run `tashkent agent` beside the server; the agent
# runs CREATE EXTENSION tashkent in the replicated database
# (docs/OPERATIONS.md). `tashkent up` needs none of this: it uses an
# installation of its own.
install-extension: extension
	@include="$$(bash scripts/pg-server-headers.sh)" && \
		$(MAKE) -C extension install PG_CONFIG=$(PG_CONFIG) PG_INCLUDEDIR="$$include"

# The client libraries of the compatibility suites (psycopg, asyncpg,
# node-postgres, pgjdbc), from PyPI, npm and Maven Central.
compat-deps:
	bash compat/install.sh

# The whole test suite: real PostgreSQL 15 instances with the extension,
# real processes, real clients, the race detector. This is what CI runs,
# against the server headers scripts/pg-server-headers.sh finds or fetches
# (a test that needs the extension fails where it cannot be built).
test: compat-deps
	gofmt -l . | (! grep .) || (echo "gofmt would change the files above" && exit 1)
	$(GO) vet ./...
	include=$$(bash scripts/pg-server-headers.sh) && \
		TASHKENT_PG_INCLUDEDIR="$$include" $(GO) test -race -count=1 -timeout 30m ./...

test-short:
	include=$$(bash scripts/pg-server-headers.sh) && \
		TASHKENT_PG_INCLUDEDIR="$$include" $(GO) test -short -count=1 ./...

bench-certifier: build
	./$(BIN) certifier-bench

# The fault test's long profile: a real 3-replica cluster with a certifier
# group of FAULTS_CERTIFIERS members (1: one certifier, with the netns
# partitions) under ten minutes of kill -9 (postmasters, backends holding
# the commit turn, agents, certifiers), SIGSTOP, partitions and client
# disconnects, checked by adya, the bank and long-fork checkers, durability
# and convergence, then the detector self-test (docs/RELIABILITY.md). The
# short profile runs in `make test` (internal/faults). Output stays in a new
# directory under .faults/.
FAULTS_DIR ?= .faults/$(shell date -u +%Y%m%dT%H%M%S)
FAULTS_CERTIFIERS ?= 3
faults: build
	@include="$$(bash scripts/pg-server-headers.sh)" && \
		TASHKENT_PG_INCLUDEDIR="$$include" ./$(BIN) check --profile long --certifiers $(FAULTS_CERTIFIERS) --out $(FAULTS_DIR)
