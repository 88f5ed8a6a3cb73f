package proxy

import (
	"unicode/utf8"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// The proxy reads statements with PostgreSQL's parser (sqlclass), which
// takes UTF-8 only, and replicates DDL as its text, which the other
// replicas' appliers read as UTF-8. A client whose client_encoding is not
// UTF8 sends other bytes for characters outside ASCII: such a string did
// not parse, and the simple protocol forwarded it as it was, for
// PostgreSQL to report the syntax error. PostgreSQL, converting from the
// client's encoding, ran it instead, in its own implicit transaction: an
// INSERT of 'café' from a LATIN1 client committed on this replica only,
// never certified (review h36). So a statement that is not valid UTF-8
// and does not parse is refused, in both protocols; PostgreSQL would
// refuse it too under client_encoding UTF8. (Bytes the parser skips, in
// a comment, do not stop it: such a statement is classified as usual.)

const (
	notUTF8Message = "tashkent reads statements as UTF-8, and this one is not valid UTF-8: it was not run"
	notUTF8Hint    = "SET client_encoding TO 'UTF8' (or connect with client_encoding=UTF8) and send the statement again; with another client_encoding, tashkent supports statements in ASCII only."
)

// unparsableNotUTF8 reports a statement text the proxy cannot classify
// because it is not UTF-8.
func unparsableNotUTF8(sql string) bool {
	if utf8.ValidString(sql) {
		return false
	}
	_, err := sqlclass.Classify(sql)
	return err != nil
}
