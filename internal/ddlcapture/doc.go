// Package ddlcapture holds the tests of the extension's DDL capture and
// guards (extension/src/ddl.c and the files beside it: stmtkind.c,
// tempddl.c, unreplicated.c, protect.c, isolation.c, ddlguard.c, guard.c),
// run against a real PostgreSQL 15 with the extension and a stand-in for
// the agent (internal/agent/agenttest).
//
// What a test observes is what the agent would: a transaction with DDL to
// replicate asks for certification, and its writeset carries each DDL
// statement as an OP_DDL change holding the text; the start version is
// the version the DDL's snapshot saw. A statement that stays local asks
// for nothing. Refusals are observed as the SQLSTATE the client gets.
//
// Where to start when one fails: the server's log is printed with the
// failure (pgtest); the event triggers that tell ddl.c what a statement
// touched are tashkent.ddl_command_end and tashkent.ddl_sql_drop in
// extension/sql/tashkent--1.0.sql.
package ddlcapture
