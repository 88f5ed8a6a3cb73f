// Package capture holds the tests of the extension's writeset capture
// (extension/src/capture.c, relinfo.c, writeset.c): what a transaction's
// COMMIT sends for certification, checked on a real PostgreSQL 15 with the
// extension and a stand-in for the agent (internal/agent/agenttest), which
// decodes every writeset with proto.Unmarshal; and that what it sends
// applies on another server with internal/replica's applier. It has no
// code of its own.
//
//	rows_test.go     row changes and their collapse, TRUNCATE, partitions,
//	                 ON CONFLICT, MERGE, COPY, the key and row encoding
//	                 under any session's print settings
//	keys_test.go     unique index values, foreign-key references (direct
//	                 and looked up), keeping updates
//	keyless_test.go  tables without a primary key: rows by their whole
//	                 text, cancelled inserts, the key added and dropped,
//	                 applied on a second server
//	order_test.go    nested statements (AFTER and BEFORE triggers,
//	                 functions), savepoints, EXCEPTION blocks
//	scope_test.go    refusals (limits), what is not
//	                 captured (reads, temporary tables, the applier,
//	                 maintenance) and what is (session_replication_role)
//	install_test.go  which tables get the triggers, and who may drop them
//	apply_test.go    a workload's writesets applied on a second server
//	random_test.go   random transactions applied on a second server,
//	                 compared after each
//	stream_test.go   streamed writesets (past tashkent.stream_threshold),
//	                 read from the socket by a stand-in of their own: the
//	                 fragments' changes and cuts, the certified tables,
//	                 savepoints, nested statements, a cancel while they
//	                 are sent, the backend's memory, the commit's span;
//	                 applied fragment after fragment on a second server
//	bench_test.go    BenchmarkCaptureTPCB, capture's cost per TPC-B
//	                 transaction
//
// Run:
//
//	TASHKENT_PG_INCLUDEDIR=$(bash scripts/pg-server-headers.sh) go test -race ./internal/capture/
package capture
