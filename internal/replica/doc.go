// Package replica is tashkent's interface to one PostgreSQL replica's
// data: it captures the writesets of local transactions and applies the
// writesets of remote ones, recording in the database which versions it
// holds (Tashkent §6.2 and §8.1).
//
// # Writeset capture
//
// Install puts, on every user table with a primary key, statement-level
// AFTER INSERT/UPDATE/DELETE/TRUNCATE triggers (tashkent.capture) that
// append the statement's changes to a per-session buffer, the temporary
// table pg_temp.tashkent_writeset, which PrepareSession creates. Before
// COMMIT the proxy calls CollectWriteset, which in one round trip returns
// the transaction's changes, collapsed to the last change per (table, key),
// and empties the buffer.
//
// Why this shape:
//
//   - A temporary table is transactional: a rolled-back transaction or
//     savepoint leaves nothing in the buffer, with no bookkeeping in the
//     proxy. It is private to the session, so capture takes no shared lock
//     and writes no WAL.
//   - Statement-level triggers with transition tables see a statement's
//     rows as a set: one trigger call per statement, and an UPDATE that
//     moves primary keys (UPDATE t SET id = 3 - id) is recorded as "delete
//     the old keys no new row has, upsert every new row", which per-row
//     events cannot express.
//   - The key is a JSON array of the primary-key values, e.g. [42,"x"]:
//     readable, and compared as bytes by the certifier. The row is
//     PostgreSQL's text form of the row (record_out / record_in), exact for
//     every type; to_json would confuse SQL NULL with JSON null in json
//     columns. The capture function pins TimeZone, DateStyle,
//     IntervalStyle, bytea_output and extra_float_digits for its duration,
//     so that the same row gives the same key and row text on every
//     replica, whatever the client set.
//   - Writes that would not be replicated are refused with SQLSTATE 55000
//     and a hint: from a session that did not go through the proxy (capture
//     not prepared), and, through the proxy, to a table without a primary
//     key. An event trigger keeps the triggers right as tables are created
//     or their keys change, and fires even in session_replication_role =
//     replica, so that DDL applied from a remote writeset equips its tables
//     too.
//   - Triggers are ordinary (ENABLE ORIGIN), so they do not fire while
//     session_replication_role = replica, which is how Apply writes.
//
// # Unique indexes
//
// Two transactions that write different rows can still conflict: on
// different replicas they can give the same value to a UNIQUE column, and
// whichever is applied second fails on every other replica (on its origin,
// the applier waits for the row lock of the certified local transaction
// forever). So capture also records, as 'K' events and then OP_UNIQUE_KEY
// changes, the values of unique indexes the transaction took or freed: the
// new rows' values for an INSERT, the old rows' for a DELETE, for an UPDATE
// the values the statement added or removed (a value only moved between
// rows the statement wrote needs nothing: a transaction that could take or
// free it writes one of those rows too). The certifier treats each as a
// row named "<table>#<index>" with the index's values as its key, so two
// transactions that take (or one takes and one frees) the same value of
// the same index conflict. Apply skips them.
//
// Certified indexes are the valid unique indexes and constraints other
// than the primary key that are neither partial nor on expressions. Their
// list is passed to the capture triggers as arguments, computed when the
// triggers are installed; the event trigger reinstalls a table's triggers
// after CREATE INDEX, DROP INDEX, ALTER INDEX and ALTER TABLE. Values with
// a NULL are not recorded where NULLs may repeat (NULLS DISTINCT, the
// default). Tables without such indexes run exactly the statements they ran
// before. On a table with one, a single-row statement costs about 20 µs
// more in the trigger (50 µs for an UPDATE, which compares old and new
// values); a transaction of 10 single-row INSERTs about 10% more end to end
// (BenchmarkCapture).
//
// # Remote apply
//
// Apply applies a run of log entries with consecutive versions in one
// transaction with session_replication_role = replica: capture triggers
// and foreign-key triggers stay silent (the origin already checked the
// constraints and captured cascaded changes), so the order of tables does
// not matter. Changes are collapsed across the whole run to the last
// change per (table, key) and sent per table as one DELETE and one INSERT
// ... ON CONFLICT DO UPDATE, all pipelined: one round trip per Apply
// without DDL. TRUNCATE and DDL entries are barriers. The same
// transaction inserts the versions into tashkent.applied, so a recovered
// database image says which version it holds (ReadVersion), and applying
// a version twice fails.
//
// # Versions
//
// tashkent.applied gets one row per committed version, inserted by the
// transaction that commits it (RecordVersion for local commits, Apply for
// remote ones): an insert, not an update of a shared row, because local
// transactions run at REPEATABLE READ and concurrent updates of one row
// would abort each other. PruneApplied trims it.
//
// # Limitations
//
//   - Only tables with a primary key are replicated; writes to others are
//     refused through the proxy.
//   - Unique values are compared by their text, like primary keys. Where
//     the index's equality is coarser than the text (citext, a
//     nondeterministic collation, numeric 1.0 = 1.00), two replicas can
//     still take "equal" values with different text, certify both, and the
//     second fails when applied. Partial and expression unique indexes,
//     exclusion constraints, and a unique index still being built (CREATE
//     INDEX CONCURRENTLY) are not certified at all. Index names must be the
//     same on every replica (they are when DDL goes through tashkent).
//     Within one Apply, values moved between rows of a unique column are
//     handled by retrying with delete-then-insert.
//   - Sequences, large objects, temporary tables and unlogged-table
//     semantics are not replicated by capture; DDL travels as SQL text
//     (OP_DDL), which the proxy must log, and must be valid inside a
//     transaction block (no CREATE INDEX CONCURRENTLY).
//   - Writes straight to a partition are captured under the partition's
//     name, writes through the parent under the parent's: the certifier
//     does not see them as the same row. Write partitioned tables through
//     their parent. Plain table inheritance is not supported.
//   - Trigger names starting with tashkent_ are reserved.
//   - A key of type numeric compares by its text: 1.0 and 1.00 are one row
//     to PostgreSQL but two keys to the certifier.
//   - DISCARD ALL / DISCARD TEMP / RESET ALL in a proxy session undo
//     PrepareSession; the proxy must call it again.
//   - Apply and Install need a superuser (session_replication_role, event
//     triggers); user triggers marked ENABLE ALWAYS or REPLICA still fire
//     during Apply.
package replica
