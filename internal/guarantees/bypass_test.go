package guarantees_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// bypass is one way around replication: statements a session of user runs
// on replica 1, one after the other. Each statement either fails, or what
// it wrote is certified and reaches replica 2; and after it, writes to the
// tables it went for still reach replica 2 (it switched nothing off).
type bypass struct {
	name string
	user string // "mallory" (an ordinary role) or "postgres" (a superuser, tashkent.maintenance off)
	// options are the session's startup options (PGOPTIONS); a refused
	// connection ends the attempt.
	options string
	sql     []string
	// refused: every statement must fail (a way around that writes
	// nothing itself); otherwise statements may fail or succeed.
	refused bool
}

// bypasses are the ways around replication tried. Their rows use ids of
// their own, from 100 on. A statement is sent with the simple query
// protocol, or the extended one after "extended:"; "pipeline" is a
// pipeline of a write, COMMIT and a write (pipelinedWriteAndCommit).
var bypasses = []bypass{
	// Settings.
	{name: "session_replication_role = replica (role)", user: "mallory",
		sql: []string{`SET session_replication_role = replica`, `INSERT INTO notes VALUES (100, 'srr')`}},
	{name: "session_replication_role = replica (superuser)", user: "postgres",
		sql: []string{`SET session_replication_role = replica`, `INSERT INTO notes VALUES (101, 'srr su')`, `UPDATE owned SET v = 'srr su' WHERE id = 1`}},
	{name: "session_replication_role = replica in a DO block (superuser)", user: "postgres",
		sql: []string{`DO $$BEGIN SET LOCAL session_replication_role = replica; INSERT INTO notes VALUES (102, 'srr do'); END$$`}},
	{name: "SET tashkent.maintenance (role)", user: "mallory",
		sql: []string{`SET tashkent.maintenance = on`, `INSERT INTO notes VALUES (103, 'maintenance')`}},
	{name: "set_config tashkent.maintenance (role)", user: "mallory",
		sql: []string{`SELECT set_config('tashkent.maintenance', 'on', false)`, `INSERT INTO notes VALUES (104, 'set_config')`}},
	{name: "tashkent.maintenance in the startup packet (role)", user: "mallory", options: "-c tashkent.maintenance=on",
		sql: []string{`INSERT INTO notes VALUES (105, 'startup')`}},
	{name: "session_replication_role in the startup packet (role)", user: "mallory", options: "-c session_replication_role=replica",
		sql: []string{`INSERT INTO notes VALUES (106, 'startup')`}},
	{name: "ALTER ROLE SET tashkent.maintenance (role)", user: "mallory", refused: true,
		sql: []string{`ALTER ROLE mallory SET tashkent.maintenance = on`}},
	// The capture triggers, on a table the role owns, then as a superuser.
	{name: "DISABLE TRIGGER ALL (owner)", user: "mallory",
		sql: []string{`ALTER TABLE owned DISABLE TRIGGER ALL`, `INSERT INTO owned VALUES (110, 'disabled?')`}},
	{name: "DISABLE TRIGGER USER (owner)", user: "mallory", refused: true, sql: []string{`ALTER TABLE owned DISABLE TRIGGER USER`}},
	{name: "DISABLE TRIGGER tashkent_capture (owner)", user: "mallory", refused: true, sql: []string{`ALTER TABLE owned DISABLE TRIGGER tashkent_capture`}},
	{name: "DROP TRIGGER tashkent_capture (owner)", user: "mallory", refused: true, sql: []string{`DROP TRIGGER tashkent_capture ON owned`}},
	{name: "rename tashkent_capture (owner)", user: "mallory", refused: true, sql: []string{`ALTER TRIGGER tashkent_capture ON owned RENAME TO off`}},
	{name: "DISABLE TRIGGER ALL (superuser)", user: "postgres", refused: true, sql: []string{`ALTER TABLE notes DISABLE TRIGGER ALL`}},
	{name: "DISABLE TRIGGER USER (superuser)", user: "postgres", refused: true, sql: []string{`ALTER TABLE notes DISABLE TRIGGER USER`}},
	{name: "DISABLE TRIGGER tashkent_capture (superuser)", user: "postgres", refused: true, sql: []string{`ALTER TABLE notes DISABLE TRIGGER tashkent_capture`}},
	{name: "DISABLE TRIGGER tashkent_capture_truncate (superuser)", user: "postgres", refused: true, sql: []string{`ALTER TABLE notes DISABLE TRIGGER tashkent_capture_truncate`}},
	{name: "ENABLE REPLICA TRIGGER tashkent_capture (superuser)", user: "postgres", refused: true, sql: []string{`ALTER TABLE notes ENABLE REPLICA TRIGGER tashkent_capture`}},
	{name: "DROP TRIGGER tashkent_capture (superuser)", user: "postgres", refused: true, sql: []string{`DROP TRIGGER tashkent_capture ON notes`}},
	{name: "rename tashkent_capture (superuser)", user: "postgres", refused: true, sql: []string{`ALTER TRIGGER tashkent_capture ON notes RENAME TO off`}},
	{name: "DISABLE TRIGGER in a DO block (superuser)", user: "postgres", refused: true,
		sql: []string{`DO $$BEGIN EXECUTE 'ALTER TABLE notes DISABLE TRIGGER tashkent_capture'; END$$`}},
	// The event triggers, the extension, its schema and its functions.
	{name: "disable the DDL event trigger", user: "postgres", refused: true, sql: []string{
		`ALTER EVENT TRIGGER tashkent_ddl_command_end DISABLE`, `ALTER EVENT TRIGGER tashkent_ddl_sql_drop DISABLE`,
		`ALTER EVENT TRIGGER tashkent_capture_on_ddl DISABLE`, `ALTER EVENT TRIGGER tashkent_capture_on_drop ENABLE REPLICA`}},
	{name: "drop or rename an event trigger", user: "postgres", refused: true, sql: []string{
		`DROP EVENT TRIGGER tashkent_ddl_command_end`, `DROP EVENT TRIGGER tashkent_capture_on_ddl`,
		`ALTER EVENT TRIGGER tashkent_ddl_sql_drop RENAME TO off`, `ALTER EVENT TRIGGER tashkent_ddl_sql_drop OWNER TO mallory`}},
	{name: "tie a capture trigger to an extension (superuser)", user: "postgres", refused: true, sql: []string{
		`ALTER TRIGGER tashkent_capture ON notes DEPENDS ON EXTENSION plpgsql`}},
	{name: "move a table into information_schema (superuser)", user: "postgres", refused: true, sql: []string{
		`ALTER TABLE notes SET SCHEMA information_schema`}},
	{name: "replication origin functions (superuser)", user: "postgres", refused: true, sql: []string{
		`SELECT pg_replication_origin_session_setup('tashkent')`, `SELECT pg_replication_origin_xact_setup('0/1', now())`,
		`SELECT pg_replication_origin_advance('tashkent', '0/FFFFFFFF')`, `SELECT pg_replication_origin_drop('tashkent')`}},
	{name: "DROP EXTENSION", user: "postgres", refused: true, sql: []string{`DROP EXTENSION tashkent`, `DROP EXTENSION tashkent CASCADE`}},
	{name: "DROP EXTENSION (role)", user: "mallory", refused: true, sql: []string{`DROP EXTENSION tashkent`}},
	{name: "drop or rename the tashkent schema", user: "postgres", refused: true, sql: []string{
		`DROP SCHEMA tashkent CASCADE`, `ALTER SCHEMA tashkent RENAME TO off`}},
	{name: "drop the capture function", user: "postgres", refused: true, sql: []string{`DROP FUNCTION tashkent.capture() CASCADE`}},
	{name: "write tashkent's tables (role)", user: "mallory", refused: true, sql: []string{
		`INSERT INTO tashkent.ddl_trust (trust_roles) VALUES (true)`, `INSERT INTO tashkent.ddl_log DEFAULT VALUES`}},
	// Catalog writes.
	{name: "UPDATE pg_trigger (superuser)", user: "postgres", refused: true, sql: []string{
		`UPDATE pg_trigger SET tgenabled = 'D' WHERE tgname LIKE 'tashkent%'`,
		`SET allow_system_table_mods = on; UPDATE pg_trigger SET tgenabled = 'D' WHERE tgname LIKE 'tashkent%'`,
		`DELETE FROM pg_trigger WHERE tgname = 'tashkent_capture' AND tgrelid = 'notes'::regclass`,
		`UPDATE pg_event_trigger SET evtenabled = 'D'`}},
	{name: "catalog write inside a function (superuser)", user: "postgres", refused: true, sql: []string{
		`DO $$BEGIN UPDATE pg_catalog.pg_trigger SET tgenabled = 'D' WHERE tgname LIKE 'tashkent%'; END$$`}},
	{name: "UPDATE pg_trigger (role)", user: "mallory", refused: true, sql: []string{`UPDATE pg_trigger SET tgenabled = 'D' WHERE tgname LIKE 'tashkent%'`}},
	// The agent's functions.
	{name: "the agent's functions (role)", user: "mallory", refused: true, sql: []string{
		`SELECT tashkent.register_applier()`, `SELECT tashkent.apply_versions(100000, 100000)`,
		`SELECT tashkent.doom(pg_backend_pid(), 1)`, `SELECT tashkent.set_admitting(false, 'mallory')`,
		`SELECT tashkent.ensure_capture('public.notes'::regclass)`}},
	{name: "register as the applier (superuser)", user: "postgres",
		sql: []string{`SELECT tashkent.register_applier()`, `INSERT INTO notes VALUES (120, 'as the applier?')`}},
	{name: "apply versions without being the applier (superuser)", user: "postgres",
		sql: []string{`BEGIN; SELECT tashkent.apply_versions(100000, 100000); INSERT INTO notes VALUES (121, 'applied?'); COMMIT`,
			`INSERT INTO notes VALUES (122, 'after')`}},
	// Writes by other paths than a plain INSERT: each must be replicated.
	{name: "COPY FROM STDIN", user: "mallory", sql: []string{`COPY notes FROM STDIN`}},
	{name: "a function (SECURITY DEFINER) called by SELECT", user: "mallory", sql: []string{`SELECT public.add_note(131, 'by a definer function')`}},
	{name: "a writing function in a holdable cursor", user: "mallory", sql: []string{
		`DECLARE held CURSOR WITH HOLD FOR SELECT public.add_note(g, 'by a holdable cursor') FROM generate_series(132, 134) AS g`,
		`BEGIN; DECLARE held2 CURSOR WITH HOLD FOR SELECT public.add_note(135, 'by a holdable cursor'); COMMIT`}},
	{name: "a view with a rule, an updatable view, an INSTEAD OF trigger", user: "mallory", sql: []string{
		`INSERT INTO public.notes_by_rule VALUES (140, 'by a rule')`,
		`INSERT INTO public.notes_view VALUES (141, 'through a view')`,
		`INSERT INTO public.notes_instead VALUES (142, 'by an INSTEAD OF trigger')`}},
	{name: "a writable CTE, MERGE, ON CONFLICT", user: "mallory", sql: []string{
		`WITH w AS (INSERT INTO notes VALUES (150, 'cte') RETURNING id) SELECT count(*) FROM w`,
		`MERGE INTO notes USING (VALUES (151, 'merged')) AS s(id, body) ON notes.id = s.id
			WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.body)`,
		`INSERT INTO notes VALUES (150, 'upserted') ON CONFLICT (id) DO UPDATE SET body = excluded.body`}},
	{name: "a DO block with a caught error", user: "mallory", sql: []string{
		`DO $$BEGIN
			INSERT INTO notes VALUES (160, 'kept');
			BEGIN
				INSERT INTO notes VALUES (161, 'undone');
				RAISE EXCEPTION 'undo';
			EXCEPTION WHEN OTHERS THEN NULL;
			END;
		END$$`}},
	{name: "a write and COMMIT in one pipeline without BEGIN", user: "mallory", sql: []string{"pipeline"}},
	{name: "RESET ALL, DISCARD ALL and DEALLOCATE ALL, then a write", user: "mallory", sql: []string{
		`RESET ALL`, `DISCARD ALL`, `DEALLOCATE ALL`, `INSERT INTO notes VALUES (230, 'after DISCARD ALL')`}},
	{name: "a view that calls a writing function", user: "mallory", sql: []string{`SELECT * FROM public.writing_view`}},
	{name: "a writing function in the extended protocol", user: "mallory", sql: []string{
		`extended:SELECT public.add_note(232, 'extended')`}},
	{name: "a failed multi-statement implicit transaction", user: "mallory", sql: []string{
		`INSERT INTO notes VALUES (233, 'never'); INSERT INTO notes VALUES (100, 'duplicate')`}},
	{name: "LATIN1 client encoding", user: "mallory", sql: []string{
		`SET client_encoding = 'LATIN1'`, "INSERT INTO notes VALUES (170, 'caf\xe9')", `SET client_encoding = 'UTF8'`}},
	{name: "TRUNCATE by the owner", user: "mallory", sql: []string{`INSERT INTO owned VALUES (180, 'x')`, `TRUNCATE owned`,
		`INSERT INTO owned VALUES (1, 'back')`}},
	{name: "PREPARE TRANSACTION of a write", user: "mallory", refused: true, sql: []string{
		`BEGIN; INSERT INTO notes VALUES (190, '2pc'); PREPARE TRANSACTION 'bypass'`}},
	{name: "SET SESSION AUTHORIZATION and SET ROLE (superuser)", user: "postgres", sql: []string{
		`SET SESSION AUTHORIZATION mallory`, `INSERT INTO notes VALUES (200, 'as mallory')`, `RESET SESSION AUTHORIZATION`,
		`SET ROLE mallory`, `INSERT INTO notes VALUES (201, 'as mallory')`, `RESET ROLE`}},
	{name: "a table created and written in one transaction (superuser)", user: "postgres", sql: []string{
		`BEGIN; CREATE TABLE public.fresh (id int PRIMARY KEY); INSERT INTO public.fresh VALUES (1); COMMIT`}},
	{name: "an unlogged table (superuser)", user: "postgres", sql: []string{
		`CREATE UNLOGGED TABLE public.unlogged (id int PRIMARY KEY)`, `INSERT INTO public.unlogged VALUES (1)`}},
	{name: "a partitioned table (superuser)", user: "postgres", sql: []string{
		`CREATE TABLE public.parted (id int PRIMARY KEY) PARTITION BY RANGE (id)`,
		`CREATE TABLE public.parted_low PARTITION OF public.parted FOR VALUES FROM (0) TO (100)`,
		`INSERT INTO public.parted VALUES (1), (2)`, `UPDATE public.parted SET id = 3 WHERE id = 2`}},
	{name: "a temporary table shadowing a replicated one", user: "mallory", sql: []string{
		`CREATE TEMP TABLE notes (id int PRIMARY KEY, body text)`, `INSERT INTO notes VALUES (210, 'temporary')`,
		`INSERT INTO public.notes VALUES (211, 'permanent')`, `INSERT INTO pg_temp.notes SELECT * FROM public.notes`}},
	{name: "a temporary child of a replicated table", user: "mallory", sql: []string{
		`CREATE TEMP TABLE kid () INHERITS (public.owned)`, `UPDATE public.owned SET v = 'through the parent'`}},
}

// tashkent's functions replaced or taken out of the extension by a
// superuser without tashkent.maintenance. Run last, on a cluster of their
// own: one that succeeds switches capture off.
var functionBypasses = []bypass{
	{name: "take the capture function out of the extension, then drop it", user: "postgres", refused: true, sql: []string{
		`ALTER EXTENSION tashkent DROP FUNCTION tashkent.capture()`, `DROP FUNCTION tashkent.capture() CASCADE`}},
	{name: "replace the DDL event trigger's function", user: "postgres", refused: true, sql: []string{
		`CREATE OR REPLACE FUNCTION tashkent.ddl_command_end() RETURNS event_trigger LANGUAGE plpgsql AS 'BEGIN END'`}},
	{name: "replace the capture function", user: "postgres", refused: true, sql: []string{
		`CREATE OR REPLACE FUNCTION tashkent.capture() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'`}},
}

// Every way around replication an ordinary role, or a superuser without
// tashkent.maintenance, might try: each fails, or its write is certified
// and reaches the other replica; none switches capture off for later
// writes. With tashkent.maintenance on (superusers only), writes stay on
// the replica and its server log says so.
func TestNoWayAroundReplication(t *testing.T) {
	c := bypassCluster(t)
	var outcomes []string
	for n, b := range bypasses {
		outcome, ran := tryBypass(t, c, b)
		if ran {
			t.Errorf("%s: %s; want every statement refused", b.name, outcome)
		}
		outcomes = append(outcomes, fmt.Sprintf("%-62s %s", b.name+":", outcome))
		probe(t, c, n)
	}
	t.Logf("ways around replication and what became of them:\n%s", strings.Join(outcomes, "\n"))
	maintenanceStaysLocalAndIsLogged(t, c)
	c.converge()
}

// tashkent's own functions, replaced or dropped by a superuser: refused,
// or replication must go on.
func TestTashkentsFunctionsCannotBeReplacedOrDropped(t *testing.T) {
	c := bypassCluster(t)
	for n, b := range functionBypasses {
		outcome, ran := tryBypass(t, c, b)
		t.Logf("%s: %s", b.name, outcome)
		if ran {
			t.Errorf("%s: %s; want every statement refused", b.name, outcome)
		}
		probe(t, c, n)
	}
}

// bypassCluster is a 2-replica cluster with an ordinary role, mallory, its
// grants, and the objects the bypasses use.
func bypassCluster(t *testing.T) *cluster {
	t.Helper()
	c := start(t, 2, clustertest.Options{
		Settings: map[string]string{"max_prepared_transactions": "2"},
		Agent:    func(i int, cfg *agent.Config) {},
	})
	admin := c.Connect(0)
	for _, sql := range []string{
		`CREATE ROLE mallory LOGIN`,
		`GRANT CREATE ON SCHEMA public TO mallory`,
		`CREATE TABLE public.notes (id int PRIMARY KEY, body text)`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON public.notes TO mallory`,
		`CREATE TABLE public.owned (id int PRIMARY KEY, v text)`,
		`INSERT INTO public.owned VALUES (1, 'first')`,
		`ALTER TABLE public.owned OWNER TO mallory`,
		`CREATE TABLE public.probes (id int PRIMARY KEY)`,
		`CREATE FUNCTION public.add_note(p_id int, p_body text) RETURNS int LANGUAGE sql SECURITY DEFINER
			AS $$ INSERT INTO public.notes VALUES (p_id, p_body) RETURNING p_id $$`,
		`CREATE VIEW public.notes_view AS SELECT * FROM public.notes`,
		`CREATE VIEW public.notes_by_rule AS SELECT * FROM public.notes WHERE false`,
		`CREATE RULE by_rule AS ON INSERT TO public.notes_by_rule DO INSTEAD INSERT INTO public.notes VALUES (NEW.id, NEW.body)`,
		`CREATE VIEW public.notes_instead AS SELECT id, body FROM public.notes WHERE false`,
		`CREATE FUNCTION public.notes_instead() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN INSERT INTO public.notes VALUES (NEW.id, NEW.body); RETURN NEW; END $$`,
		`CREATE TRIGGER notes_instead INSTEAD OF INSERT ON public.notes_instead FOR EACH ROW EXECUTE FUNCTION public.notes_instead()`,
		`CREATE VIEW public.writing_view AS SELECT public.add_note(231, 'by a view') AS id`,
		`GRANT SELECT, INSERT ON public.notes_view, public.notes_by_rule, public.notes_instead, public.writing_view TO mallory`,
	} {
		execSQL(t, admin, sql)
	}
	c.converge()
	return c
}

// tryBypass runs b; it returns a line saying what happened to each
// statement, and whether one of a refused attempt's statements ran.
func tryBypass(t *testing.T, c *cluster, b bypass) (string, bool) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(c.dsn(0, b.user))
	if err != nil {
		t.Fatal(err)
	}
	if b.options != "" {
		cfg.RuntimeParams["options"] = b.options
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		if pgcode.Of(err) == "" {
			t.Fatalf("%s: connect: %v", b.name, err)
		}
		return "connection refused: " + pgcode.Of(err) + " " + pgError(err).Message, false
	}
	defer conn.Close(ctx)
	var what []string
	ran := false
	for _, sql := range b.sql {
		var err error
		switch {
		case sql == "pipeline":
			err = pipelinedWriteAndCommit(conn)
		case strings.HasPrefix(sql, "extended:"):
			err = extended(conn, strings.TrimPrefix(sql, "extended:"))
		case strings.HasPrefix(sql, "COPY") && strings.Contains(sql, "STDIN"):
			_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader("130\tby COPY\n"), sql)
		default:
			err = simple(conn, sql)
		}
		switch {
		case err != nil && pgcode.Of(err) == "":
			t.Fatalf("%s: %s: %v", b.name, oneLine(sql), err)
		case err != nil:
			what = append(what, "refused "+pgcode.Of(err)+" ("+firstWords(pgError(err).Message, 12)+")")
			_ = simple(conn, "ROLLBACK")
		case b.refused:
			ran = true
			what = append(what, "RAN: "+firstWords(oneLine(sql), 8))
		default:
			what = append(what, "ran")
		}
	}
	return strings.Join(what, "; "), ran
}

// probe checks that what any attempt did is the same on both replicas,
// and that a superuser's writes to the tables attempts went for still
// reach replica 2.
func probe(t *testing.T, c *cluster, n int) {
	t.Helper()
	if !probeReaches(t, c, n) {
		t.Fatalf("after attempt %d a write to public.notes did not reach replica 2", n)
	}
	c.sameTables()
}

// probeReaches writes to the tables attempts went for on replica 1 and
// says whether the writes reached replica 2.
func probeReaches(t *testing.T, c *cluster, n int) bool {
	t.Helper()
	admin := c.Connect(0)
	execSQL(t, admin, `INSERT INTO public.probes VALUES ($1)`, n)
	execSQL(t, admin, `INSERT INTO public.notes VALUES ($1, 'probe')`, 10000+n)
	execSQL(t, admin, `INSERT INTO public.owned VALUES ($1, 'probe') ON CONFLICT (id) DO UPDATE SET v = 'probe again'`, 10000+n)
	c.awaitDurable(1)
	return c.countOn(1, `SELECT count(*) FROM public.notes WHERE id = $1`, 10000+n) == 1 &&
		c.textOn(1, `SELECT v FROM public.owned WHERE id = $1`, 10000+n) != "<null>"
}

// pipelinedWriteAndCommit sends, in one extended-protocol pipeline, a
// write outside any block, COMMIT (which commits PostgreSQL's implicit
// transaction), and another write.
func pipelinedWriteAndCommit(conn *pgx.Conn) error {
	p := conn.PgConn().StartPipeline(context.Background())
	p.SendQueryParams(`INSERT INTO notes VALUES (175, 'piped')`, nil, nil, nil, nil)
	p.SendQueryParams(`COMMIT`, nil, nil, nil, nil)
	p.SendQueryParams(`INSERT INTO notes VALUES (176, 'piped after')`, nil, nil, nil, nil)
	if err := p.Sync(); err != nil {
		return err
	}
	return pipelineError(p)
}

func firstWords(s string, n int) string {
	w := strings.Fields(s)
	if len(w) > n {
		w = append(w[:n], "...")
	}
	return strings.Join(w, " ")
}

// With tashkent.maintenance on, a superuser's writes stay on this replica,
// and the server log says that the setting went on and which transaction
// committed without replication.
func maintenanceStaysLocalAndIsLogged(t *testing.T, c *cluster) {
	t.Helper()
	ctx := context.Background()
	conn := c.Connect(0)
	execSQL(t, conn, `SET tashkent.maintenance = on`)
	var xid string
	if err := conn.QueryRow(ctx, `INSERT INTO public.notes VALUES (9000, 'maintenance') RETURNING pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	execSQL(t, c.Connect(0), `INSERT INTO public.probes VALUES (9000)`)
	c.awaitDurable(1)
	if n := c.countOn(1, `SELECT count(*) FROM public.notes WHERE id = 9000`); n != 0 {
		t.Fatal("a write in maintenance reached replica 2")
	}
	if n := c.countOn(0, `SELECT count(*) FROM public.notes WHERE id = 9000`); n != 1 {
		t.Fatal("the write in maintenance is not on replica 1")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		log, err := os.ReadFile(c.DBs[0].LogPath())
		if err != nil {
			t.Fatal(err)
		}
		set := strings.Contains(string(log), `tashkent.maintenance set on by role "postgres"`)
		committed := strings.Contains(string(log), "tashkent.maintenance is on: transaction "+xid+" commits without replication")
		if set && committed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica 1's log does not say that maintenance went on (%v) and transaction %s committed without replication (%v)", set, xid, committed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The repair undone the same way, so that the replicas are equal again.
	execSQL(t, conn, `DELETE FROM public.notes WHERE id = 9000`)
	execSQL(t, conn, `SET tashkent.maintenance = off`)
}
