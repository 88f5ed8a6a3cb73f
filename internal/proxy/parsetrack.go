package proxy

import "github.com/tashkent-db/tashkent/internal/sqlclass"

// The proxy classifies a Bind by the statement it tracks under the name it
// binds (track), so the tracking must follow what PostgreSQL really holds.
// A Parse changes it only if PostgreSQL completes it: a Parse reusing the
// name of a prepared statement that still exists is refused (42P05) and
// the old statement stays, and a Parse after an error in its exchange, or
// in a unit the proxy refused, never runs. track records a Parse at once
// (the unit's own Binds need it); the change is confirmed by the Parse's
// ParseComplete (relay, relayFlushed) and undone, once the unit has been
// handled, if none came. Found in review h21: a refused Parse "w" = BEGIN
// made the proxy run the prepared INSERT "w" as a BEGIN (deferred, so the
// INSERT never ran) or, with parameters, outside a transaction block,
// uncertified, on this replica only.

// preparedStatement is what the proxy tracks of a prepared statement: its
// statements as classified, and how many parameter types its Parse
// declared (a Bind must supply that many parameters, or PostgreSQL
// refuses it: onlyPortalStatement).
type preparedStatement struct {
	stmts          []sqlclass.Statement
	declaredParams int
}

// parseChange is what one Parse changed in the session's tracking.
type parseChange struct {
	name string
	prev preparedStatement
	had  bool
}

// noteParse records the tracking of name before a Parse redefines it.
func (s *session) noteParse(name string) {
	prev, had := s.statements[name]
	s.unconfirmedParses = append(s.unconfirmedParses, parseChange{name: name, prev: prev, had: had})
}

// confirmParse takes the oldest unconfirmed Parse as completed:
// PostgreSQL answers Parses in order, and one it skipped (after an
// error) is never followed by another's ParseComplete before the unit ends.
func (s *session) confirmParse() {
	if len(s.unconfirmedParses) > 0 {
		s.unconfirmedParses = s.unconfirmedParses[1:]
	}
}

// undoUnconfirmedParses restores the tracking the unit's Parses changed
// without PostgreSQL completing them, latest first.
func (s *session) undoUnconfirmedParses() {
	for i := len(s.unconfirmedParses) - 1; i >= 0; i-- {
		c := s.unconfirmedParses[i]
		if c.had {
			s.statements[c.name] = c.prev
		} else {
			delete(s.statements, c.name)
		}
	}
	s.unconfirmedParses = s.unconfirmedParses[:0]
}

// forgetStatements drops from the tracking the prepared statement name, or
// every named one for "" (DEALLOCATE ALL, DISCARD ALL), after SQL dropped
// them: a Bind of one must reach PostgreSQL (26000), not be taken for the
// statement it was. The unnamed statement is not dropped by either.
func (s *session) forgetStatements(name string) {
	if name != "" {
		delete(s.statements, name)
		return
	}
	for n := range s.statements {
		if n != "" {
			delete(s.statements, n)
		}
	}
}
