// Package replica is what the agent (and the tools that inspect a
// cluster) do to one PostgreSQL replica's data from Go: apply the ordered
// stream of remote writesets, configure the replica's sequences and DDL
// trust, read its version, and checksum its tables. Everything that runs
// inside the database is the extension's (../../extension): capture of
// rows and DDL, the commit order, the version each commit records.
//
// # Remote apply
//
// Tashkent §6.2 step C4: the remote writesets a replica receives from the
// certifier are applied in a transaction of their own, and that
// transaction's commit moves the replica's version. The agent's applier
// (internal/agent/apply.go) hands Applier.Apply a run of log entries with
// consecutive versions first..last; Apply turns them into one transaction
// on the agent's registered apply connection:
//
//	BEGIN
//	SELECT tashkent.apply_versions(first, last)   -- extension/src/apply.c
//	SELECT set_config(session_replication_role = replica, print settings)
//	SELECT tashkent.check_ddl_generation(gen)     -- the metadata cache is current
//	DELETE ... / INSERT ... ON CONFLICT DO UPDATE -- per table, by primary key
//	DELETE ... / INSERT ...                       -- per table without one
//	[COPY ... FROM STDIN]                         -- a table's many inserted rows
//	[DDL text, then the next run of rows]         -- a DDL step, see below
//	COMMIT                                        -- waits for the turn of first
//
// apply_versions marks the transaction as committing first..last: its
// COMMIT waits in the extension until version first-1 is visible, records
// last as the replica's version with the commit (the replication origin's
// progress, extension/src/turn.c), and passes the turn on once visible, so
// that remote and local commits become visible in the certifier's order.
// A version already committed fails at once (TK002, IsAlreadyCommitted);
// the applier skips it.
//
// Rows are applied by primary key, batched. The changes of the whole run
// are collapsed to the last change per (table, key), in the order keys
// first appeared, and each table gets one DELETE for its deleted keys and
// one INSERT ... ON CONFLICT (pk) DO UPDATE for its upserted rows, the
// rows passed as one text[] of their record_out text (record_in parses
// them back) and the keys as one JSON array; all statements of a run are
// pipelined, so a run without DDL is one round trip. Two writesets of the
// run that wrote the same row are the "artificial conflicts" of Tashkent
// §5.2.1: applied as concurrent transactions they would conflict although
// their transactions never ran concurrently. Here they never meet: a run
// is one transaction, in which the later change of the row simply wins,
// and runs commit one after the other in the replica's order. When the
// upsert hits a unique violation (a secondary unique index whose values
// the run moved between rows, through intermediate values the collapse
// dropped), the transaction is retried once deleting every affected key
// before inserting the new rows. OP_UNIQUE_KEY changes are certified,
// never applied: the row changes carry the data. OP_REFERENCE changes
// are not applied either, but their parent rows are locked FOR KEY SHARE
// in the run's transaction, as the origin's foreign-key checks locked
// them: a local transaction here that deleted such a parent must block
// the run (and be doomed), since its certification starts from this
// replica's version, which relies on every version that concerns a row
// waiting for the row's lock (extension/src/commit.c).
//
// Large inserts go by COPY (copyrows.go). A table's upserted rows in a
// step that may not exist here (neither marked keeps_row nor following a
// delete of their key in the step), if there are copyRowsMin (1,000) of
// them or more, are loaded with COPY FROM STDIN
// after the upsert of its other rows, and so are the inserts of a table
// without a primary key and of the delete-then-insert mode: the rows'
// record text is turned into COPY's text format in Go as COPY reads it
// (appendCopyLine reads the fields exactly as record_in does, so each
// column's input function is handed the same string or NULL), one line in
// memory at a time. COPY halves the server's work per row against the
// INSERT from a text[] (BenchmarkApplyInserts), at the price of a round
// trip. It is used only where it does what the statements do: for a row
// that does not exist, the upsert is a plain insert; a table with an
// INSERT or UPDATE rule, or an INSERT or UPDATE statement trigger, that
// acts in the applier never is (COPY ignores rules and fires no UPDATE
// statement trigger). Such rows are mostly rows inserted at the origin,
// but not only: capture marks no row of a table-wide refresh (deleted and
// inserted again in one transaction), of an update that moves the
// primary key, or of a writeset from an older version, and no updated row
// of a table that a foreign key references through a unique index other
// than its primary key, which is never loaded by COPY for that reason. An
// attempt that used COPY and failed on an integrity constraint (a unique
// violation: the row exists, and the upsert would have updated it) or on
// a row text the converter does not read is made again with the
// statements alone, whose outcome is then the outcome; a table whose COPY
// failed so keeps to the statements until its metadata is loaded again.
//
// A table without a primary key has no key to collapse on: its changes
// are OP_INSERT_ROW (a row) and OP_DELETE_ROW (the whole old row, as the
// key). Equal rows cannot be told apart, so per step the changes of such
// a table are planned as a multiset (keylessRows): a delete takes back an
// earlier insert of an equal row of the step, or else deletes one row
// that was there. The table then gets one DELETE that picks, by ctid,
// exactly as many rows of each text as the step deletes, comparing each
// row's record_out text with capture's under capture's print settings
// (so types without equality, json and point, work), and one INSERT. It
// reads the whole table. A row to delete that is not there fails the
// statement (TK005, tashkent.keyless_row_missing): the replica has
// diverged, and the agent halts it.
//
// Foreign-key checks and ordinary triggers do not fire in the apply
// transaction (session_replication_role = replica): the origin checked the
// constraints and captured what its triggers and cascades wrote, and
// certified references make those checks hold across replicas. So the
// order of tables within a run does not matter. The capture triggers are
// enabled ALWAYS and fire, but capture nothing in the registered applier.
//
// # DDL steps
//
// TRUNCATE and DDL changes are barriers: the rows before them are sent
// first. The TRUNCATEs of a run are one statement, so that tables that
// reference each other can be truncated together, as the origin did. A
// DDL change carries its statement's text (extension/src/ddl.c); it runs
// through the simple query protocol (it may hold several statements),
// under the database's default search_path, as a new session at the origin
// would, with check_function_bodies off, as in a dump's restore. The
// extension runs CONCURRENTLY forms in their blocking form for the
// applier. After a DDL step the metadata cache is dropped and reloaded for
// the tables of the next steps.
//
// # Table metadata
//
// Each table's statements are built from its catalog entry: the name the
// catalog gives it (format('%I.%I')), never the table name of a Change,
// which comes over the network; its primary key columns and their types;
// its insertable (not generated) columns; whether its primary key is
// deferrable (then ON CONFLICT cannot use it, and its rows are applied by
// delete-then-insert). The Applier caches this per table, with the DDL
// generation it read it at: max(gen) of tashkent.ddl_log, to which the
// extension's event trigger adds a row for every DDL command on a
// permanent object, in every session, the applier's included. Each apply
// transaction that writes rows first runs
// tashkent.check_ddl_generation(gen), which fails (TK001) if the
// generation moved in its snapshot: DDL that reached the replica outside
// this Applier (a local session's certified DDL, or one in maintenance)
// cannot leave it with a stale column list, which would drop the new
// column's values. On TK001, or an error that a stale cache produces
// (undefined table or column, a changed type), the cache is refreshed and
// the transaction retried once.
//
// The statements are prepared (pgx's statement cache) and stay planned:
// the agent's apply connection runs with session_replication_role =
// replica for the whole session (PrepareApplySession), because PostgreSQL
// drops a session's cached plans whenever that setting changes value.
// TestApplyKeepsItsPlansOnAPreparedSession counts the plans an apply
// builds (debug_print_plan).
//
// # Sequences
//
// Sequences are not replicated; each replica hands out its own residue
// class of values (sequences.go). ConfigureSequences records this
// replica's index and the stride in tashkent.replica_settings and runs the
// extension's tashkent.align_all_sequences(); the extension's event
// trigger aligns the sequences that DDL creates or alters later.
// SetDDLTrust records whether roles that are not superusers may run
// replicated DDL (tashkent.ddl_trust). The agent runs both at every start,
// in transactions with tashkent.maintenance on: they are this replica's
// own, never replicated.
//
// # Rewind
//
// Under eventual durability (Kashi, "Eventual Durability", §2.2) versions
// are delivered before they are durable, and those the certifier then
// loses fail: a replica that committed failed versions (C, v] goes back
// to a version k <= C and replays (k, C] (Rewinder, rewinder.go).
//
//   - Pins (pin.go, pins.go): connections in a REPEATABLE READ transaction
//     whose snapshot holds exactly the versions up to its version (they
//     become visible in order), taken every 100 ms; a pin whose version is
//     durable is usable, and the pins older than the newest usable one are
//     dropped, at most three in all. A pin's rows print as capture's do.
//   - The undo window (undowindow.go): the entries delivered above the
//     oldest pin, local versions' included, bounded (64 MiB); what it lost
//     cannot be undone.
//   - The undo (undo.go): one transaction on the apply connection. Per
//     table with a primary key, every key (k, v] wrote is deleted and its
//     row at k, read through the pin, inserted; per table without one, the
//     inverse of the changes in reverse order, collapsed as a step of
//     Apply is (keylessRows), then applied the same way. It begins with
//     tashkent.rewind_begin(k, v) and deletes the history runs above k;
//     FinishRewind (tashkent.rewind_finish) then sets the replica's version
//     back (extension/src/rewind.c). A crash between the two leaves a
//     marker that ResumeRewind finishes.
//
// TRUNCATE, DDL and spans cannot be undone row by row (CannotUndoError:
// the replica is rebuilt instead); the certifier delivers them only once
// durable, so a failed suffix holds none.
//
// # Versions and checksums
//
// ReadVersion is tashkent.committed_version(): every version up to it is
// visible on the replica. Checksum gives, for every user table, its row
// count and an md5 over its rows' text in one REPEATABLE READ snapshot,
// with the print settings pinned, independent of physical order and of
// primary keys: two replicas that hold the same data give the same map
// (tests, the demo, `tashkent status`).
//
// # Search path
//
// Apply, ReadVersion, Checksum and the sequence set-up run under whatever
// search_path the database and role give the session, and an operator may
// list a schema before pg_catalog; a function, aggregate or operator there
// with a builtin's name and argument types would be found first (an int =
// that deletes the wrong rows, an md5 that makes every table sum alike).
// So they name every function, operator and catalog table with its schema
// (pg_catalog.max, OPERATOR(pg_catalog.=); "(key) IN (...)" is written
// "(key) OPERATOR(pg_catalog.=) ANY (...)"), which resolves to the same
// objects and plans. Key column types come from format_type, which names
// a type as the session's search_path finds it. The DDL text of a DDL step
// is the user's and runs under the database's default search_path, on
// purpose. TestApplyUnderAHostileSearchPath,
// TestChecksumUnderAHostileSearchPath,
// TestCheckDDLGenerationUnderAHostileSearchPath and
// TestSequenceSetupUnderAHostileSearchPath run them where decoys of every
// builtin they use are found first.
//
// # Tests
//
// The tests run real PostgreSQL servers with the extension, each with the
// stand-in for its agent (internal/agent/agenttest), which certifies every
// writeset a session commits with the next version of one log shared by
// the test's servers. A test writes through sessions of one server, as a
// client does, and applies the log's entries to the others with an
// Applier on their registered apply connections, as the agent does; the
// servers' Checksums must then agree. What capture puts in a writeset is
// tested with the extension (internal/capture, internal/ddlcapture); the
// whole path with the real agent and certifier in internal/agent and
// internal/clustertest.
//
// # Limitations
//
//   - An UPDATE or DELETE of a table without a primary key scans the table
//     (keylessDeleteSQL).
//   - Apply needs a superuser's connection registered as the applier
//     (tashkent.register_applier). User triggers marked ENABLE ALWAYS or
//     ENABLE REPLICA still fire during Apply, and during an undo: what
//     they write elsewhere is not undone.
//   - A key compares by its text: numeric 1.0 and 1.00 are one row to
//     PostgreSQL but two keys to the certifier, and two replicas can take
//     "equal" unique values with different text, certify both, and the
//     second fails when applied.
package replica
