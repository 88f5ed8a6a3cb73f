package replica

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// The sealed writeset buffer (see "Trust model" in doc.go). Before, the
// buffer pg_temp.tashkent_writeset belonged to the session's role: any
// client could insert a row naming a table it may not write (the other
// replicas applied it as superuser), delete its own events (never
// replicated), or read the whole new rows it wrote (columns and rows it
// may not SELECT). These tests run as ordinary roles.

// sealSchema: salaries, which mallory may not touch at all and clerk may
// only update (amount), and mallory's own schema with a table of hers.
const sealSchema = `
CREATE ROLE mallory LOGIN;
CREATE ROLE clerk LOGIN;
CREATE TABLE salaries (id int PRIMARY KEY, amount int, note text);
INSERT INTO salaries VALUES (1, 100, 'secret 1'), (2, 200, 'secret 2');
GRANT UPDATE (amount) ON salaries TO clerk;
CREATE SCHEMA mallory AUTHORIZATION mallory;
SET ROLE mallory;
CREATE TABLE mallory.own (id int PRIMARY KEY, v text);
RESET ROLE;`

// roleConn connects as role without preparing the session.
func roleConn(t testing.TB, srv *pgserver.Server, role string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	c, err := pgx.ConnectConfig(tctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// trustRolesWithDDL lets roles that are not superusers run DDL in the
// database (SetDDLTrust; the DDL guard refuses it otherwise): the attacks
// here need DDL of the role (CREATE CAST, DROP TRIGGER, ...), which a
// trusted role can run.
func trustRolesWithDDL(t testing.TB, admin *pgx.Conn) {
	t.Helper()
	if err := SetDDLTrust(tctx(t), admin, true); err != nil {
		t.Fatal(err)
	}
}

// execErr runs sql as one simple query on c and returns its error as a
// PostgreSQL error's SQLSTATE and message ("" if it succeeded). The
// session is left outside any transaction.
func execErr(t testing.TB, c *pgx.Conn, sql string) (code, msg string) {
	t.Helper()
	_, err := c.PgConn().Exec(tctx(t), sql).ReadAll()
	if c.PgConn().TxStatus() != 'I' {
		mustExec(t, c, "ROLLBACK")
	}
	if err == nil {
		return "", ""
	}
	pe := pgErr(t, err)
	return pe.Code, pe.Message
}

// wantRefused fails unless sql fails on c with SQLSTATE code.
func wantRefused(t testing.TB, c *pgx.Conn, sql, code string) {
	t.Helper()
	if got, msg := execErr(t, c, sql); got != code {
		t.Errorf("%s: SQLSTATE %q (%s), want %s", sql, got, msg, code)
	}
}

// bufferStatements are every way to touch the buffer directly.
var bufferStatements = []string{
	`INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row) VALUES ('public.salaries', 'U', '[1]', '(1,999999,x)')`,
	`UPDATE pg_temp.tashkent_writeset SET row = NULL`,
	`DELETE FROM pg_temp.tashkent_writeset`,
	`TRUNCATE pg_temp.tashkent_writeset`,
	`SELECT * FROM pg_temp.tashkent_writeset`,
	`SELECT * FROM tashkent.take_writeset(NULL)`,
	`SELECT * FROM tashkent.take_writeset('guess')`,
	`SELECT * FROM tashkent.collect_writeset()`,
	`SELECT tashkent.trim_writeset_buffer(NULL)`,
	`COPY pg_temp.tashkent_writeset TO STDOUT`,
	`ALTER TABLE pg_temp.tashkent_writeset OWNER TO mallory`,
	`DROP TABLE pg_temp.tashkent_writeset`,
}

// TestSealedBufferRefusesClientRoles: no client role, the table owner
// included, can write, read, empty or take the buffer, in or out of a
// transaction that wrote; the forged row of the report (mallory, no
// rights on salaries, inserts an upsert of salaries into her buffer) does
// not reach the other database, and capture, collect and apply keep
// working for her own writes.
func TestSealedBufferRefusesClientRoles(t *testing.T) {
	srv, admin := instance(t, sealSchema)
	trustRolesWithDDL(t, admin)
	_, other := applyInstance(t, sealSchema)
	token, err := ReadRecordToken(tctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	mallory := roleSession(t, srv, "mallory")
	for _, sql := range bufferStatements {
		wantRefused(t, mallory, sql, "42501")
		// Inside a transaction that wrote (the buffer holds rows).
		wantRefused(t, mallory, `BEGIN; INSERT INTO mallory.own VALUES (100, 'x'); `+sql, "42501")
	}
	// The report's attack, as one transaction.
	wantRefused(t, mallory, `BEGIN; INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
		VALUES ('public.salaries', 'U', '[1]', '(1,999999,x)'); COMMIT`, "42501")
	// A client cannot attach capture functions with arguments of its own.
	wantRefused(t, mallory, `CREATE TABLE mallory.t2 (id int PRIMARY KEY);
		CREATE TRIGGER x AFTER INSERT ON mallory.t2 REFERENCING NEW TABLE AS tashkent_new
		FOR EACH STATEMENT EXECUTE FUNCTION tashkent.capture_references('public.salaries', 'L', 'x', 'y', 'z')`, "42501")

	// mallory's own writes are still captured, collected (with the token,
	// as the proxy does) and applied.
	var entries []*certifierpb.LogEntry
	for v, sql := range []string{
		`INSERT INTO mallory.own VALUES (1, 'a'), (2, 'b')`,
		`UPDATE mallory.own SET v = 'c' WHERE id = 1; DELETE FROM mallory.own WHERE id = 2`,
	} {
		e := commitAsClient(t, mallory, uint64(v+1), sql, token)
		for _, c := range e.GetWriteset().GetChanges() {
			if !strings.HasPrefix(c.GetTable(), "mallory.") {
				t.Errorf("mallory's writeset names %s", change(c))
			}
		}
		entries = append(entries, e)
	}
	if err := Apply(tctx(t), other, entries); err != nil {
		t.Fatal(err)
	}
	sameChecksums(t, checksum(t, admin), checksum(t, other))
	eqStrings(t, "salaries on the other database", queryStrings(t, other, `SELECT s::text FROM salaries s ORDER BY id`),
		[]string{"(1,100,\"secret 1\")", "(2,200,\"secret 2\")"})

	// The owner of a table is no exception.
	mustExec(t, admin, `ALTER TABLE salaries OWNER TO clerk`)
	clerk := roleSession(t, srv, "clerk")
	for _, sql := range bufferStatements {
		wantRefused(t, clerk, `BEGIN; UPDATE salaries SET amount = 1; `+sql, "42501")
	}
}

// TestSealedBufferHidesWhatTheRoleMayNotRead: the read leak. clerk may
// update salaries.amount and read nothing; the buffer holds the whole new
// rows of her UPDATE (the note column included) and she cannot read them,
// while the proxy's collect gets them.
func TestSealedBufferHidesWhatTheRoleMayNotRead(t *testing.T) {
	srv, admin := instance(t, sealSchema)
	trustRolesWithDDL(t, admin)
	token, err := ReadRecordToken(tctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	clerk := roleSession(t, srv, "clerk")
	wantRefused(t, clerk, `SELECT note FROM salaries`, "42501")
	for _, sql := range []string{
		`SELECT string_agg(row, ' ') FROM pg_temp.tashkent_writeset`,
		`SELECT "row" FROM tashkent.take_writeset(NULL)`,
		`SELECT string_agg("row", ' ') FROM tashkent.collect_writeset()`,
	} {
		wantRefused(t, clerk, `BEGIN; UPDATE salaries SET amount = 7; `+sql, "42501")
	}
	e := commitAsClient(t, clerk, 1, `UPDATE salaries SET amount = 7`, token)
	eqStrings(t, "the proxy's collect", changes(e.GetWriteset().GetChanges()), []string{
		`U public.salaries [1] (1,7,"secret 1")`, `U public.salaries [2] (2,7,"secret 2")`})
}

// TestSealedBufferCannotBeReplaced: a client that drops the buffer
// (DISCARD TEMP drops every temporary table of the session, with no
// privilege check) cannot put a table of its own in its place, whether in
// the same simple query as the DISCARD (before the proxy prepares the
// session again), from a function (which the proxy does not see), by
// renaming, or as a view; a buffer the session owns (an older tashkent's)
// is replaced by PrepareSession; one that slipped through is refused by
// the C capture or, behind the PL/pgSQL one, by the collect, which
// refuses it in either language.
func TestSealedBufferCannotBeReplaced(t *testing.T) {
	srv, admin := instance(t, sealSchema)
	trustRolesWithDDL(t, admin)
	token, err := ReadRecordToken(tctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	mallory := roleSession(t, srv, "mallory")
	const decoy = `CREATE TEMP TABLE tashkent_writeset (seq bigserial, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
		tbl text NOT NULL, op text NOT NULL, key text, row text)`
	for _, sql := range []string{
		`DISCARD TEMP; ` + decoy,
		`DO $$BEGIN EXECUTE 'DISCARD TEMP'; EXECUTE $q$` + decoy + `$q$; END$$`,
		`DISCARD TEMP; CREATE TEMP TABLE x (seq bigserial, xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
			tbl text NOT NULL, op text NOT NULL, key text, row text); ALTER TABLE x RENAME TO tashkent_writeset`,
		`DISCARD TEMP; CREATE TEMP VIEW tashkent_writeset AS SELECT 1 AS seq`,
		`DISCARD TEMP; CREATE TEMP SEQUENCE tashkent_writeset`,
	} {
		wantRefused(t, mallory, sql, "42501")
	}
	var owner string
	if err := mallory.QueryRow(tctx(t), `SELECT pg_get_userbyid(relowner) FROM pg_class
		WHERE oid = 'pg_temp.tashkent_writeset'::regclass`).Scan(&owner); err != nil || owner != "tashkent_capture" {
		t.Fatalf("the buffer's owner after the attempts: %q (%v)", owner, err)
	}

	// A buffer of the session's own role, as an older tashkent created it
	// (made here with the event trigger off), granted to everyone.
	legacy := roleConn(t, srv, "mallory")
	mustExec(t, admin, `ALTER EVENT TRIGGER tashkent_ddl DISABLE`)
	mustExec(t, legacy, decoy+`; GRANT ALL ON pg_temp.tashkent_writeset, pg_temp.tashkent_writeset_seq_seq TO PUBLIC;
		SELECT set_config('tashkent.capture', 'on', false)`)
	mustExec(t, admin, `ALTER EVENT TRIGGER tashkent_ddl ENABLE ALWAYS`)
	// The C capture refuses to write into it (it checks the owner). The
	// PL/pgSQL capture writes into it (it is granted to tashkent_capture
	// too), but the collect refuses it: the rows are the session's to forge.
	lang, err := CaptureLanguage(tctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = legacy.Exec(tctx(t), `BEGIN; INSERT INTO mallory.own VALUES (1, 'a')`)
	if lang == "c" && err == nil {
		t.Fatal("the C capture wrote into a buffer that is not tashkent_capture's")
	}
	if err == nil {
		mustExec(t, legacy, `INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row) VALUES ('public.salaries', 'U', '[1]', '(1,999999,x)')`)
		_, err = CollectWritesetWithToken(tctx(t), legacy, token)
	}
	if pe := pgErr(t, err); pe.Code != "42501" || !strings.Contains(pe.Message, "belongs to role mallory") || pe.Hint == "" {
		t.Errorf("capture into, or collect from, the session's own buffer: %s %q hint %q", pe.Code, pe.Message, pe.Hint)
	}
	mustExec(t, legacy, `ROLLBACK`)
	// The collect refuses it whoever wrote the rows, in C as in PL/pgSQL.
	mustExec(t, legacy, `BEGIN; INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row) VALUES ('public.salaries', 'U', '[1]', '(1,999999,x)')`)
	_, err = CollectWritesetWithToken(tctx(t), legacy, token)
	if pe := pgErr(t, err); pe.Code != "42501" || !strings.Contains(pe.Message, "belongs to role mallory") || pe.Hint == "" {
		t.Errorf("collect from the session's own buffer: %s %q hint %q", pe.Code, pe.Message, pe.Hint)
	}
	mustExec(t, legacy, `ROLLBACK`)
	// PrepareSession refuses it; dropped, it makes a sealed one.
	err = PrepareSession(tctx(t), legacy)
	if pe := pgErr(t, err); pe.Code != "42501" || !strings.Contains(pe.Message, "belongs to role mallory") || pe.Hint == "" {
		t.Errorf("PrepareSession over the session's own buffer: %s %q hint %q", pe.Code, pe.Message, pe.Hint)
	}
	mustExec(t, legacy, `DROP TABLE pg_temp.tashkent_writeset`)
	if err := PrepareSession(tctx(t), legacy); err != nil {
		t.Fatal(err)
	}
	if err := legacy.QueryRow(tctx(t), `SELECT pg_get_userbyid(relowner) FROM pg_class
		WHERE oid = 'pg_temp.tashkent_writeset'::regclass`).Scan(&owner); err != nil || owner != "tashkent_capture" {
		t.Fatalf("the buffer's owner after PrepareSession: %q (%v)", owner, err)
	}
	wantRefused(t, legacy, bufferStatements[0], "42501")
	e := commitAsClient(t, legacy, 1, `INSERT INTO mallory.own VALUES (1, 'a')`, token)
	eqStrings(t, "after PrepareSession", changes(e.GetWriteset().GetChanges()), []string{`U mallory.own [1] (1,a)`})

	// Dropping the buffer in a transaction that wrote and setting capture
	// up again would commit the earlier writes with an empty writeset.
	for _, sql := range []string{
		`BEGIN; INSERT INTO mallory.own VALUES (2, 'b'); DISCARD TEMP; SELECT tashkent.prepare_session(); COMMIT`,
		`BEGIN; INSERT INTO mallory.own VALUES (2, 'b'); DISCARD TEMP; SELECT tashkent.create_writeset_buffer(); COMMIT`,
		`BEGIN; TRUNCATE mallory.own; SAVEPOINT s; DISCARD TEMP; SELECT tashkent.prepare_session(); RELEASE s; COMMIT`,
	} {
		wantRefused(t, legacy, sql, "25001")
	}
	// And without a new buffer the collect fails: the commit cannot go
	// through with the writes uncollected.
	mustExec(t, legacy, `BEGIN; INSERT INTO mallory.own VALUES (2, 'b'); DISCARD TEMP`)
	if _, err := CollectWritesetWithToken(tctx(t), legacy, token); err == nil {
		t.Errorf("collect after DISCARD TEMP in the transaction succeeded")
	}
	mustExec(t, legacy, `ROLLBACK`)

	// A buffer of another role is refused, not used.
	foreign := roleConn(t, srv, "postgres")
	mustExec(t, admin, `ALTER EVENT TRIGGER tashkent_ddl DISABLE`)
	mustExec(t, foreign, `SET ROLE clerk; `+decoy+`; RESET ROLE`)
	mustExec(t, admin, `ALTER EVENT TRIGGER tashkent_ddl ENABLE ALWAYS`)
	mustExec(t, foreign, `SET ROLE mallory`)
	err = PrepareSession(tctx(t), foreign)
	if pe := pgErr(t, err); pe.Code != "42501" || !strings.Contains(pe.Message, "belongs to role clerk") {
		t.Errorf("PrepareSession over clerk's buffer: %s %q", pe.Code, pe.Message)
	}
}

// TestCaptureRefusesCastsAClientCanWrite: capture runs as tashkent_capture
// and to_json of a row calls the cast to json of a column type that is
// not built in. A cast function a client role owns would run with
// tashkent_capture's rights: this one forges a buffer row for salaries.
// CREATE CAST is refused (0A000, with a hint), and so is Install on a
// database that has such a cast; a superuser's cast function is fine.
func TestCaptureRefusesCastsAClientCanWrite(t *testing.T) {
	const attack = `
SET ROLE mallory;
CREATE TYPE mallory.mood AS ENUM ('sad', 'happy');
CREATE FUNCTION mallory.mood_json(m mallory.mood) RETURNS json LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row) VALUES ('public.salaries', 'U', '[1]', '(1,999999,forged)');
	RETURN to_json(m::text);
END $$;
CREATE TABLE mallory.feelings (id int PRIMARY KEY, m mallory.mood);
CREATE CAST (mallory.mood AS json) WITH FUNCTION mallory.mood_json(mallory.mood);`
	srv, admin := instance(t, sealSchema)
	trustRolesWithDDL(t, admin)
	mallory := roleConn(t, srv, "mallory")
	code, msg := execErr(t, mallory, strings.ReplaceAll(attack, "SET ROLE mallory;", ""))
	if code != "0A000" || !strings.Contains(msg, "mallory.mood AS json") {
		t.Errorf("CREATE CAST of mallory's: SQLSTATE %q %q, want 0A000", code, msg)
	}
	// Also as the owner's row type to text, which (row)::text would use.
	code, _ = execErr(t, mallory, `CREATE FUNCTION mallory.own_text(r mallory.own) RETURNS text LANGUAGE sql AS 'SELECT ''x''';
		CREATE CAST (mallory.own AS text) WITH FUNCTION mallory.own_text(mallory.own)`)
	if code != "0A000" {
		t.Errorf("CREATE CAST (row type AS text) of mallory's: SQLSTATE %q, want 0A000", code)
	}

	// Made with the event trigger off: Install refuses the database.
	mustExec(t, admin, `ALTER EVENT TRIGGER tashkent_ddl DISABLE`)
	mustExec(t, admin, attack+`; RESET ROLE`)
	mustExec(t, admin, `ALTER EVENT TRIGGER tashkent_ddl ENABLE ALWAYS`)
	err := Install(tctx(t), admin)
	if pe := pgErr(t, err); pe.Code != "0A000" || pe.Hint == "" || !strings.Contains(pe.Message, "mallory.mood_json") {
		t.Errorf("Install with mallory's cast: %s %q hint %q", pe.Code, pe.Message, pe.Hint)
	}
	// A superuser's cast function is not a client's to change.
	mustExec(t, admin, `DROP CAST (mallory.mood AS json); ALTER FUNCTION mallory.mood_json(mallory.mood) OWNER TO postgres;
		CREATE CAST (mallory.mood AS json) WITH FUNCTION mallory.mood_json(mallory.mood)`)
	if err := Install(tctx(t), admin); err != nil {
		t.Errorf("Install with a superuser's cast: %v", err)
	}
	// Giving the function back to mallory is refused.
	wantRefused(t, admin, `ALTER FUNCTION mallory.mood_json(mallory.mood) OWNER TO mallory`, "0A000")
}

// TestSealedFunctionsBelongToTheCaptureRole pins who owns what: the
// capture, buffer and collect functions are tashkent_capture's and run
// with its rights; the trigger functions cannot be called or attached by
// anyone else; tashkent_capture is no superuser and cannot log in.
func TestSealedFunctionsBelongToTheCaptureRole(t *testing.T) {
	_, admin := instance(t, "")
	trustRolesWithDDL(t, admin)
	eqStrings(t, "tashkent_capture's functions", queryStrings(t, admin, `SELECT p.proname || ':' || p.prosecdef
		|| ':' || coalesce(has_function_privilege('public', p.oid, 'EXECUTE'), false)
		FROM pg_proc p WHERE p.pronamespace = 'tashkent'::regnamespace
			AND p.proowner = 'tashkent_capture'::regrole ORDER BY 1`), []string{
		"assert_nothing_to_replicate:true:true", "capture:true:false", "capture_key:true:false", "capture_key_plpgsql:true:false",
		"capture_reference_keys:true:false",
		"capture_references:true:false", "collect_writeset:true:false", "create_writeset_buffer:true:true",
		"take_writeset:true:true", "trim_writeset_buffer:true:true"})
	eqStrings(t, "tashkent_capture", queryStrings(t, admin, `SELECT concat_ws(' ', rolsuper, rolcanlogin, rolbypassrls,
		pg_has_role('tashkent_capture', 'pg_read_all_data', 'MEMBER'),
		(SELECT count(*) FROM pg_auth_members WHERE roleid = 'tashkent_capture'::regrole))
		FROM pg_roles WHERE rolname = 'tashkent_capture'`), []string{"f f t t 0"})
	// Install again (and in a second database: the role is the cluster's).
	if err := Install(tctx(t), admin); err != nil {
		t.Fatal(err)
	}
	mustExec(t, admin, `CREATE DATABASE second`)
	cfg := admin.Config().Copy()
	cfg.Database = "second"
	second, err := pgx.ConnectConfig(tctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(context.Background())
	if err := Install(tctx(t), second); err != nil {
		t.Fatalf("Install in a second database: %v", err)
	}
}

// TestInstallSealsAnOlderInstall: Install runs at every proxy start, over
// what an older tashkent installed: capture functions owned by the
// installer with the caller's rights and executable by everyone, the
// no-argument trim_writeset_buffer. It makes them tashkent_capture's,
// keeping their OIDs and so the triggers. (Checked once by hand against
// main's own Install at 575a4ac: same result, trigger and function OIDs
// unchanged.)
func TestInstallSealsAnOlderInstall(t *testing.T) {
	_, admin := instance(t, sealSchema+`;
		CREATE TABLE fk (id int PRIMARY KEY, s int REFERENCES salaries);
		CREATE TABLE wide (a int, b int, u int UNIQUE, PRIMARY KEY (a, b))`)
	mustExec(t, admin, `
		ALTER FUNCTION tashkent.capture() OWNER TO postgres;
		ALTER FUNCTION tashkent.capture() SECURITY INVOKER;
		ALTER FUNCTION tashkent.capture_key() OWNER TO postgres;
		ALTER FUNCTION tashkent.capture_key() SECURITY INVOKER;
		ALTER FUNCTION tashkent.collect_writeset() OWNER TO postgres;
		ALTER FUNCTION tashkent.collect_writeset() SECURITY INVOKER;
		GRANT EXECUTE ON FUNCTION tashkent.capture(), tashkent.capture_key(), tashkent.collect_writeset() TO PUBLIC;
		CREATE FUNCTION tashkent.trim_writeset_buffer() RETURNS boolean LANGUAGE sql AS 'SELECT false'`)
	trg := `SELECT tgrelid::regclass || '.' || tgname || '=' || tgfoid::regproc || '/' || tgfoid FROM pg_trigger WHERE tgname LIKE 'tashkent%' ORDER BY 1`
	before := queryStrings(t, admin, trg)
	if err := Install(tctx(t), admin); err != nil {
		t.Fatal(err)
	}
	eqStrings(t, "triggers after the upgrade", queryStrings(t, admin, trg), before)
	eqStrings(t, "the sealed functions after the upgrade", queryStrings(t, admin, `SELECT p.oid::regprocedure || ':' || p.prosecdef
		|| ':' || has_function_privilege('public', p.oid, 'EXECUTE')
		FROM pg_proc p WHERE p.oid IN ('tashkent.capture'::regproc, 'tashkent.capture_key'::regproc, 'tashkent.collect_writeset'::regproc)
			AND p.proowner = 'tashkent_capture'::regrole ORDER BY 1`), []string{
		"tashkent.capture():true:false", "tashkent.capture_key():true:false", "tashkent.collect_writeset():true:false"})
	eqStrings(t, "trim_writeset_buffer", queryStrings(t, admin, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.proname = 'trim_writeset_buffer'`), []string{"tashkent.trim_writeset_buffer(text)"})
}

// forgeSchema gives mallory a function that forges a buffer row when it
// runs with tashkent_capture's rights (as herself it is refused, and
// swallows the error), and the ways user code could get run inside
// capture: a search_path's look-alikes (a domain named text whose CHECK
// calls it, an operator || and a quote_ident), a row-level security
// policy that calls it on a table whose writes are captured by state (a
// user trigger writes), and the same policy on a parent that a numeric
// foreign key makes capture look up.
const forgeSchema = sealSchema + `;
SET ROLE mallory;
CREATE FUNCTION mallory.forge() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row) VALUES ('public.salaries', 'U', '[1]', '(1,999999,forged)');
	RETURN true;
EXCEPTION WHEN insufficient_privilege OR undefined_table THEN
	RETURN true;
END $$;
CREATE DOMAIN mallory.text AS pg_catalog.text CHECK (mallory.forge());
CREATE FUNCTION mallory.cat(a pg_catalog.text, b pg_catalog.text) RETURNS pg_catalog.text LANGUAGE sql
	AS 'SELECT CASE WHEN mallory.forge() THEN pg_catalog.textcat(a, b) END';
CREATE OPERATOR mallory.|| (LEFTARG = pg_catalog.text, RIGHTARG = pg_catalog.text, FUNCTION = mallory.cat);
CREATE FUNCTION mallory.quote_ident(pg_catalog.text) RETURNS pg_catalog.text LANGUAGE sql
	AS 'SELECT CASE WHEN mallory.forge() THEN pg_catalog.quote_ident($1) END';
CREATE TABLE mallory.docs (id int PRIMARY KEY, v pg_catalog.text);
CREATE TABLE mallory.log (id bigserial PRIMARY KEY, doc int);
CREATE FUNCTION mallory.log_doc() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO mallory.log (doc) VALUES (NEW.id);
	RETURN NULL;
END $$;
CREATE TRIGGER log_after AFTER INSERT OR UPDATE ON mallory.docs FOR EACH ROW EXECUTE FUNCTION mallory.log_doc();
CREATE TABLE mallory.parent (id numeric PRIMARY KEY);
CREATE TABLE mallory.child (id int PRIMARY KEY, p numeric REFERENCES mallory.parent);
ALTER TABLE mallory.docs ENABLE ROW LEVEL SECURITY;
ALTER TABLE mallory.docs FORCE ROW LEVEL SECURITY;
CREATE POLICY watch ON mallory.docs USING (mallory.forge());
ALTER TABLE mallory.parent ENABLE ROW LEVEL SECURITY;
ALTER TABLE mallory.parent FORCE ROW LEVEL SECURITY;
CREATE POLICY watch ON mallory.parent USING (mallory.forge());
RESET ROLE;`

// TestCaptureRunsNoCodeOfTheClient: capture runs as tashkent_capture,
// and none of mallory's code runs inside it whatever she sets up:
// every name in the functions without a SET clause is qualified (types in
// their declarations too), tashkent_capture bypasses row-level security
// (BYPASSRLS: no policy expression runs when capture reads rows back or
// looks a parent up), and the cast attack is TestCaptureRefusesCastsAClientCanWrite's.
// Every write here is captured as usual and no forged row appears.
func TestCaptureRunsNoCodeOfTheClient(t *testing.T) {
	srv, admin := instance(t, forgeSchema)
	trustRolesWithDDL(t, admin)
	token, err := ReadRecordToken(tctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	mallory := roleConn(t, srv, "mallory")
	mustExec(t, mallory, `SET search_path = mallory, pg_catalog`)
	if err := PrepareSession(tctx(t), mallory); err != nil {
		t.Fatal(err)
	}
	// Settings that make capture pin its print settings (the other branch
	// of capture_key and capture_reference_keys).
	for v, sql := range []string{
		`INSERT INTO mallory.docs VALUES (1, 'a'); INSERT INTO mallory.parent VALUES (1.5)`,
		`UPDATE mallory.docs SET v = 'b'; INSERT INTO mallory.child VALUES (1, 1.50)`,
		`SET TimeZone = 'Asia/Tokyo'; UPDATE mallory.docs SET v = 'c'; UPDATE mallory.child SET p = 1.5;
			INSERT INTO mallory.child VALUES (2, NULL)`,
	} {
		e := commitAsClient(t, mallory, uint64(v+1), sql, token)
		got := changes(e.GetWriteset().GetChanges())
		for _, c := range got {
			if strings.Contains(c, "salaries") || strings.Contains(c, "forged") {
				t.Errorf("%s: a forged change: %s", sql, c)
			}
		}
		if len(got) == 0 {
			t.Errorf("%s: nothing captured", sql)
		}
		t.Logf("%s: %v", sql, got)
	}
}

// TestCaptureTriggersCannotBeDroppedByTheOwner: a table's owner could
// drop the tashkent_* triggers of its table (DROP TRIGGER needs no more),
// or rename and then drop them, and its writes were then no longer
// captured, never replicated, with no error. Both are refused; DROP TABLE
// still drops them with the table.
func TestCaptureTriggersCannotBeDroppedByTheOwner(t *testing.T) {
	srv, admin := instance(t, sealSchema)
	trustRolesWithDDL(t, admin)
	before := triggers(t, admin, "mallory.own")
	mallory := roleSession(t, srv, "mallory")
	wantRefused(t, mallory, `DROP TRIGGER tashkent_capture_ins ON mallory.own`, "42501")
	wantRefused(t, mallory, `ALTER TRIGGER tashkent_capture_ins ON mallory.own RENAME TO mine`, "42501")
	eqStrings(t, "mallory.own's triggers", triggers(t, admin, "mallory.own"), before)
	mustExec(t, mallory, `CREATE TABLE mallory.gone (id int PRIMARY KEY); DROP TABLE mallory.gone`)
	// Disabling them (ALTER TABLE) makes on_ddl put them back enabled.
	mustExec(t, mallory, `ALTER TABLE mallory.own DISABLE TRIGGER ALL`)
	token, err := ReadRecordToken(tctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	e := commitAsClient(t, mallory, 1, `INSERT INTO mallory.own VALUES (1, 'a')`, token)
	eqStrings(t, "mallory's insert after DISABLE TRIGGER ALL", changes(e.GetWriteset().GetChanges()), []string{`U mallory.own [1] (1,a)`})
	// A superuser may (ensure_triggers does, to replace them).
	mustExec(t, admin, `DROP TRIGGER tashkent_capture_ins ON mallory.own; SELECT tashkent.ensure_triggers('mallory.own'::regclass)`)
	eqStrings(t, "mallory.own's triggers, put back", triggers(t, admin, "mallory.own"), before)
}

// TestSealedBufferWithoutTemporaryForPublic: a database whose PUBLIC lost
// TEMP (a hardening some operators apply) still gets its buffers:
// Install grants TEMP to tashkent_capture, which creates them, and the
// client role needs none.
func TestSealedBufferWithoutTemporaryForPublic(t *testing.T) {
	srv, admin := instance(t, sealSchema+`; REVOKE TEMPORARY ON DATABASE postgres FROM PUBLIC`)
	trustRolesWithDDL(t, admin)
	mallory := roleSession(t, srv, "mallory")
	wantRefused(t, mallory, `CREATE TEMP TABLE mine (n int)`, "42501")
	token, err := ReadRecordToken(tctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	e := commitAsClient(t, mallory, 1, `INSERT INTO mallory.own VALUES (1, 'a')`, token)
	eqStrings(t, "mallory's insert", changes(e.GetWriteset().GetChanges()), []string{`U mallory.own [1] (1,a)`})
}

// TestDDLGuardReadsTemporarinessFromTheCatalog (review h33, finding 1):
// the DDL guard let through any command whose object identity contained
// " on pg_temp." (meant for triggers, rules and policies of temporary
// tables), and a quoted name can contain that text. mallory, with CREATE
// on a schema and no trust, created public."f on pg_temp.x"() (on the
// other replicas a superuser's function, SECURITY DEFINER if she asks),
// a trigger "t on pg_temp.x" on her persistent table, and renamed the
// table to such a name, after which every ALTER TABLE of it passed.
func TestDDLGuardReadsTemporarinessFromTheCatalog(t *testing.T) {
	srv, _ := instance(t, sealSchema)
	mallory := roleConn(t, srv, "mallory")
	for _, sql := range []string{
		`CREATE FUNCTION mallory."f on pg_temp.x"() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'`,
		`CREATE TRIGGER "t on pg_temp.x" BEFORE UPDATE ON mallory.own
			FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()`,
		`CREATE RULE "r on pg_temp.x" AS ON DELETE TO mallory.own DO INSTEAD NOTHING`,
		`CREATE POLICY "p on pg_temp.x" ON mallory.own USING (true)`,
		`ALTER TABLE mallory.own RENAME TO "own on pg_temp.x"`,
		`CREATE TABLE mallory."n on pg_temp.x" (id int PRIMARY KEY)`,
	} {
		wantRefused(t, mallory, sql, "42501")
	}
	// Temporary objects, and their triggers, rules and policies, stay allowed.
	for _, sql := range []string{
		`CREATE TEMP TABLE scratch (id int PRIMARY KEY, v text)`,
		`CREATE TRIGGER keep BEFORE UPDATE ON pg_temp.scratch
			FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()`,
		`CREATE RULE quiet AS ON DELETE TO pg_temp.scratch DO INSTEAD NOTHING`,
		`CREATE POLICY mine ON pg_temp.scratch USING (true)`,
		`DROP TABLE pg_temp.scratch`,
	} {
		if code, msg := execErr(t, mallory, sql); code != "" {
			t.Errorf("%s as mallory: %s %s", sql, code, msg)
		}
	}
}
