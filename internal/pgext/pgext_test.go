package pgext_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tashkent-db/tashkent/internal/pgext"
)

// The installation has the extension's files where the server looks for
// them, and programs of its own (the server finds its files from its path).
func TestPrepareInstallsTheExtensionBesideTheServer(t *testing.T) {
	bin, err := pgext.Prepare(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(bin)))))
	for _, p := range []string{
		filepath.Join(bin, "postgres"),
		filepath.Join(root, "usr/lib/postgresql/15/lib/tashkent.so"),
		filepath.Join(root, "usr/share/postgresql/15/extension/tashkent.control"),
		filepath.Join(root, "usr/share/postgresql/15/extension/tashkent--1.0.sql"),
		filepath.Join(root, "usr/share/postgresql/15/extension/plpgsql.control"),
	} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%v", err)
		}
	}
	st, err := os.Lstat(filepath.Join(bin, "postgres"))
	if err != nil || st.Mode()&os.ModeSymlink != 0 {
		t.Errorf("postgres in the installation is a symbolic link or missing (%v): the server would find the system's files", err)
	}
	again, err := pgext.Prepare(context.Background())
	if err != nil || again != bin {
		t.Errorf("a second Prepare gave %q, %v; want %q", again, err, bin)
	}
}
