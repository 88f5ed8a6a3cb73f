package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// What is checked before a copy is taken, so that a transfer that cannot
// give an exact replica is refused before it copies anything.

// copyOptions are what a transfer's copy is taken with.
type copyOptions struct {
	// maxRate is pg_basebackup's --max-rate (empty: no limit).
	maxRate string
	// emptyUnlogged: copy although the donor's unlogged tables hold rows,
	// which the copy holds empty.
	emptyUnlogged bool
}

const (
	// donorCheckTimeout bounds the checks made on the donor before a copy.
	donorCheckTimeout = 30 * time.Second
	// donorCheckLockTimeout bounds the wait for a table's lock while
	// looking for rows (an ALTER TABLE in progress holds it).
	donorCheckLockTimeout = "5s"
	// unloggedNamesMax bounds the tables an error names.
	unloggedNamesMax = 10
)

// checkCopy refuses a copy from donor into target's directory that would
// not give an exact replica or would not fit, before anything is copied.
func checkCopy(ctx context.Context, donor, target *Replica, o copyOptions) error {
	if !o.emptyUnlogged {
		tables, err := unloggedTablesWithRows(ctx, donor.DSN())
		if err != nil {
			return fmt.Errorf("%s: look for unlogged tables before copying: %w", donor.Name, err)
		}
		if len(tables) > 0 {
			return errUnloggedTables(donor, tables)
		}
	}
	return checkRoom(ctx, donor, target)
}

// The free space a copy needs is the donor's databases as they are, plus
// the WAL the donor writes while the copy runs, which pg_basebackup -X
// stream copies too and which cannot be known in advance:
// copyWALMarginFraction of the databases, at least copyWALMarginMinBytes.
// (The donor's pg_wal itself is not copied.)
const (
	copyWALMarginFraction = 0.1
	copyWALMarginMinBytes = 64 << 20
)

// checkRoom refuses a copy from donor that the file system of target's
// directory has no room for.
func checkRoom(ctx context.Context, donor, target *Replica) error {
	size, err := databasesSize(ctx, donor.DSN())
	if err != nil {
		return fmt.Errorf("%s: measure the donor before copying: %w", donor.Name, err)
	}
	margin := max(int64(copyWALMarginFraction*float64(size)), copyWALMarginMinBytes)
	need := size + margin
	dir := existingAncestor(target.Dir)
	free, err := freeBytes(dir)
	if err != nil {
		return err
	}
	if free >= need {
		return nil
	}
	return fmt.Errorf("not enough free space for a copy of %s in %s: %s free, the copy needs about %s "+
		"(its databases, %s, and %s for the WAL written while it copies).\n"+
		"Free space on that file system (a rebuild's earlier data directory kept in %s may go), then run the command again",
		donor.Name, dir, formatBytes(free), formatBytes(need), formatBytes(size), formatBytes(margin),
		filepath.Join(filepath.Dir(target.Dir), removedDirName))
}

// databasesSize is the size of every database of the server at dsn
// (pg_database_size), in bytes.
func databasesSize(ctx context.Context, dsn string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, donorCheckTimeout)
	defer cancel()
	conn, err := connectFast(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var size int64
	err = conn.QueryRow(ctx, `SELECT sum(pg_catalog.pg_database_size(oid))::bigint FROM pg_catalog.pg_database`).Scan(&size)
	return size, err
}

// freeBytes is the space the file system holding dir has free for a
// process that is not root (the copy is written as the postgres user).
func freeBytes(dir string) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return 0, fmt.Errorf("free space in %s: %w", dir, err)
	}
	return int64(fs.Bavail) * int64(fs.Bsize), nil
}

// existingAncestor is dir, or its closest ancestor that exists.
func existingAncestor(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil || filepath.Dir(dir) == dir {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}

// unloggedTablesWithRows lists the unlogged tables of the replicated
// database that hold at least one row (schema-qualified, quoted as
// identifiers).
func unloggedTablesWithRows(ctx context.Context, dsn string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, donorCheckTimeout)
	defer cancel()
	conn, err := connectFast(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SET lock_timeout = '"+donorCheckLockTimeout+"'"); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class AS c
		JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND c.relpersistence = 'u' ORDER BY n.nspname, c.relname`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var withRows []string
	for _, name := range names { // quoted by format's %I
		var hasRows bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+name+")").Scan(&hasRows); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if hasRows {
			withRows = append(withRows, name)
		}
	}
	return withRows, nil
}

// errUnloggedTables says why a copy from donor is refused and what to do.
func errUnloggedTables(donor *Replica, tables []string) error {
	named := tables
	more := ""
	if len(named) > unloggedNamesMax {
		named, more = named[:unloggedNamesMax], fmt.Sprintf(" and %d more", len(tables)-unloggedNamesMax)
	}
	return fmt.Errorf("%s, the donor, has unlogged tables with rows: %s%s.\n"+
		"A physical copy (pg_basebackup) holds every unlogged table empty, while tashkent replicates their rows: "+
		"the copy would silently differ from the other replicas, and stop applying at the first change to a row it lacks.\n"+
		"Before copying, make them logged (ALTER TABLE %s SET LOGGED, on any serving replica; it is replicated) "+
		"or empty them (TRUNCATE); or run `tashkent replica add|rebuild` with --empty-unlogged to copy anyway, "+
		"with these tables empty on the copy (then TRUNCATE them, so that every replica holds them empty)",
		donor.Name, strings.Join(named, ", "), more, tables[0])
}
