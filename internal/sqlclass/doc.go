// Package sqlclass tells the proxy what each statement of a query string does to
// the transaction it runs in.
//
// # Why it exists
//
// The tashkent proxy sits between a client and one PostgreSQL replica. It must
// know, before PostgreSQL runs a statement, whether that statement starts or ends
// a transaction (BEGIN, COMMIT, ROLLBACK, END, ABORT, COMMIT AND CHAIN, ...),
// whether it can write (an update transaction needs certification at commit, a
// read-only one does not), whether it is DDL (replicated in total order, not by
// writeset), and which isolation level a transaction or the session asks for (the
// proxy runs every transaction under snapshot isolation, i.e. PostgreSQL's
// REPEATABLE READ). A client may send several statements in one simple-protocol
// Query message ("BEGIN; INSERT ...; COMMIT"), so the string must be split the way
// PostgreSQL splits it, which dollar quoting, nested comments and E'\n' escapes make
// impossible to do reliably with a hand-written scanner.
//
// # How
//
// Classify parses with github.com/pganalyze/pg_query_go/v6, which embeds the real
// PostgreSQL parser (libpg_query). It is the only package of the project that links
// it: it is a cgo build of about 30 s cold, and keeping it here keeps everything
// else fast to build. Each top-level statement's text is sliced out of the input by
// the parser's own locations. Results are cached in a bounded LRU keyed by the exact
// query string, because extended-protocol clients send the same Parse text again
// and again and a parse costs 10-50 µs (measured here: ~50 µs uncached, ~0.3 µs
// cached). Statement.Tag is checked in the tests against the command tags a real
// PostgreSQL 15 returns.
//
// # Limits, by design
//
//   - Classification is syntactic. "SELECT f()" is Read even when f is a volatile
//     function that writes (or nextval(), or pg_advisory_lock()): without the
//     catalog we cannot know, and PostgreSQL itself accepts such a SELECT in a READ
//     ONLY transaction only if f does not write. The proxy must therefore still look
//     at what actually happened (the writeset captured by triggers) before treating
//     a transaction as read-only at commit.
//   - CALL and DO (Kind Call) run arbitrary code: they may write, and a procedure
//     may even COMMIT or ROLLBACK inside. They are reported as such, not guessed.
//   - EXECUTE of an SQL-level prepared statement is Kind Execute; what it does is
//     the Inner kind reported for the matching PREPARE, which the caller must track.
//   - libpg_query is the PostgreSQL 17 grammar; the replicas run PostgreSQL 15. A few
//     newer constructs (JSON_TABLE, MERGE ... RETURNING) parse here and are then
//     rejected by the server, which is harmless: the server's error is what the
//     client gets.
//   - SELECT INTO and CREATE TABLE AS create a table: they are DDL (the new table
//     has no capture triggers, so its rows can only be replicated by running the
//     statement itself in total order), not Write.
//   - TempOnly is set only when it is knowable from the text: CREATE TEMP ...,
//     SELECT INTO TEMP, or objects explicitly qualified with pg_temp. For DDL,
//     Statement.Temp (a TempScope, tempscope.go) lists the objects the statement
//     changes and names, and which of them only the session's catalog can tell
//     temporary (an unqualified name may resolve to a temporary table); the proxy
//     asks the database and judges the statement with TempScope.Verdict: local,
//     replicated, or refused for mixing temporary and permanent objects.
package sqlclass
