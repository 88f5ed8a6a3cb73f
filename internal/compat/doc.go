// Package compat runs the client compatibility suites in compat/ (psycopg,
// asyncpg, node-postgres, pgjdbc, psql, and pgx from Go) twice: directly
// against a plain PostgreSQL 15 server, and against the replicas of a
// three-replica tashkent cluster (internal/clustertest), whose clients
// connect to the replicas' PostgreSQL servers themselves, as users do.
// Both must pass: a scenario that passes directly and fails on the cluster
// is a tashkent bug.
//
// The package has no code of its own; its test is the whole of it:
//
//	go test ./internal/compat -run TestCompat -v
//
// The test installs nothing. A missing tool or package fails the suites
// that need it with the command that installs it; `bash compat/install.sh`
// installs everything (Python packages, npm ci, Maven dependencies).
//
// Every suite reads the server to test from the environment (PGHOST,
// PGPORT, PGUSER, PGPASSWORD, PGDATABASE, and COMPAT_PORT2: a second
// replica of the cluster, or the same server when direct) and prints one
// line per scenario, "COMPAT-RESULT <scenario> PASS|FAIL|NA [detail]"; the
// test makes a subtest of each. The suites connect as a superuser role
// authenticated with SCRAM-SHA-256 (PostgreSQL's default password method).
// The role is created on one replica and reaches the others as replicated
// DDL; pg_hba.conf, a file of each server, is edited on each.
//
// What differs on the cluster, by design: concurrent updates of one row on
// two replicas fail with 40001 at COMMIT (retry_40001), as two REPEATABLE
// READ sessions of one server do.
//
// Bugs that are known and not fixed yet are listed in one place, knownBugs
// in known_bugs_test.go. Their scenarios still run (with a short timeout),
// the test prints "KNOWN BUG ..." for each, and it fails when one of them
// passes, so that the list stays true.
//
// Real tools run against the cluster only: TestAlembicMigrations and
// TestDjangoMigrations (compat/python/orm: migrations on replica 1 while an
// ORM application writes on replica 2) and TestSysbenchOLTP (sysbench's
// oltp_read_write on every replica at once); each compares the replicas'
// schemas and rows afterwards.
//
// Knobs: COMPAT_SUITES (comma-separated suites to run), COMPAT_ONLY
// (scenarios). The agents' and certifier's log is the test's log (shown
// for a failed test, and with -v).
package compat
