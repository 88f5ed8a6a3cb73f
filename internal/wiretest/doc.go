// Package wiretest runs wire-level golden tests: scripts of raw PostgreSQL
// protocol messages, run once against a plain PostgreSQL 15 and once
// against a replica of a tashkent cluster (PostgreSQL with the extension,
// its agent and a certifier: internal/clustertest), whose answers must be
// the same except where a script says why not (CockroachDB's
// pkg/testutils/pgtest idea; ENGINEERING.md habit 5).
//
// # Why
//
// The client suites (internal/compat) prove that drivers work, but a driver
// hides the protocol: it may never send a Flush without Sync, Describe a
// portal, or pipeline an error. Clients talk to PostgreSQL itself, and the
// extension acts inside its transactions (certification at COMMIT, the
// commit order, refusals): a script pins down, message by message, that an
// exchange that writes, fails, copies or pipelines is answered on a replica
// as PostgreSQL answers it. PostgreSQL itself is the oracle: expectations
// are written from a direct run (-update).
//
// # Script format (testdata/*.wt)
//
// Lines starting with # are prose: each file opens with what it tests.
// Blocks are separated by blank lines:
//
//	send
//	Query {"String": "SELECT 1"}
//	Parse {"Name": "s", "Query": "SELECT $1::int"}
//	Bind {"PreparedStatement": "s", "Parameters": [{"text": "7"}]}
//	CopyData {"Text": "1\tone\n"}
//	Sync
//
//	until
//	ReadyForQuery
//	----
//	{"Type":"RowDescription",...}
//	{"Type":"ReadyForQuery","TxStatus":"I"}
//	---- replica
//	{"Type":"ErrorResponse",...}
//	{"Type":"ReadyForQuery","TxStatus":"I"}
//
// `send` lines are a frontend message type and its pgproto3 JSON fields
// (CopyData takes its payload as Text, not hex). `until` reads backend
// messages until the listed types have arrived in that order (list
// ReadyForQuery twice to wait for two), and the lines after ---- are the
// messages expected, as normalized JSON, one per line. Each script runs on a
// fresh connection as user postgres to database postgres.
//
// # Differences
//
// Where replication requires a replica to answer otherwise, the until
// block has a "---- replica" section with the replica's answer, and the
// script says why in "# differs:" lines (the parser insists on both or
// neither). TestGolden logs every script's reason; they are the wire-level
// differences docs/COMPATIBILITY.md lists:
//
//   - 20_serializable_mapped: SERIALIZABLE runs as REPEATABLE READ, with a
//     NOTICE at BEGIN and "repeatable read" from SHOW.
//   - 26_refused_on_a_replica: writes to a table without a primary key
//     (55000), LISTEN and pg_notify, advisory locks, large objects, and
//     PREPARE TRANSACTION of a writing transaction (0A000).
//
// # Normalization
//
// Both answers are normalized before they are compared, for what differs
// between any two PostgreSQL servers:
//
//   - ErrorResponse and NoticeResponse lose File, Line and Routine (the
//     source position in PostgreSQL, which changes between minor versions).
//   - RowDescription's TableOID becomes "table" when it is not 0: object
//     ids differ between two databases.
//   - The startup exchange is not compared at all: BackendKeyData and the
//     ParameterStatus values are per connection.
//
// Scripts run on one connection, so they create no conflict between
// replicas: a write's 40001 at COMMIT, the difference every client must
// handle, is tested by internal/compat and internal/guarantees.
//
// Run them with `go test ./internal/wiretest/`; rewrite the expectations
// with `go test ./internal/wiretest/ -update` (PostgreSQL's sections from
// PostgreSQL, existing replica sections from the replica) and review the
// diff.
package wiretest
