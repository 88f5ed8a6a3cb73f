package replica

import (
	"errors"
	"fmt"
)

// appendCopyLine appends to dst the line of COPY's text format (fields
// separated by tabs, \N for NULL, backslash escapes, a newline at the
// end) that loads the row whose record text (record_out's form, which
// capture prints) is record. The record has one field per column of the
// table that is not dropped, in column order; inserted[i] says whether
// field i goes into the line (false for a generated column, which COPY
// computes as INSERT does).
//
// The fields are read as record_in reads them (PostgreSQL's rowtypes.c),
// so that each column's input function is handed the same string, or the
// same NULL, by COPY as by the cast from text the applier's statements
// use: an unquoted empty field is NULL; "..." quotes (and "" inside
// quotes is one "); a backslash takes the next byte as it is, inside
// quotes or not; whitespace around the parentheses is skipped. Whatever
// record_in would refuse, appendCopyLine refuses too, and it also refuses
// what it cannot be sure record_in reads the same way (a NUL byte):
// the caller then applies the row with the statement, whose record_in
// gives the error, or not.
func appendCopyLine(dst, record []byte, inserted []bool) ([]byte, error) {
	p := skipSpace(record, 0)
	if p == len(record) || record[p] != '(' {
		return dst, errRecord("missing left parenthesis")
	}
	p++
	first := true
	for i, keep := range inserted {
		if i > 0 {
			if p == len(record) || record[p] != ',' {
				return dst, errRecord("too few columns")
			}
			p++
		}
		if keep && !first {
			dst = append(dst, '\t')
		}
		var err error
		if dst, p, err = copyField(dst, record, p, keep); err != nil {
			return dst, err
		}
		first = first && !keep
	}
	if p == len(record) || record[p] != ')' {
		return dst, errRecord("too many columns")
	}
	if p = skipSpace(record, p+1); p != len(record) {
		return dst, errRecord("junk after right parenthesis")
	}
	return append(dst, '\n'), nil
}

// copyField reads the record's field that starts at p, appends it to dst
// in COPY's text form if keep, and returns the position after it (at the
// ',' or ')' that ends it).
func copyField(dst, record []byte, p int, keep bool) ([]byte, int, error) {
	if p < len(record) && (record[p] == ',' || record[p] == ')') {
		if keep {
			dst = append(dst, `\N`...)
		}
		return dst, p, nil
	}
	inQuote := false
	for {
		if p == len(record) {
			return dst, p, errRecord("unexpected end of input")
		}
		ch := record[p]
		if !inQuote && (ch == ',' || ch == ')') {
			return dst, p, nil
		}
		p++
		switch {
		case ch == 0:
			return dst, p, errRecord("NUL byte")
		case ch == '\\':
			if p == len(record) || record[p] == 0 {
				return dst, p, errRecord("unexpected end of input")
			}
			ch = record[p]
			p++
		case ch == '"' && !inQuote:
			inQuote = true
			continue
		case ch == '"' && p < len(record) && record[p] == '"':
			p++ // "" inside quotes is one "
		case ch == '"':
			inQuote = false
			continue
		}
		if keep {
			dst = appendCopyByte(dst, ch)
		}
	}
}

// appendCopyByte appends one byte of a field's value as COPY's text
// format reads it back: the backslash, the delimiter (tab) and the line
// ends escaped, every other byte as it is.
func appendCopyByte(dst []byte, ch byte) []byte {
	switch ch {
	case '\\':
		return append(dst, `\\`...)
	case '\t':
		return append(dst, `\t`...)
	case '\n':
		return append(dst, `\n`...)
	case '\r':
		return append(dst, `\r`...)
	}
	return append(dst, ch)
}

// skipSpace skips the bytes C's isspace counts as space in every locale.
func skipSpace(b []byte, p int) int {
	for p < len(b) {
		switch b[p] {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			p++
		default:
			return p
		}
	}
	return p
}

// errMalformedRecord is appendCopyLine's error: the row text is not one
// it reads as record_in does.
var errMalformedRecord = errors.New("malformed record literal")

func errRecord(why string) error { return fmt.Errorf("%w: %s", errMalformedRecord, why) }
