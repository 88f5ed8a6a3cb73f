package agent

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Application names of the agent's connections, as pg_stat_activity
// shows them: the apply connection's apart, so that an operator (or a
// test) can tell which backend applies remote writesets.
const (
	controlApplicationName = "tashkent-agent"
	applyApplicationName   = "tashkent-agent-apply"
	// pinApplicationName: the connections that hold snapshots for rewinds
	// (rewind.go).
	pinApplicationName = "tashkent-agent-pin"
)

// databaseIdentitySQL names one life of the database: the postmaster's
// start time, as text that every session prints alike (seconds since the
// epoch, not a timestamptz that follows the session's TimeZone), and the
// extension's shared memory incarnation, new after a crash restart, which
// keeps the postmaster (and the gate closed, the applier unregistered). A
// different one means the database restarted.
const databaseIdentitySQL = `SELECT (EXTRACT(EPOCH FROM pg_catalog.pg_postmaster_start_time()))::pg_catalog.text
	OPERATOR(pg_catalog.||) '/' OPERATOR(pg_catalog.||) s.incarnation::pg_catalog.text FROM tashkent.status() AS s`

const committedVersionSQL = `SELECT tashkent.committed_version()`

// connConfig is the configuration of the agent's connections.
func (a *Agent) connConfig(applicationName string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(a.cfg.Postgres)
	if err != nil {
		return nil, fmt.Errorf("agent: the PostgreSQL connection string: %w", err)
	}
	cfg.Database = a.cfg.Database
	switch {
	case a.cfg.AdminUser != "":
		cfg.User = a.cfg.AdminUser
	case !namesUser(a.cfg.Postgres) && os.Getenv("PGUSER") == "":
		cfg.User = "postgres"
	}
	if a.cfg.AdminPassword != "" {
		cfg.Password = a.cfg.AdminPassword
	}
	cfg.RuntimeParams["application_name"] = applicationName
	// The extension tells the agent's sessions from clients by it: they
	// run while a rewind's fence refuses clients' transactions (rewind.go).
	// Only a superuser may set it, at connection start.
	cfg.RuntimeParams["tashkent.agent_session"] = "on"
	// The agent's own sessions must never wait for the agent (a role's
	// ALTER ROLE ... SET tashkent.sync_wait = on would make them), nor for
	// the replica to catch up, which they make it do.
	cfg.RuntimeParams["tashkent.sync_wait"] = "off"
	cfg.RuntimeParams["tashkent.catch_up_wait"] = "off"
	// A streamed transaction's apply transaction is idle while its next
	// fragment is delivered: a server-wide limit on idle transactions
	// would end it, and the run with it, again and again.
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	// In mode ed the server's synchronous_commit is on, so that clients
	// are safe by default; the agent's sessions are fast: its applies are
	// durable in the certifier's log, and its reads must not wait for
	// durability (extension/src/safe.c). What must reach disk sets it on
	// locally (the history, a rewind's undo).
	if a.cfg.Mode == ModeED {
		cfg.RuntimeParams["synchronous_commit"] = "off"
	}
	return cfg, nil
}

var userKeyword = regexp.MustCompile(`(^|\s)user\s*=`)

// namesUser reports whether a connection string names its user.
func namesUser(dsn string) bool {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		return u.User != nil && u.User.Username() != ""
	}
	return userKeyword.MatchString(dsn)
}

func (a *Agent) connect(ctx context.Context, applicationName string) (*pgx.Conn, error) {
	cfg, err := a.connConfig(applicationName)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*queryTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the replica's database: %w", err)
	}
	return conn, nil
}

// control is the agent's connection for everything but applying: lock
// watch, dooms, cancels, health checks, versions. Every question is
// bounded by queryTimeout.
type control struct {
	mu   sync.Mutex
	conn *pgx.Conn // nil once the run that owned it ended
}

// errControlClosed is what a question on a closed control connection
// gets: the run ended (a backend's goroutine may still be asking).
var errControlClosed = errors.New("the agent's control connection is closed: the run ended")

// use runs f on the connection, with the query timeout.
func (c *control) use(ctx context.Context, f func(ctx context.Context, conn *pgx.Conn) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return errControlClosed
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	return f(qctx, c.conn)
}

func (c *control) exec(ctx context.Context, sql string, args ...any) error {
	return c.use(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	})
}

func (c *control) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	return c.use(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, sql, args...).Scan(dest...)
	})
}

// query runs sql and calls row for each row, scanning into dest.
func (c *control) query(ctx context.Context, sql string, args []any, dest []any, row func()) error {
	return c.use(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return scanRows(ctx, conn, sql, args, dest, row)
	})
}

func scanRows(ctx context.Context, conn *pgx.Conn, sql string, args []any, dest []any, row func()) error {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		row()
	}
	return rows.Err()
}

func (c *control) committedVersion(ctx context.Context) (uint64, error) {
	var v int64
	if err := c.queryRow(ctx, committedVersionSQL, nil, &v); err != nil {
		return 0, fmt.Errorf("read the replica's version: %w", err)
	}
	return uint64(v), nil
}

// replace swaps in a new connection and closes the old one.
func (c *control) replace(ctx context.Context, conn *pgx.Conn) {
	c.mu.Lock()
	old := c.conn
	c.conn = conn
	c.mu.Unlock()
	if old != nil {
		old.Close(ctx)
	}
}

func (c *control) close(ctx context.Context) { c.replace(ctx, nil) }

// quoteText quotes a value for the few messages that show one.
func quoteText(s string) string { return "\"" + strings.ReplaceAll(s, "\"", "\\\"") + "\"" }
