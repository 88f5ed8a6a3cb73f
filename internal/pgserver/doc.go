// Package pgserver manages one local PostgreSQL 15 instance: initdb, a
// tashkent-managed configuration file, start, stop and crash.
//
// Both the tests (through internal/pgtest) and the product (`tashkent up`)
// run their replicas through this package, so that the way a replica is
// configured is written down once.
//
// # Why it looks like this
//
//   - The server is started as a direct child process (`postgres -D`), not
//     through `pg_ctl start`, which daemonizes and leaves us guessing at the
//     PID. We own the postmaster's PID, so Stop, Kill9 and the test cleanups
//     signal exactly the process we started and never look anything up by
//     name.
//   - initdb refuses to run as root. When the caller is root, initdb and
//     postgres are executed with the credentials of the `postgres` user
//     (setuid/setgid in the child, the same thing `runuser -u postgres`
//     does), and the data directory is chowned to it. The log file is opened
//     by us and handed to the child, so it is always writable.
//   - The configuration tashkent depends on (port, listen address,
//     synchronous_commit, fsync, socket directory, wal_level, ...) lives in
//     its own file, tashkent.conf, included from postgresql.conf. Init
//     rewrites only that file, so Init is idempotent on an existing cluster
//     and an operator's own edits of postgresql.conf survive, except where
//     they set the same parameters (tashkent.conf is read last).
//   - synchronous_commit is the knob the durability placements turn: `base`
//     and `api` run with it on, `mw` with it off (PostgreSQL then still keeps
//     data pages consistent and loses at most the last commits on a crash,
//     Tashkent §7.1 "case 2"). fsync stays on in every mode. With it off,
//     wal_writer_flush_after is 0, so that the WAL writer, which then
//     writes and flushes the commits, is woken once per WAL page rather
//     than at nearly every commit (server.go, walWriterFlushAfter).
//   - Kill9 kills the postmaster and all of its children. PostgreSQL puts
//     every child in its own session (setsid), so killing the process group
//     would not reach them; leftover backends would keep the shared memory
//     segment attached and a restart on the same data directory would fail.
//     Killing the whole tree is what a machine or container crash does.
//   - A server started by a short-lived command (`tashkent up`) must outlive
//     it: StartDetached puts postgres in a new session and returns its PID;
//     StopPID stops it later by that PID after checking, through
//     /proc/PID/cmdline, that the PID still is a postgres serving that data
//     directory (PIDs are reused).
//
// Linux is assumed (/proc, setsid, credentials).
package pgserver
