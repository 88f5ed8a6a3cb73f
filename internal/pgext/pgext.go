// Package pgext builds tashkent's PostgreSQL extension (../../extension)
// and gives a PostgreSQL installation that has it.
//
// The extension is C built with PGXS against the PostgreSQL 15 server
// headers. A server finds an extension's control file only in its share
// directory and its library in its lib directory, so an extension is
// normally installed into the system's PostgreSQL (`make -C extension
// install`, as root). Prepare does that without touching the system: it
// builds the extension that this binary embeds and installs it into an
// installation of its own, a directory tree that mirrors the system's
// PostgreSQL (its programs hard-linked or copied, everything else linked)
// plus tashkent's three files. PostgreSQL finds its share and lib
// directories relative to the program it runs as, so initdb and postgres
// started from that tree's bin directory see the extension, and a tashkent
// binary always runs with the extension built from its own source. Trees
// are kept per source and server, and reused.
package pgext

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/tashkent-db/tashkent/extension"
	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// IncludeDirEnv names the environment variable that gives the directory
// of the PostgreSQL server headers (postgres.h), for a machine where
// pg_config --includedir-server does not find them
// (scripts/pg-server-headers.sh prints one).
const IncludeDirEnv = "TASHKENT_PG_INCLUDEDIR"

// DirEnv names the environment variable that overrides where the
// installations are kept (default: a directory of this user's under the
// system's temporary directory, which the postgres user can traverse).
const DirEnv = "TASHKENT_PGEXT_DIR"

// Library is the name the server loads (shared_preload_libraries).
const Library = "tashkent"

// ErrNoServerHeaders says the server headers are missing.
var ErrNoServerHeaders = errors.New("the PostgreSQL 15 server headers are not installed " +
	"(apt-get install postgresql-server-dev-15, or set " + IncludeDirEnv + " to the directory " +
	"that scripts/pg-server-headers.sh prints)")

var prepared struct {
	once   sync.Once
	binDir string
	err    error
}

// Prepare returns the bin directory of a PostgreSQL installation that has
// the tashkent extension built from this binary's source, building it the
// first time. It is safe to call from concurrent processes.
func Prepare(ctx context.Context) (string, error) {
	prepared.once.Do(func() { prepared.binDir, prepared.err = prepare(ctx) })
	return prepared.binDir, prepared.err
}

func prepare(ctx context.Context) (string, error) {
	sys, err := systemLayout()
	if err != nil {
		return "", err
	}
	include, err := serverIncludeDir(sys.pgConfig)
	if err != nil {
		return "", err
	}
	base, err := baseDir()
	if err != nil {
		return "", err
	}
	id, err := installationID(sys)
	if err != nil {
		return "", err
	}
	final := filepath.Join(base, id)
	binDir := filepath.Join(final, sys.bin)
	if _, err := os.Stat(filepath.Join(final, "ready")); err == nil {
		return binDir, nil
	}
	tmp, err := os.MkdirTemp(base, "build-")
	if err != nil {
		return "", fmt.Errorf("pgext: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("pgext: %w", err)
	}
	root := filepath.Join(tmp, "root")
	if err := mirror(sys, root); err != nil {
		return "", err
	}
	if err := build(ctx, sys, include, filepath.Join(tmp, "src"), root); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, "ready"), nil, 0o644); err != nil {
		return "", fmt.Errorf("pgext: %w", err)
	}
	if err := os.Rename(root, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "ready")); serr == nil {
			return binDir, nil // another process finished first
		}
		return "", fmt.Errorf("pgext: %w", err)
	}
	return binDir, nil
}

// layout is where the system's PostgreSQL keeps its parts: programs,
// libraries and shared files. An installation holds each at the same path
// under its root (so `make install DESTDIR=root` fills it).
type layout struct {
	pgConfig           string
	bin, pkglib, share string
}

func systemLayout() (layout, error) {
	bin, err := pgserver.FindBinDir()
	if err != nil {
		return layout{}, err
	}
	l := layout{pgConfig: filepath.Join(bin, "pg_config"), bin: bin}
	out, err := exec.Command(l.pgConfig, "--pkglibdir", "--sharedir").Output()
	if err != nil {
		return layout{}, fmt.Errorf("pgext: %s: %w (it comes with postgresql-client-15)", l.pgConfig, err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2 {
		return layout{}, fmt.Errorf("pgext: unexpected output of %s: %q", l.pgConfig, out)
	}
	l.pkglib, l.share = lines[0], lines[1]
	return l, nil
}

func serverIncludeDir(pgConfig string) (string, error) {
	dir := os.Getenv(IncludeDirEnv)
	if dir == "" {
		out, err := exec.Command(pgConfig, "--includedir-server").Output()
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

// baseDir is where installations are kept: the user's own directory, which
// no one else may write (its programs run as root when tashkent does).
func baseDir() (string, error) {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("tashkent-pgext-%d", os.Geteuid()))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("pgext: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("pgext: %w", err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("pgext: %s must belong to this user and be writable by no one else (set %s to another directory)", dir, DirEnv)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("pgext: %w", err)
	}
	return dir, nil
}

// installationID names an installation by what it is made of: the
// extension's source and the system's PostgreSQL (its postgres program's
// size and time, which an upgrade changes).
func installationID(sys layout) (string, error) {
	h := sha256.New()
	var names []string
	if err := fs.WalkDir(extension.Source, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return err
	}); err != nil {
		return "", fmt.Errorf("pgext: %w", err)
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := extension.Source.ReadFile(n)
		if err != nil {
			return "", fmt.Errorf("pgext: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	st, err := os.Stat(filepath.Join(sys.bin, "postgres"))
	if err != nil {
		return "", fmt.Errorf("pgext: %w", err)
	}
	fmt.Fprintf(h, "%s %d %d\n", sys.bin, st.Size(), st.ModTime().UnixNano())
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// mirror makes root a copy of the system's installation: programs linked
// hard (or copied: a program finds its installation from its own path,
// which a symbolic link would lead back to the system's), every other
// entry a symbolic link, and the extension directory a real one, so that
// tashkent's files can be added.
func mirror(sys layout, root string) error {
	bin := filepath.Join(root, sys.bin)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return fmt.Errorf("pgext: %w", err)
	}
	entries, err := os.ReadDir(sys.bin)
	if err != nil {
		return fmt.Errorf("pgext: %w", err)
	}
	for _, e := range entries {
		if err := linkOrCopy(filepath.Join(sys.bin, e.Name()), filepath.Join(bin, e.Name())); err != nil {
			return err
		}
	}
	if err := symlinkEntries(sys.pkglib, filepath.Join(root, sys.pkglib), ""); err != nil {
		return err
	}
	share := filepath.Join(root, sys.share)
	if err := symlinkEntries(sys.share, share, "extension"); err != nil {
		return err
	}
	return symlinkEntries(filepath.Join(sys.share, "extension"), filepath.Join(share, "extension"), "")
}

// symlinkEntries makes dst a directory of symbolic links to src's
// entries, except the one named skip.
func symlinkEntries(src, dst, skip string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("pgext: %w", err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("pgext: %w", err)
	}
	for _, e := range entries {
		if e.Name() == skip {
			continue
		}
		if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return fmt.Errorf("pgext: %w", err)
		}
	}
	return nil
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("pgext: %w", err)
	}
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("pgext: %w", err)
	}
	if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
		return fmt.Errorf("pgext: %w", err)
	}
	return nil
}

// build compiles the embedded source in dir and installs it into root.
func build(ctx context.Context, sys layout, include, dir, root string) error {
	if err := writeSource(dir); err != nil {
		return err
	}
	args := []string{"PG_CONFIG=" + sys.pgConfig, "PG_INCLUDEDIR=" + include}
	for _, target := range [][]string{{}, {"install", "DESTDIR=" + root}} {
		cmd := exec.CommandContext(ctx, "make", append(append([]string{"-s", "-C", dir}, target...), args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("pgext: build the extension: make %s: %w\n%s", strings.Join(target, " "), err, out)
		}
	}
	return nil
}

func writeSource(dir string) error {
	return fs.WalkDir(extension.Source, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, p)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := extension.Source.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
