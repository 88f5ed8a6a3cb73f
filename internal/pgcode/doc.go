// Package pgcode names every SQLSTATE the Go code produces, checks or
// documents: PostgreSQL's own codes (errcodes.txt in the PostgreSQL
// source) and tashkent's class TK, which the extension raises
// (extension/src/tashkent.h, extension/sql/tashkent--1.0.sql).
//
// Code outside this package compares and passes these constants, never a
// five-character literal, so that a reader finds every place that reacts
// to a code by searching for its name. Of reads the code of an error
// returned by pgx.
//
// The TK codes are the extension's; TestTKCodesMatchExtension keeps the
// two lists equal. docs/GUARANTEES.md lists the codes a client can see.
package pgcode
