package replica

import (
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// connectAs opens a connection to database db of srv as user, with the
// startup parameters params, closed when the test ends.
func connectAs(t *testing.T, srv *pgserver.Server, db, user string, params map[string]string) (*pgx.Conn, error) {
	t.Helper()
	u, err := url.Parse(srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(tctx(t), cfg)
	if err == nil {
		t.Cleanup(func() { conn.Close(tctx(t)) })
	}
	return conn, err
}

func mustConnectAs(t *testing.T, srv *pgserver.Server, db, user string, params map[string]string) *pgx.Conn {
	t.Helper()
	conn, err := connectAs(t, srv, db, user, params)
	if err != nil {
		t.Fatalf("connect to %s as %s: %v", db, user, err)
	}
	return conn
}

// refusedByFence runs sql on conn and wants the fence's refusal.
func refusedByFence(t *testing.T, conn *pgx.Conn, who, sql string) {
	t.Helper()
	_, err := conn.PgConn().Exec(tctx(t), sql).ReadAll()
	if pgcode.Of(err) != pgcode.CannotConnectNow {
		t.Errorf("%s, %s while the fence stands: %v; want 57P03", who, sql, err)
		return
	}
	pe := pgErr(t, err)
	if pe.Message != "this replica is rewinding versions that failed: it goes back to version 7 or below" || pe.Hint == "" {
		t.Errorf("%s, %s: the refusal says %q (hint %q)", who, sql, pe.Message, pe.Hint)
	}
}

// The rewind fence, on one server: while it stands, clients' BEGIN and
// statements that read (of the agent's role too, however they name
// themselves, and in a transaction begun before it) fail with 57P03 and
// what is going on; statements that read nothing go on, so a
// transaction can be rolled back. The agent's sessions
// (tashkent.agent_session, which only a superuser sets, and only at
// connection start), sessions in maintenance and sessions of another
// database go on. Once lowered, clients go on.
func TestTheRewindFenceRefusesClientsTransactionsAndLetsTheAgentsThrough(t *testing.T) {
	srv := pgtest.Start(t, pgtest.WithTashkent())
	agentParams := map[string]string{"tashkent.agent_session": "on", "application_name": "tashkent-agent"}
	agent := mustConnectAs(t, srv, "postgres", "postgres", agentParams)
	mustExec(t, agent, `CREATE EXTENSION tashkent`)
	mustExec(t, agent, `SELECT tashkent.set_admitting(true, '')`)
	for _, sql := range []string{`SET tashkent.maintenance = on`, `CREATE ROLE app LOGIN`, `CREATE DATABASE other`, `RESET tashkent.maintenance`} {
		mustExec(t, agent, sql)
	}

	faking := mustConnectAs(t, srv, "postgres", "postgres", map[string]string{"application_name": "tashkent-agent-apply"})
	open := mustConnectAs(t, srv, "postgres", "postgres", nil)
	mustExec(t, open, `BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class`)
	elsewhere := mustConnectAs(t, srv, "other", "postgres", nil)

	mustExec(t, agent, `SELECT tashkent.raise_rewind_fence(7)`)
	for _, sql := range []string{`SELECT 1`, `BEGIN`, `START TRANSACTION READ ONLY`, `SELECT count(*) FROM pg_class`, `DO $$BEGIN PERFORM 1; END$$`} {
		refusedByFence(t, faking, "a client named like the agent", sql)
	}
	mustExec(t, faking, `SET work_mem = '8MB'; SHOW work_mem`)
	if _, err := faking.Exec(tctx(t), `SET tashkent.agent_session = on`); pgcode.Of(err) != "55P02" {
		t.Errorf("SET tashkent.agent_session = on in a session: %v; want 55P02 (set at connection start only)", err)
	}
	refusedByFence(t, open, "a transaction begun before the fence", `SELECT count(*) FROM pg_class`)
	mustExec(t, open, `ROLLBACK`)
	app := mustConnectAs(t, srv, "postgres", "app", nil)
	refusedByFence(t, app, "another role", `SELECT 1`)
	if _, err := connectAs(t, srv, "postgres", "app", agentParams); pgcode.Of(err) != pgcode.InsufficientPrivilege {
		t.Errorf("a role that is not a superuser connecting with tashkent.agent_session on: %v; want 42501", err)
	}

	mustExec(t, agent, `BEGIN; SELECT count(*) FROM pg_class; COMMIT`)
	mustExec(t, mustConnectAs(t, srv, "postgres", "postgres", agentParams), `SELECT 1`)
	mustExec(t, faking, `SET tashkent.maintenance = on; SELECT 1; RESET tashkent.maintenance`)
	mustExec(t, elsewhere, `SELECT count(*) FROM pg_class`)

	mustExec(t, agent, `SELECT tashkent.lower_rewind_fence()`)
	mustExec(t, faking, `BEGIN; SELECT count(*) FROM pg_class; COMMIT`)
	mustExec(t, app, `SELECT 1`)
}
