// Package wiretest runs wire-level golden tests: scripts of raw PostgreSQL
// protocol messages, run once directly against PostgreSQL 15 and once
// through a tashkent proxy, whose answers must be the same (CockroachDB's
// pkg/testutils/pgtest idea; ENGINEERING.md habit 6).
//
// # Why
//
// The client suites (internal/compat) prove that drivers work, but a driver
// hides the protocol: it may never send a Flush without Sync, Describe a
// portal, or pipeline an error. The proxy splits, wraps and re-sequences
// extended-protocol exchanges (internal/proxy/unit.go), so the exact order
// and content of backend messages is what can break. A script pins that
// order down, message by message, and PostgreSQL itself is the oracle: the
// expectations are written from a direct run (-update) and never from the
// proxy.
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
//
// `send` lines are a frontend message type and its pgproto3 JSON fields
// (CopyData takes its payload as Text, not hex). `until` reads backend
// messages until the listed types have arrived in that order (list
// ReadyForQuery twice to wait for two), and the lines after ---- are the
// messages expected, as normalized JSON, one per line. Each script runs on a
// fresh connection as user postgres to database postgres.
//
// # Allowed differences (normalize)
//
// Both answers are normalized before they are compared; these are the only
// differences between PostgreSQL and the proxy a script tolerates:
//
//   - ErrorResponse and NoticeResponse lose File, Line and Routine (the
//     source position in PostgreSQL, which changes between minor versions).
//   - A NoticeResponse whose message starts with "tashkent" is dropped: the
//     proxy adds one when it maps SERIALIZABLE or READ COMMITTED to
//     REPEATABLE READ (docs/GUARANTEES.md).
//   - RowDescription's TableOID becomes "table" when it is not 0: object
//     ids differ between two databases.
//   - The startup exchange is not compared at all: BackendKeyData (the
//     proxy gives its own cancel key) and the ParameterStatus values are
//     per connection.
//
// Known differences that scripts avoid rather than hide: the proxy runs
// every session at REPEATABLE READ (SHOW transaction_isolation differs), and
// a write outside a transaction block is certified, so it may fail with
// 40001 under contention, which scripts do not create.
//
// Run them with `go test ./internal/wiretest/`; rewrite the expectations
// from PostgreSQL with `go test ./internal/wiretest/ -update` and review the
// diff.
package wiretest
