package proxy

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/replica"
)

// The proxy replicates DDL as the statements a client sends (Postgres-R(SI)
// §5.1: the other replicas execute the same text in the global order). DDL
// that runs inside something else (a DO block, a function, a procedure, a
// trigger fired by an INSERT) reaches the database without the proxy
// seeing it: it would change this replica alone, and a later write to what
// it made or changed would stop the other replicas' appliers for good. The
// database's DDL guard notes, in the transaction, each top-level statement
// under which DDL on a persistent object ran (replica.ClientDDLSetting);
// at COMMIT the proxy checks every noted statement against the DDL it
// replicates and refuses the transaction if one is not among them.
//
// A noted statement is the text PostgreSQL ran (current_query()): what the
// proxy sent for one statement of a simple query, or a prepared
// statement's whole text. The proxy's DDL is each statement's own text
// (sqlclass.Statement.SQL), which that text contains. A DDL statement's
// own nested DDL (tashkent's capture triggers on a new table, a serial
// column's sequence) is noted under the DDL statement, so it passes; the
// other replicas run it the same way. DDL a user's event trigger runs
// passes too, but the other replicas' appliers run with
// session_replication_role = replica, where such a trigger does not fire
// unless ENABLE ALWAYS: it stays here (docs/GUARANTEES.md, review h36).

// unreplicatedDDL is the COMMIT's error for a transaction in which DDL on
// persistent objects ran under a statement the proxy did not replicate as
// DDL; nil otherwise. notes is the guard's setting as the collect read it.
func (s *session) unreplicatedDDL(notes []byte) *pgproto3.ErrorResponse {
	if len(notes) == 0 {
		return nil
	}
	var noted []replica.ClientDDLNote
	if err := json.Unmarshal(notes, &noted); err != nil {
		return errorResponse(codeFeatureNotSupported,
			"tashkent cannot tell whether the transaction's DDL is replicated: the DDL guard's notes are unreadable, so the transaction was rolled back",
			"Setting "+replica.ClientDDLSetting+": "+err.Error(),
			"Do not set "+replica.ClientDDLSetting+"; it belongs to tashkent.")
	}
	for _, n := range noted {
		if !s.replicatesDDLOf(n.Query) {
			return errorResponse(codeFeatureNotSupported,
				"DDL inside a DO block, function, procedure or trigger is not replicated by tashkent: the transaction was rolled back",
				"The statement "+abbreviate(n.Query, 200)+" ran DDL ("+n.DDL+"), which would have changed this replica only.",
				"Send the DDL as statements of its own (for example CREATE TABLE IF NOT EXISTS instead of a DO block that tests and creates), so that every replica runs it. DDL on temporary objects may run anywhere.")
		}
	}
	return nil
}

// replicatesDDLOf reports whether query, a statement text PostgreSQL ran,
// holds one of the DDL statements the transaction replicates.
func (s *session) replicatesDDLOf(query string) bool {
	for _, ddl := range s.ddl {
		if strings.Contains(query, ddl) {
			return true
		}
	}
	return false
}

// abbreviate shortens text to at most n bytes of its start (whitespace
// runs folded), marking the cut.
func abbreviate(text string, n int) string {
	text = strings.Join(strings.Fields(text), " ")
	if len(text) <= n {
		return text
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "…"
}
