package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

// checkCopy refuses a copy from donor that would not give an exact
// replica, before anything is copied.
func checkCopy(ctx context.Context, donor *Replica, o copyOptions) error {
	if o.emptyUnlogged {
		return nil
	}
	tables, err := unloggedTablesWithRows(ctx, donor.DSN())
	if err != nil {
		return fmt.Errorf("%s: look for unlogged tables before copying: %w", donor.Name, err)
	}
	if len(tables) > 0 {
		return errUnloggedTables(donor, tables)
	}
	return nil
}

// unloggedTablesWithRows lists the unlogged tables of the replicated
// database that hold at least one row (schema-qualified, quoted as
// identifiers).
func unloggedTablesWithRows(ctx context.Context, dsn string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, donorCheckTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
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
