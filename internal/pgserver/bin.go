package pgserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoBinaries is returned (wrapped) when the PostgreSQL server binaries
// cannot be found.
var ErrNoBinaries = errors.New("PostgreSQL 15 server binaries (initdb, postgres) not found")

// InstallHint says how to get the binaries on the machines the project runs
// on (Debian).
const InstallHint = "install them with `apt-get install postgresql-15` (Debian), " +
	"or point TASHKENT_PG_BIN at the directory that holds initdb and postgres"

// MajorVersion is the PostgreSQL major version tashkent is built for.
const MajorVersion = "15"

// FindBinDir returns the directory holding initdb and postgres. It looks, in
// order, at $TASHKENT_PG_BIN, /usr/lib/postgresql/15/bin (Debian's
// location, not on PATH) and PATH.
func FindBinDir() (string, error) {
	var tried []string
	check := func(dir string) bool {
		tried = append(tried, dir)
		for _, b := range []string{"initdb", "postgres"} {
			st, err := os.Stat(filepath.Join(dir, b))
			if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("TASHKENT_PG_BIN"); d != "" {
		if check(d) {
			return d, nil
		}
		return "", fmt.Errorf("%w in $TASHKENT_PG_BIN=%s; %s", ErrNoBinaries, d, InstallHint)
	}
	if d := "/usr/lib/postgresql/" + MajorVersion + "/bin"; check(d) {
		return d, nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		if d := filepath.Dir(p); check(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (looked in %s and PATH); %s", ErrNoBinaries, strings.Join(tried, ", "), InstallHint)
}
