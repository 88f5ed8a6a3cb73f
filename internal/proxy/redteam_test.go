package proxy_test

// Red-team tests of tashkent's privilege boundary: an ordinary role that
// connects through the proxies must get exactly the rights PostgreSQL gives
// it on one server, nothing more on any replica, and no way to make the
// replicas differ without an error (docs/GUARANTEES.md, "DDL"; the
// one-copy guarantee of snapshot isolation, Elnikety et al. §2 and §4:
// every replica applies the same writesets in the same order). Each test
// asserts the secure behaviour. A test that fails today, for an open
// finding, starts with t.Skip naming the finding of the report (branch
// h32); remove the Skip with the fix.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
	"github.com/tashkent-db/tashkent/internal/replica"
)

// redteamCluster is a 2-replica cluster whose proxies do not trust roles
// with DDL (the default), with an application role mallory that has
// SELECT, INSERT, UPDATE, DELETE on public.notes, CREATE on schema public
// and owns public.owned (a table an administrator created for her).
func redteamCluster(t *testing.T) *testCluster {
	t.Helper()
	c := startClusterWith(t, 2, func(int, *proxy.Config) {})
	admin := c.connect(0)
	for _, sql := range []string{
		`CREATE ROLE mallory LOGIN`,
		`GRANT CREATE ON SCHEMA public TO mallory`,
		`CREATE TABLE public.notes (id int PRIMARY KEY, body text)`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON public.notes TO mallory`,
		`CREATE TABLE public.owned (id int PRIMARY KEY, v text)`,
		`ALTER TABLE public.owned OWNER TO mallory`,
	} {
		execSQL(t, admin, sql)
	}
	c.converge(10 * time.Second)
	return c
}

func (c *testCluster) mallory(i int) *pgx.Conn {
	c.t.Helper()
	return c.connectWith(i, func(cfg *pgx.ConnConfig) { cfg.User = "mallory" })
}

// waitForVersion waits until every replica holds the certifier's durable
// version, without comparing their contents (converge does both).
func (c *testCluster) waitForVersion(timeout time.Duration) bool {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	target := c.certifier.Service.DurableVersion()
	for i := range c.dbs {
		conn := c.direct(i)
		for {
			v, err := replica.ReadVersion(context.Background(), conn)
			if err == nil && v >= target {
				break
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return true
}

func (c *testCluster) countOn(i int, sql string) int {
	c.t.Helper()
	var n int
	if err := c.direct(i).QueryRow(context.Background(), sql).Scan(&n); err != nil {
		c.t.Fatalf("replica %d: %s: %v", i+1, sql, err)
	}
	return n
}

// Finding 1a (fixed by the DDL guard, replica/ddlguard.go: the database
// refuses the DDL of roles that are not superusers, wherever it runs):
// DDL run inside a DO block (or a function, or a procedure)
// is not a DDL statement to the proxy (sqlclass classifies DO and CALL as
// Call), so it is neither replicated nor refused: a role with CREATE on a
// schema changes one replica's schema only, silently. A write to the table
// then halts every other replica: their appliers fail with "table
// public.sneaky does not exist on this replica" and recover in a loop, not
// admitting clients (reproduced on a `tashkent up` cluster at b5e2b0f).
// Secure: the DDL fails (42501, as top-level DDL of such a role does), or
// it reaches every replica.
func TestRedteamDDLInsideADOBlockDoesNotStayOnOneReplica(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := c.mallory(0)
	_, err := m.Exec(ctx, `DO $$BEGIN CREATE TABLE public.sneaky (id int PRIMARY KEY); END$$`)
	if err != nil {
		if sqlState(err) != "42501" {
			t.Fatalf("DDL in a DO block as mallory: %v, want success everywhere or 42501", err)
		}
	} else if _, err := m.Exec(ctx, `INSERT INTO public.sneaky VALUES (1)`); err != nil {
		t.Fatalf("insert into the table mallory created: %v", err)
	}
	if !c.waitForVersion(15 * time.Second) {
		t.Fatal("a replica stopped applying after mallory's DDL in a DO block")
	}
	const sneaky = `SELECT count(*) FROM pg_class WHERE relname = 'sneaky'`
	if a, b := c.countOn(0, sneaky), c.countOn(1, sneaky); a != b {
		t.Fatalf("public.sneaky: %d on replica 1, %d on replica 2: DDL in a DO block stayed on one replica", a, b)
	}
	c.converge(10 * time.Second)
}

// Finding 1b (fixed by the DDL guard, as 1a): with DDL in a DO block a role that owns a table (or has
// CREATE on a schema) makes itself a superuser on every replica. On
// replica 1 only, it gives its table a trigger that fires in every
// session_replication_role (ENABLE ALWAYS); then it writes the table
// through replica 2. Replica 1 applies that writeset as the proxy's
// --admin-user with session_replication_role = replica (apply.go), so the
// trigger function runs as a superuser there and runs ALTER ROLE mallory
// SUPERUSER. On replica 1 mallory is now a superuser, so its next DDL
// through proxy 1 (ALTER ROLE mallory SUPERUSER) is replicated and runs on
// every replica (reproduced on a `tashkent up` cluster at b5e2b0f). ENABLE
// REPLICA triggers, rules, CHECK constraints, index expressions and
// domain checks that call the role's functions run during apply the same
// way.
func TestRedteamRemoteApplyDoesNotRunARolesTriggerAsSuperuser(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.mallory(0).Exec(ctx, `DO $$BEGIN
		CREATE FUNCTION public.esc() RETURNS trigger LANGUAGE plpgsql AS $f$
		BEGIN
			IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
				EXECUTE 'ALTER ROLE mallory SUPERUSER';
			END IF;
			RETURN NULL;
		END $f$;
		CREATE TRIGGER esc AFTER INSERT ON public.owned FOR EACH ROW EXECUTE FUNCTION public.esc();
		ALTER TABLE public.owned ENABLE ALWAYS TRIGGER esc;
	END$$`)
	if err != nil && sqlState(err) != "42501" {
		t.Fatalf("DO block as mallory: %v, want success or 42501", err)
	}
	execSQL(t, c.mallory(1), `INSERT INTO public.owned VALUES (1, 'through replica 2')`)
	if !c.waitForVersion(15 * time.Second) {
		t.Fatal("replica 1 did not apply mallory's insert")
	}
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_roles WHERE rolname = 'mallory' AND rolsuper`); n != 0 {
			t.Errorf("mallory is a superuser on replica %d: the remote apply ran her trigger as a superuser", i+1)
		}
	}
}

// Finding 2 (fixed by the DDL guard, which judges current_user in the
// database, where the proxy's ParameterStatus could be stale; the proxy's
// own check is gone): PostgreSQL reports is_superuser (ParameterStatus) only before
// ReadyForQuery, so in an extended-protocol pipeline a superuser's session
// that runs SET ROLE mallory and then DDL without a Sync between still
// reads is_superuser "on" when the DDL completes. The proxy replicates the
// DDL as a superuser's; it ran as mallory on the origin (mallory owns the
// table there) and runs as the admin superuser on the other replicas (the
// admin owns it there), so code it reaches runs with different rights on
// different replicas. The same statements as one simple query are refused
// (42501). Secure: refused in the pipeline too.
func TestRedteamPipelinedSetRoleDDLIsNotReplicatedAsASuperusers(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.connect(0)
	pipeline := admin.PgConn().StartPipeline(ctx)
	pipeline.SendQueryParams(`SET ROLE mallory`, nil, nil, nil, nil)
	pipeline.SendQueryParams(`CREATE TABLE public.piped (id int PRIMARY KEY)`, nil, nil, nil, nil)
	pipeline.SendQueryParams(`RESET ROLE`, nil, nil, nil, nil)
	if err := pipeline.Sync(); err != nil {
		t.Fatal(err)
	}
	var firstErr error
	for {
		results, err := pipeline.GetResults()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			break
		}
		if results == nil {
			break
		}
		if rr, ok := results.(*pgconn.ResultReader); ok {
			if _, err := rr.Close(); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		if _, ok := results.(*pgconn.PipelineSync); ok {
			break
		}
	}
	if err := pipeline.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	c.waitForVersion(15 * time.Second)
	owners := []string{}
	for i := range 2 {
		var owner string
		err := c.direct(i).QueryRow(ctx, `SELECT coalesce((SELECT relowner::regrole::text FROM pg_class WHERE relname = 'piped'), 'none')`).Scan(&owner)
		if err != nil {
			t.Fatal(err)
		}
		owners = append(owners, owner)
	}
	if owners[0] != owners[1] {
		t.Fatalf("public.piped is owned by %s on replica 1 and by %s on replica 2 (pipeline error: %v): DDL run as mallory was replicated as a superuser's",
			owners[0], owners[1], firstErr)
	}
	if owners[0] != "none" || sqlState(firstErr) != "42501" || !strings.Contains(firstErr.Error(), "only from superusers") {
		t.Fatalf("DDL as mallory after SET ROLE in a pipeline: tables owned by %v, error %v; want 42501 and no table", owners, firstErr)
	}
}

// Finding 3 (fixed here): DROP TABLE naming a temporary table without a
// schema and a permanent one with its schema (DROP TABLE tmp,
// public.owned) was marked as DDL on temporary objects only (the proxy
// asked only about the names without a schema), so it was neither
// replicated nor refused: the table's owner dropped it on one replica,
// silently, and so could a superuser by mistake; writes to it through
// another replica then stop this replica's applier. Now such a DROP is
// DDL on a permanent table: refused from roles that are not superusers,
// replicated from superusers.
func TestRedteamDropOfATemporaryAndAPermanentTableIsNotLocal(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := c.mallory(0)
	execSQL(t, m, `CREATE TEMP TABLE tmp (id int)`)
	_, err := m.Exec(ctx, `DROP TABLE tmp, public.owned`)
	checkTempDDLOutcome(t, "DROP TABLE tmp, public.owned", "refused", err) // mixed (h35): 0A000 before the DDL guard's 42501
	if !c.waitForVersion(15 * time.Second) {
		t.Fatal("replicas did not catch up")
	}
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname = 'owned'`); n != 1 {
			t.Errorf("replica %d: public.owned dropped by mallory's DROP TABLE tmp, public.owned", i+1)
		}
	}
	// The same from a superuser is refused too (h35: on another replica,
	// tmp may name a permanent table); dropped apart, each goes its way.
	admin := c.connect(0)
	execSQL(t, admin, `CREATE TEMP TABLE tmp (id int)`)
	_, err = admin.Exec(ctx, `DROP TABLE IF EXISTS tmp, public.owned`)
	checkTempDDLOutcome(t, "DROP TABLE IF EXISTS tmp, public.owned", "refused", err)
	execSQL(t, admin, `DROP TABLE tmp`)
	execSQL(t, admin, `DROP TABLE public.owned`)
	c.converge(10 * time.Second)
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname = 'owned'`); n != 0 {
			t.Errorf("replica %d still has public.owned after the superuser's DROP", i+1)
		}
	}
}

// Finding 4 (fixed here): tashkent's functions that run with their
// owner's (a superuser's) rights to keep triggers and sequences right were
// executable by PUBLIC, PostgreSQL's default for a new function: any role
// could make a superuser drop and create tashkent_* triggers on any table
// (ensure_triggers) and read key columns of tables it may not read and
// restart sequences it does not own (align_sequence). Only on_ddl and the
// proxy need them; record_version stays callable (it checks its token).
func TestRedteamDefinerFunctionsAreNotCallableByRoles(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := c.mallory(0)
	for _, sql := range []string{
		`SELECT tashkent.ensure_triggers('public.notes'::regclass)`,
		`SELECT tashkent.ensure_linked_triggers('public.notes'::regclass, true)`,
		`SELECT tashkent.ensure_all_triggers()`,
		`SELECT tashkent.align_sequence('tashkent.ddl_log_gen_seq'::regclass)`,
		`SELECT tashkent.align_relation_sequences('public.notes'::regclass)`,
		`SELECT tashkent.align_all_sequences()`,
	} {
		if _, err := m.Exec(ctx, sql); sqlState(err) != "42501" {
			t.Errorf("%s as mallory: %v, want 42501", sql, err)
		}
	}
	// What still works for her: her writes (capture, record_version),
	// and DDL of a superuser, whose event trigger calls the functions.
	execSQL(t, m, `INSERT INTO public.notes VALUES (1, 'still replicated')`)
	execSQL(t, c.connect(0), `CREATE TABLE public.fresh (id serial PRIMARY KEY)`)
	c.converge(10 * time.Second)
	execSQL(t, c.connect(1), `INSERT INTO public.fresh DEFAULT VALUES`)
	c.converge(10 * time.Second)
	if n := c.countOn(0, `SELECT count(*) FROM public.notes`) + c.countOn(0, `SELECT count(*) FROM public.fresh`); n != 2 {
		t.Errorf("replica 1 holds %d of the 2 rows", n)
	}
}

// Finding 5 (fixed here): a temporary table that inherits from a
// replicated table. A role that owns public.owned ran
//
//	CREATE TEMP TABLE kid () INHERITS (public.owned);
//	INSERT INTO kid VALUES (50, 'only in my temp table');
//	UPDATE public.owned SET v = 'touched' WHERE id = 50;
//
// The UPDATE reaches kid's row, public.owned's capture trigger records it
// as a row of public.owned, and replica 2 got the permanent row (50,
// 'touched'), which replica 1 never held (reproduced on a `tashkent up`
// cluster at b5e2b0f). The event trigger now refuses such a table (0A000),
// whether created so or attached later with ALTER TABLE ... INHERIT.
func TestRedteamTemporaryChildOfAReplicatedTableIsRefused(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := c.mallory(0)
	for _, sql := range []string{
		`CREATE TEMP TABLE kid () INHERITS (public.owned)`,
		`BEGIN; CREATE TEMP TABLE kid2 (id int NOT NULL, v text); ALTER TABLE kid2 INHERIT public.owned; COMMIT`,
	} {
		_, err := m.Exec(ctx, sql)
		if sqlState(err) != "0A000" || !strings.Contains(err.Error(), "inherits from a permanent") {
			t.Errorf("%s as mallory: %v, want 0A000", sql, err)
		}
		if _, err := m.Exec(ctx, `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
	}
	// A temporary table like a replicated one is fine, and stays local.
	execSQL(t, m, `CREATE TEMP TABLE kid3 (LIKE public.owned)`)
	execSQL(t, m, `INSERT INTO kid3 VALUES (50, 'only in my temp table')`)
	execSQL(t, m, `UPDATE public.owned SET v = 'touched' WHERE id = 50`)
	c.converge(10 * time.Second)
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM public.owned`); n != 0 {
			t.Errorf("replica %d: public.owned holds %d rows of mallory's temporary table", i+1, n)
		}
	}
}

// Finding 6 (the writeset buffer, h31's area): tashkent.collect_writeset()
// is executable by every role and empties the session's buffer. Called in
// the middle of a transaction it removes the transaction's events, and
// COMMIT replicates nothing of them: the row stays on replica 1 only
// (reproduced on a `tashkent up` cluster at b5e2b0f: BEGIN; INSERT INTO
// notes VALUES (101, ...); SELECT count(*) FROM tashkent.collect_writeset();
// COMMIT). DROP TABLE / TRUNCATE pg_temp.tashkent_writeset and a rule or
// trigger on it (through a DO block, see finding 1) do the same while the
// buffer belongs to the session's role.
func TestRedteamARoleCannotEmptyItsWritesetBuffer(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := c.mallory(0)
	tx, err := m.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, m, `INSERT INTO public.notes VALUES (101, 'collected in the middle')`)
	_, collectErr := m.Exec(ctx, `SELECT count(*) FROM tashkent.collect_writeset()`)
	commitErr := tx.Commit(ctx)
	if collectErr == nil && commitErr == nil {
		c.waitForVersion(15 * time.Second)
		if a, b := c.countOn(0, `SELECT count(*) FROM public.notes`), c.countOn(1, `SELECT count(*) FROM public.notes`); a != b {
			t.Fatalf("public.notes: %d rows on replica 1, %d on replica 2: mallory emptied her writeset before COMMIT", a, b)
		}
	}
	c.converge(10 * time.Second)
}

// Finding 7 (fixed): in --auth relay (the default) PostgreSQL
// authenticates relayed clients on the connection the proxy opens, the
// same Unix socket its own admin connections use, which pg_hba.conf often
// trusts (every `tashkent up` cluster: initdb -A trust). PostgreSQL then
// admitted anyone who reached the proxy's port as any role, the superuser
// included, without a password. Now the proxy refuses a relayed login that
// PostgreSQL admitted without asking the client for a credential (28000,
// with a hint), unless it runs with --allow-passwordless-logins
// (pgwire/passwordless.go). Logins PostgreSQL asked a password for are
// relayed as before; the opt-in restores the old behaviour.
func TestRedteamRelayedLoginAsTheAdminNeedsAPassword(t *testing.T) {
	c := strictRelayCluster(t)
	for _, user := range []string{"postgres", trustedRole} {
		t.Run("refused without a password: "+user, func(t *testing.T) {
			wantPasswordlessRefusal(t, user, relayedLogin(c, user, ""))
		})
	}
	t.Run("PostgreSQL asks for a password", func(t *testing.T) { relayedPasswordLoginsWork(t, c) })
	t.Run("admitted with --allow-passwordless-logins", func(t *testing.T) { passwordlessLoginsAfterOptIn(t, c) })
}

// Finding 8 (fixed here): PREPARE q AS SELECT ... INTO public.t; EXECUTE
// q created public.t on replica 1 only, not refused (an EXECUTE is not DDL
// to the proxy), for any role with CREATE on the schema; a write to the
// table then stops replica 2's applier for good. Now the PREPARE is refused
// (0A000) in both protocols, as the features in unreplicated.go are.
func TestRedteamPreparedSelectIntoIsRefused(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, conn := range []*pgx.Conn{c.mallory(0), c.connect(0)} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
			_, err := conn.Exec(ctx, `PREPARE q AS SELECT 1 AS id INTO public.pinto`, mode)
			if sqlState(err) != "0A000" || !strings.Contains(err.Error(), "SELECT INTO in a prepared statement") {
				t.Errorf("PREPARE ... SELECT INTO (%v): %v, want 0A000", mode, err)
			}
		}
	}
	execSQL(t, c.mallory(0), `PREPARE r AS SELECT count(*) FROM public.notes`)
	c.converge(10 * time.Second)
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_class WHERE relname = 'pinto'`); n != 0 {
			t.Errorf("replica %d has public.pinto", i+1)
		}
	}
}

// Finding 9 (superusers only; fixed: refused with 0A000, sqlclass.PreparedQueryDDL):
// CREATE TABLE t AS EXECUTE q was replicated as
// its text, which names a prepared statement of the origin session; every
// other replica's applier fails on it ("prepared statement \"qq\" does not
// exist", 26000) and stops for good: the replica must be rebuilt
// (reproduced on a `tashkent up` cluster at b5e2b0f). Secure: refused
// (0A000) at the origin, or replicated with the prepared statement's text.
func TestRedteamCreateTableAsExecuteDoesNotStopTheOtherReplicas(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.connect(0)
	execSQL(t, admin, `PREPARE qq AS SELECT 1 AS id`)
	if _, err := admin.Exec(ctx, `CREATE TABLE public.ctae AS EXECUTE qq`); sqlState(err) != "0A000" {
		t.Fatalf("CREATE TABLE AS EXECUTE: %v, want 0A000", err)
	}
	if !c.waitForVersion(15 * time.Second) {
		t.Fatal("a replica stopped applying after CREATE TABLE AS EXECUTE")
	}
	c.converge(10 * time.Second)
}

// Finding 10 (fixed here): the proxy decides whether DDL on a name without a schema acts
// on a temporary table (and stays local) before any message of the
// pipeline runs (markLocalDDL). In one pipeline, DROP TABLE owned drops
// the session's temporary table "owned" that shadows public.owned, and a
// second DROP TABLE owned, judged temporary too, drops public.owned: on
// replica 1 only, neither refused nor replicated. The same works for any
// DDL on the name (ALTER TABLE owned ENABLE ALWAYS TRIGGER ..., see
// finding 1b). Now DDL judged temporary after other statements of the
// same pipeline is refused (0A000); pg_temp-qualified names still work.
func TestRedteamPipelinedDDLOnAShadowedTableIsNotLocal(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := c.mallory(0)
	execSQL(t, m, `CREATE TEMP TABLE owned (id int)`)
	batch := &pgx.Batch{}
	batch.Queue(`DROP TABLE owned`)
	batch.Queue(`DROP TABLE owned`)
	err := m.SendBatch(ctx, batch).Close()
	if sqlState(err) != "0A000" {
		t.Fatalf("pipelined DROP TABLE owned twice: %v, want 0A000", err)
	}
	if !c.waitForVersion(15 * time.Second) {
		t.Fatal("replicas did not catch up")
	}
	const owned = `SELECT count(*) FROM pg_class WHERE relname = 'owned' AND relpersistence = 'p'`
	if a, b := c.countOn(0, owned), c.countOn(1, owned); a != b {
		t.Fatalf("public.owned: %d on replica 1, %d on replica 2: the pipeline dropped it on one replica only (error %v)", a, b, err)
	}
	// The temporary table is still there, and a pipeline that names it
	// with pg_temp, or alone, acts on it locally.
	batch = &pgx.Batch{}
	batch.Queue(`INSERT INTO pg_temp.owned VALUES (1)`)
	batch.Queue(`ALTER TABLE pg_temp.owned ADD COLUMN w int`)
	if err := m.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatalf("pipeline on pg_temp.owned: %v", err)
	}
	execSQL(t, m, `DROP TABLE owned`)
	c.converge(10 * time.Second)
	for i := range 2 {
		if n := c.countOn(i, owned); n != 1 {
			t.Errorf("replica %d: %d tables public.owned, want 1", i+1, n)
		}
	}
}

// TestRedteamTheRecordTokenDoesNotReachTheClient (review h33, finding 2):
// the proxy binds the record token to its collect and to record_version
// in the client's session; any role may SET
// log_parameter_max_length_on_error, and PostgreSQL then reports a failed
// statement's bound parameters in the error's CONTEXT. A DISCARD TEMP
// before COMMIT fails the collect (no buffer): the error carried the
// token, with which mallory could empty her writeset before the collect
// or record versions the database does not hold.
func TestRedteamTheRecordTokenDoesNotReachTheClient(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	token, err := replica.ReadRecordToken(ctx, c.direct(0))
	if err != nil {
		t.Fatal(err)
	}
	m := c.mallory(0)
	execSQL(t, m, `SET log_parameter_max_length_on_error = -1`)
	for _, sql := range []string{`BEGIN`, `INSERT INTO public.notes VALUES (1, 'x')`, `DISCARD TEMP`} {
		execSQL(t, m, sql)
	}
	_, err = m.Exec(ctx, `COMMIT`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" || !strings.Contains(pgErr.Message, "DISCARD TEMP inside a transaction block") {
		t.Fatalf("COMMIT after DISCARD TEMP: %v, want the collect's error, explained (0A000)", err)
	}
	for _, field := range []string{pgErr.Message, pgErr.Detail, pgErr.Hint, pgErr.Where, pgErr.InternalQuery} {
		if strings.Contains(field, token) {
			t.Fatalf("the client got the record token in its error: %+v", pgErr)
		}
	}
	if c.countOn(1, `SELECT count(*) FROM public.notes`) != 0 {
		t.Error("the failed transaction reached replica 2")
	}
	// The rollback undid the DISCARD: the session's writes are captured
	// and replicated again.
	execSQL(t, m, `INSERT INTO public.notes VALUES (2, 'after')`)
	c.converge(10 * time.Second)
	if c.countOn(1, `SELECT count(*) FROM public.notes WHERE id = 2`) != 1 {
		t.Error("a write after the failed COMMIT did not reach replica 2")
	}
}

// TestRedteamCommandsOnTheRoleItselfAreNotReplicatedAsTheSuperusers
// (review h33, finding 3): PostgreSQL fires no event trigger for ALTER
// ROLE, REASSIGN OWNED and the other commands on global objects, so the
// DDL guard let an ordinary role run them on itself, and the other
// replicas ran the text as a superuser, for whom CURRENT_USER is that
// superuser: ALTER ROLE CURRENT_USER PASSWORD set the superuser's
// password there, ALTER ROLE CURRENT_USER SET its session defaults (the
// appliers' sessions), DROP OWNED / REASSIGN OWNED BY CURRENT_USER its
// objects.
func TestRedteamCommandsOnTheRoleItselfAreNotReplicatedAsTheSuperusers(t *testing.T) {
	c := redteamCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const passwords = `SELECT count(*) FROM pg_authid WHERE rolsuper AND rolpassword IS NOT NULL`
	before := []int{c.countOn(0, passwords), c.countOn(1, passwords)}
	m := c.mallory(0)
	for _, sql := range []string{
		`ALTER ROLE CURRENT_USER SET statement_timeout = '4321'`,
		`ALTER ROLE CURRENT_USER PASSWORD 'chosen by mallory'`,
		`REASSIGN OWNED BY CURRENT_USER TO mallory`,
	} {
		_, err := m.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "only from superusers") {
			t.Errorf("%s as mallory: %v, want 42501", sql, err)
		}
	}
	// A superuser's is replicated.
	execSQL(t, c.connect(0), `ALTER ROLE mallory SET work_mem = '5MB'`)
	c.converge(10 * time.Second)
	for i := range 2 {
		if n := c.countOn(i, `SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
			WHERE r.rolsuper AND 'statement_timeout=4321' = ANY (s.setconfig)`); n != 0 {
			t.Errorf("replica %d: a superuser got mallory's statement_timeout", i+1)
		}
		if n := c.countOn(i, passwords); n != before[i] {
			t.Errorf("replica %d: a superuser got mallory's password", i+1)
		}
		if n := c.countOn(i, `SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
			WHERE r.rolname = 'mallory' AND 'work_mem=5MB' = ANY (s.setconfig)`); n != 1 {
			t.Errorf("replica %d: the administrator's ALTER ROLE mallory was not replicated", i+1)
		}
	}
}

// TestRedteamTriggersRulesAndPoliciesOfATemporaryTableStayLocal (review
// h33, finding 4): the proxy judged CREATE TRIGGER, CREATE RULE, CREATE
// and ALTER POLICY temporary only when the table was named without a
// schema (asking the database), never when it was qualified with pg_temp,
// which the DDL guard allows any role: the statement was replicated, and
// the other replicas' appliers failed on it (no such table there).
func TestRedteamTriggersRulesAndPoliciesOfATemporaryTableStayLocal(t *testing.T) {
	c := redteamCluster(t)
	m := c.mallory(0)
	for _, sql := range []string{
		`CREATE TEMP TABLE scratch (id int PRIMARY KEY, v text)`,
		`CREATE TRIGGER keep BEFORE UPDATE ON pg_temp.scratch
			FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()`,
		`CREATE RULE quiet AS ON DELETE TO pg_temp.scratch DO INSTEAD NOTHING`,
		`CREATE POLICY mine ON pg_temp.scratch USING (true)`,
		`ALTER POLICY mine ON pg_temp.scratch USING (id > 0)`,
		`INSERT INTO public.notes VALUES (1, 'after the temporary DDL')`,
	} {
		execSQL(t, m, sql)
	}
	c.converge(15 * time.Second)
	if n := c.countOn(1, `SELECT count(*) FROM public.notes`); n != 1 {
		t.Errorf("replica 2 holds %d of mallory's 1 row: it stopped applying", n)
	}
}

// TestRedteamCommentOnATemporaryTableDoesNotStopTheOtherReplicas (review
// h33, finding 5): COMMENT ON a temporary table or its column was allowed
// by the DDL guard and replicated by the proxy (sqlclass did not tell it
// temporary); the other replicas' appliers failed on it. Fixed for
// relations and columns, qualified with pg_temp or not; statistics, types
// and the other kinds: TestDDLOnTemporaryObjectsStaysLocalOrIsRefused (h35).
func TestRedteamCommentOnATemporaryTableDoesNotStopTheOtherReplicas(t *testing.T) {
	c := redteamCluster(t)
	m := c.mallory(0)
	for _, sql := range []string{
		`CREATE TEMP TABLE scratch (id int PRIMARY KEY, v text)`,
		`COMMENT ON TABLE pg_temp.scratch IS 'mine'`,
		`COMMENT ON COLUMN scratch.v IS 'mine too'`,
		`INSERT INTO public.notes VALUES (1, 'after the comment')`,
	} {
		execSQL(t, m, sql)
	}
	c.converge(15 * time.Second)
	if n := c.countOn(1, `SELECT count(*) FROM public.notes`); n != 1 {
		t.Errorf("replica 2 holds %d of mallory's 1 row: it stopped applying", n)
	}
}
