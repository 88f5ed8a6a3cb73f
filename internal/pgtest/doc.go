// Package pgtest starts throwaway PostgreSQL 15 instances for tests.
//
// The project tests everything that touches PostgreSQL against real
// servers that the tests start themselves, never a mock. Start gives each
// test its own instance: a fresh cluster in its own directory under the
// temp dir, on a free port, stopped by PID and removed when the test ends.
//
// Choices worth knowing:
//
//   - Missing binaries fail the test (t.Fatal) with installation
//     instructions. Skipping would let a CI machine without PostgreSQL
//     report green while testing nothing.
//   - initdb runs with --no-sync: a test cluster need not survive a machine
//     crash, and the fsyncs cost about 3.5 s per instance. Crash tests
//     (Server.Kill9) are unaffected: killing PostgreSQL does not lose the
//     OS page cache. The server itself runs with fsync=on like production.
//   - When the tests run as root the directory is chowned to the postgres
//     user and created with mode 0755 under a world-traversable temp dir
//     (t.TempDir's directories are 0700 and not reachable by postgres).
//   - A test binary killed before its cleanups ran (go test -timeout, a
//     SIGKILL) leaves its servers running. Each directory records the PID
//     and start time of the test process that owns it; the first Start in
//     every process stops (by the PID in postmaster.pid, after checking it
//     is that postgres) and removes instances whose owner is gone.
//
// Set TASHKENT_PGTEST_DIR to put the instances somewhere other than
// os.TempDir(), and TASHKENT_PG_BIN to use other PostgreSQL binaries.
package pgtest
