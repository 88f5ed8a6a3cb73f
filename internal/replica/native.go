package replica

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// The C capture (see "Capture in C" in doc.go): tashkent.capture_key and
// tashkent.take_writeset compiled against the PostgreSQL server headers,
// with the PL/pgSQL functions as the fallback.

//go:embed csrc/tashkent_capture.c
var captureSource []byte

// IncludeDirEnv names the environment variable that gives the directory
// of the PostgreSQL server headers (postgres.h), for a machine where
// pg_config --includedir-server does not find them.
const IncludeDirEnv = "TASHKENT_PG_INCLUDEDIR"

// ErrNoServerHeaders is BuildCaptureLibrary's error when the PostgreSQL
// server headers are not installed.
var ErrNoServerHeaders = errors.New("the PostgreSQL server headers are not installed (apt-get install postgresql-server-dev-15, or set " + IncludeDirEnv + ")")

// Capture chooses how Install captures writes.
type Capture string

const (
	// CaptureAuto is C where the library can be built here and the server
	// loads it, PL/pgSQL otherwise, with a warning that says why.
	CaptureAuto Capture = "auto"
	// CaptureC is C or an error.
	CaptureC Capture = "c"
	// CapturePLpgSQL is PL/pgSQL only.
	CapturePLpgSQL Capture = "plpgsql"
)

// ParseCapture checks a Capture's name.
func ParseCapture(s string) (Capture, error) {
	switch c := Capture(s); c {
	case CaptureAuto, CaptureC, CapturePLpgSQL:
		return c, nil
	}
	return "", fmt.Errorf("unknown capture %q (want auto, c or plpgsql)", s)
}

// BuildCaptureLibrary compiles the C capture with this machine's cc and
// returns the shared object's bytes.
func BuildCaptureLibrary() ([]byte, error) {
	include, err := serverIncludeDir()
	if err != nil {
		return nil, err
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return nil, errors.New("replica: capture library: no C compiler (cc): apt-get install gcc")
	}
	dir, err := os.MkdirTemp("", "tashkent-capture-build-")
	if err != nil {
		return nil, fmt.Errorf("replica: capture library: %w", err)
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "tashkent_capture.c")
	if err := os.WriteFile(src, captureSource, 0o600); err != nil {
		return nil, fmt.Errorf("replica: capture library: %w", err)
	}
	// Compiled in its directory, by relative names: the object records
	// the source's name, and a temporary directory's in it would make
	// every build's bytes differ, so that a proxy that starts again never
	// finds its library already in the data directory (findLibrary).
	compile := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-I", include, "-o", "tashkent_capture.so", "tashkent_capture.c")
	compile.Dir = dir
	if out, err := compile.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("replica: capture library: compile %s: %w\n%s", src, err, out)
	}
	return os.ReadFile(filepath.Join(dir, "tashkent_capture.so"))
}

// serverIncludeDir finds the directory holding postgres.h.
func serverIncludeDir() (string, error) {
	dir := os.Getenv(IncludeDirEnv)
	if dir == "" {
		out, err := exec.Command("pg_config", "--includedir-server").Output()
		if err != nil {
			return "", ErrNoServerHeaders
		}
		dir = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres.h")); err != nil {
		return "", ErrNoServerHeaders
	}
	return dir, nil
}

var builtLibrary struct {
	once  sync.Once
	bytes []byte
	err   error
}

// captureLibrary builds the C capture once per process.
func captureLibrary() ([]byte, error) {
	builtLibrary.once.Do(func() { builtLibrary.bytes, builtLibrary.err = BuildCaptureLibrary() })
	return builtLibrary.bytes, builtLibrary.err
}

// InstallCapture is Install with the capture choice asks for, warning
// through log (nil: slog's default) when CaptureAuto falls back. For C it
// installs everything with the PL/pgSQL capture first, then puts the
// library into the server's data directory (shipLibrary) and makes
// tashkent.capture_key and tashkent.take_writeset its C functions (in one
// transaction): a server that cannot load it (on
// another machine of another kind) keeps PL/pgSQL, which CaptureAuto
// accepts with a warning and CaptureC reports as the error.
func InstallCapture(ctx context.Context, conn *pgx.Conn, choice Capture, log *slog.Logger) error {
	if _, err := conn.PgConn().Exec(ctx, installSQL).ReadAll(); err != nil {
		return fmt.Errorf("replica: install: %w", err)
	}
	if choice == CapturePLpgSQL {
		return nil
	}
	err := installCaptureInC(ctx, conn)
	if err == nil || choice == CaptureC || ctx.Err() != nil {
		return err
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn("tashkent captures and collects writes in PL/pgSQL, not in C: each write statement costs its replica about 30 µs more CPU, each commit about 0.2 ms more",
		"reason", err.Error())
	return nil
}

func installCaptureInC(ctx context.Context, conn *pgx.Conn) error {
	library, err := captureLibrary()
	if err != nil {
		return err
	}
	path, err := shipLibrary(ctx, conn, library)
	if err != nil {
		return err
	}
	if _, err := conn.PgConn().Exec(ctx, captureInCSQL(path)).ReadAll(); err != nil {
		return fmt.Errorf("replica: install the C capture from %s: %w", path, err)
	}
	return nil
}

// shipLibrary puts library into the server's data directory, through SQL
// (lo_export writes the file as the server's own user, so a server on
// another machine gets it too), and returns its path for CREATE FUNCTION:
// relative ("./name"), which the server resolves in its data directory, so
// that a copy of the data directory (pg_basebackup) loads its own copy. The
// data directory is the server's alone (mode 0700): no one but its OS user
// and superusers can replace the file the function names, before or after
// a reboot, as anyone could in a shared directory such as /tmp. A file is
// never rewritten (a backend may have it loaded): one whose name has the
// library's hash and whose contents hash the same is reused (a symbolic
// link among them would be followed: only the server's user can make one
// there); otherwise a new file is written under a name of its own.
func shipLibrary(ctx context.Context, conn *pgx.Conn, library []byte) (string, error) {
	sum := sha256.Sum256(library)
	prefix := "tashkent_capture-" + hex.EncodeToString(sum[:8])
	var dir string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('data_directory')`).Scan(&dir); err != nil {
		return "", fmt.Errorf("replica: capture library: %w", err)
	}
	name, err := findLibrary(ctx, conn, dir, prefix, library)
	if err != nil {
		return "", err
	}
	if name == "" {
		name = prefix + "-" + rand.Text()[:12] + ".so"
		if err := exportFile(ctx, conn, dir+"/"+name, library); err != nil {
			return "", fmt.Errorf("replica: capture library: write %s in %s: %w", name, dir, err)
		}
	}
	return "./" + name, nil
}

// findLibrary returns the name of a file in dir whose name starts with
// prefix and whose contents are library's, or "". Entries it cannot read
// (a directory, a file the server may not open) are passed over, not
// errors: one of them must not keep the C capture out for good.
func findLibrary(ctx context.Context, conn *pgx.Conn, dir, prefix string, library []byte) (string, error) {
	candidates, err := queryNames(ctx, conn, `SELECT f.name FROM pg_catalog.pg_ls_dir($1) AS f(name)
		CROSS JOIN LATERAL pg_catalog.pg_stat_file($1 OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) f.name, true) AS s
		WHERE pg_catalog.starts_with(f.name, $2) AND NOT s.isdir AND s.size OPERATOR(pg_catalog.=) $3
		ORDER BY f.name`, dir, prefix, len(library))
	if err != nil {
		return "", fmt.Errorf("replica: capture library: look for it in %s: %w", dir, err)
	}
	sum := sha256.Sum256(library)
	for _, name := range candidates {
		var same bool
		err := conn.QueryRow(ctx, `SELECT pg_catalog.sha256(pg_catalog.pg_read_binary_file($1)) OPERATOR(pg_catalog.=) $2`,
			dir+"/"+name, sum[:]).Scan(&same)
		if err == nil && same {
			return name, nil
		}
	}
	return "", nil
}

func queryNames(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// exportFile writes data to path on the server, as a large object that
// lo_export writes out and that is then gone (one transaction: the object
// is never visible to anyone else).
func exportFile(ctx context.Context, conn *pgx.Conn, path string, data []byte) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var oid uint32
		if err := tx.QueryRow(ctx, `SELECT pg_catalog.lo_from_bytea(0, $1)`, data).Scan(&oid); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.lo_export($1, $2)`, oid, path); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_catalog.lo_unlink($1)`, oid)
		return err
	})
}

// captureInCSQL makes tashkent.capture_key and tashkent.take_writeset
// the C functions of library, a path on the database server's machine.
// CREATE OR REPLACE keeps each function's OID, owner and grants, so the
// triggers keep calling capture_key and the proxy's prepared collect
// take_writeset.
func captureInCSQL(library string) string {
	return `CREATE OR REPLACE FUNCTION tashkent.capture_key() RETURNS trigger
LANGUAGE c SECURITY DEFINER
AS ` + quoteLiteral(library) + `, 'tashkent_capture_key';
CREATE OR REPLACE FUNCTION tashkent.take_writeset(p_token pg_catalog.text,
	OUT tbl pg_catalog.text[], OUT op pg_catalog.text[], OUT key pg_catalog.text[], OUT "row" pg_catalog.text[])
LANGUAGE c SECURITY DEFINER
AS ` + quoteLiteral(library) + `, 'tashkent_take_writeset'`
}

// CaptureLanguage reports the language of the connected database's
// tashkent.capture_key: "c" or "plpgsql".
func CaptureLanguage(ctx context.Context, conn Querier) (string, error) {
	var lang string
	err := conn.QueryRow(ctx, `SELECT l.lanname FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_language AS l ON l.oid OPERATOR(pg_catalog.=) p.prolang
		WHERE p.oid OPERATOR(pg_catalog.=) 'tashkent.capture_key()'::pg_catalog.regprocedure`).Scan(&lang)
	if err != nil {
		return "", fmt.Errorf("replica: capture language: %w", err)
	}
	return lang, nil
}
