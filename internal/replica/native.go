package replica

import (
	"context"
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
	"syscall"

	"github.com/jackc/pgx/v5"
)

// The C capture (see "Capture in C" in doc.go): tashkent.capture_key
// compiled against the PostgreSQL server headers, with the PL/pgSQL
// function as its fallback.

//go:embed csrc/tashkent_capture.c
var captureSource []byte

// IncludeDirEnv names the environment variable that gives the directory
// of the PostgreSQL server headers (postgres.h), for a machine where
// pg_config --includedir-server does not find them.
const IncludeDirEnv = "TASHKENT_PG_INCLUDEDIR"

// ErrNoServerHeaders is BuildCaptureLibrary's error when the PostgreSQL
// server headers are not installed.
var ErrNoServerHeaders = errors.New("the PostgreSQL server headers are not installed (apt-get install postgresql-server-dev-15, or set " + IncludeDirEnv + ")")

// BuildCaptureLibrary compiles the C capture into dir (created if
// missing) and returns the path of the shared object, which PostgreSQL
// must be able to read: dir and the file are readable by everyone, since
// PostgreSQL runs as its own user. The file name carries a hash of the
// source, so a changed source never overwrites a library that servers
// have loaded; an existing file of the same name is reused.
func BuildCaptureLibrary(dir string) (string, error) {
	include, err := serverIncludeDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(captureSource)
	name := "tashkent_capture-" + hex.EncodeToString(sum[:6])
	so := filepath.Join(dir, name+".so")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("replica: capture library: %w", err)
	}
	if err := checkPrivateDir(dir); err != nil {
		return "", err
	}
	if _, err := os.Stat(so); err == nil {
		return so, nil
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", errors.New("replica: capture library: no C compiler (cc): apt-get install gcc")
	}
	tmp, err := os.MkdirTemp(dir, name+".build-")
	if err != nil {
		return "", fmt.Errorf("replica: capture library: %w", err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "tashkent_capture.c")
	if err := os.WriteFile(src, captureSource, 0o644); err != nil {
		return "", fmt.Errorf("replica: capture library: %w", err)
	}
	built := filepath.Join(tmp, "tashkent_capture.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-I", include, "-o", built, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("replica: capture library: compile %s: %w\n%s", src, err, out)
	}
	if err := os.Chmod(built, 0o755); err != nil {
		return "", fmt.Errorf("replica: capture library: %w", err)
	}
	// Concurrent builds (parallel test processes) each rename a complete
	// file; the last one wins, with the same content.
	if err := os.Rename(built, so); err != nil {
		return "", fmt.Errorf("replica: capture library: %w", err)
	}
	return so, nil
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

// checkPrivateDir refuses a directory that another user owns or may write
// to: PostgreSQL loads the library as its superuser, so whoever can replace
// it runs code in every replica.
func checkPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("replica: capture library: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("replica: capture library: %s must be a directory of this user's that no one else can write", dir)
	}
	return nil
}

var defaultLibrary struct {
	once sync.Once
	path string
	err  error
}

// DefaultCaptureLibrary builds the C capture, once per process, into a
// directory of this user's under the system's temporary directory, and
// returns its path; or the reason it cannot.
func DefaultCaptureLibrary() (string, error) {
	defaultLibrary.once.Do(func() {
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("tashkent-capture-%d", os.Getuid()))
		defaultLibrary.path, defaultLibrary.err = BuildCaptureLibrary(dir)
	})
	return defaultLibrary.path, defaultLibrary.err
}

// captureKeyInCSQL makes tashkent.capture_key the C function of library,
// a path on the database server's machine. CREATE OR REPLACE keeps the
// function's OID, owner and grants, so the triggers keep calling it.
func captureKeyInCSQL(library string) string {
	return `CREATE OR REPLACE FUNCTION tashkent.capture_key() RETURNS trigger
LANGUAGE c SECURITY DEFINER
AS ` + quoteLiteral(library) + `, 'tashkent_capture_key'`
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

// InstallWithCapture is Install with the C capture of library (a path on
// the database server's machine; "" for PL/pgSQL only). The whole install
// is one transaction: if the server cannot load the library, nothing of it
// is left and the error says why.
func InstallWithCapture(ctx context.Context, conn *pgx.Conn, library string) error {
	sql := installSQL
	if library != "" {
		sql += ";\n" + captureKeyInCSQL(library)
	}
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("replica: install: %w", err)
	}
	return nil
}

// installPreferringC installs with the C capture where it can be built
// here and loaded by the server, and with the PL/pgSQL capture otherwise,
// saying why once per process.
func installPreferringC(ctx context.Context, conn *pgx.Conn) error {
	library, err := DefaultCaptureLibrary()
	if err != nil {
		warnPLpgSQLOnce(err)
		return InstallWithCapture(ctx, conn, "")
	}
	if err := InstallWithCapture(ctx, conn, library); err != nil {
		warnPLpgSQLOnce(err)
		return InstallWithCapture(ctx, conn, "")
	}
	return nil
}

var plpgsqlWarning sync.Once

func warnPLpgSQLOnce(reason error) {
	plpgsqlWarning.Do(func() {
		slog.Warn("tashkent captures writes in PL/pgSQL, not in C: each write statement costs its replica about 30 µs more CPU",
			"reason", reason.Error())
	})
}
