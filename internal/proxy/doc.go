// Package proxy is the transparent proxy in front of one PostgreSQL replica
// (Tashkent §4 and §6.2; BRIEF.md "Processes and the path of a
// transaction"). Clients speak the PostgreSQL protocol to it as to any
// PostgreSQL server; it passes their statements through to its replica and
// intervenes only at transaction boundaries.
//
// # Layers
//
//   - pgwire (package pgwire) accepts a client, relays authentication to the
//     replica and hands over a Session: the client connection and its backend
//     connection, both speaking pgproto3.
//   - session.go reads the client's messages one unit at a time (a simple
//     Query; or extended-protocol messages up to Sync) and classifies the
//     statements (package sqlclass). Most units are forwarded untouched.
//   - unit.go and simple.go intervene where GSI needs it: a write outside a
//     transaction block is wrapped in one, so that it is certified like any
//     other (the database would otherwise commit it on its own); COMMIT of a
//     transaction that wrote is intercepted; requests for other isolation
//     levels are mapped to REPEATABLE READ, with a notice. A read that calls
//     a user's function counts as a write (usercode.go): the function may
//     write.
//   - commit.go is Tashkent §6.2 C1–C5: collect the writeset the capture
//     triggers buffered (package replica), ask the certifier (package
//     certclient), and either roll back with SQLSTATE 40001 or wait for the
//     version's turn (package sequencer), record the version in the same
//     database transaction and commit. DDL that ran inside a function or a
//     DO block, which no replicated statement carries, fails the COMMIT
//     (ddlnotes.go).
//   - statements.go holds what the proxy itself runs at every transaction
//     (its BEGIN, the collect, the ordered commit) as prepared statements
//     of each backend session, sent as pipelines with one Sync: neither
//     parsed nor planned again, one round trip each.
//   - replication.go owns the replica side: the certifier stream, the
//     sequencer, the applier that applies remote writesets in version order,
//     the lock watch that aborts a local transaction holding a row lock a
//     remote writeset needs (eager pre-certification, Tashkent §8.2), bounded
//     staleness, and recovery after the database restarted.
//
// # Snapshot labels
//
// A transaction's start_version is the replica's committed version read
// before the first unit of the transaction is forwarded: no later than the
// snapshot PostgreSQL takes at its first statement, which is safe under GSI
// ("conservative assigning of versions", Tashkent §6.2).
//
// # Where to start debugging
//
// Every session logs with its client address and backend PID. A transaction
// that fails certification returns SQLSTATE 40001 whose DETAIL is the
// certifier's: which row, which version. `tashkent status` shows each
// replica's version and lag.
package proxy
