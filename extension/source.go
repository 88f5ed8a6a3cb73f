// Package extension holds the source of tashkent's PostgreSQL extension (a
// C library built with PGXS, its control file and SQL scripts), embedded
// so that the tashkent binary can build and install the extension that
// matches it wherever it runs (internal/pgext). The C code is the
// extension; this file only carries it.
package extension

import "embed"

// Source is the extension's source tree: Makefile, tashkent.control,
// sql/ and src/.
//
//go:embed Makefile tashkent.control sql/*.sql src/*.c src/*.h
var Source embed.FS
