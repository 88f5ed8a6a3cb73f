package replica

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// Nested statements under row-level security and without SELECT rights.
// A statement whose user triggers wrote is captured by state (see "Nested
// statements" in doc.go): capture reads back the rows the statement wrote
// instead of trusting its transition rows. Before, a row the session wrote
// but may not see (a SELECT policy hiding it) was recorded as deleted, so
// the other replicas deleted a row the origin keeps (silent divergence;
// Tashkent §4: the writeset must hold the transaction's effects), and a
// role with UPDATE but no SELECT got 42501 from inside tashkent's
// function. Then the read ran with the session's rights and refused what
// it could not see; since the buffer is sealed, capture runs with
// tashkent_capture's rights, which read every row (see "Trust model" in
// doc.go), and records the rows as they are. These tests write as an
// ordinary role, check each writeset entry against the table the
// superuser sees, apply the writesets to a second database and compare
// checksums, and check that the path shows the role nothing it may not
// see.

// rlsSchema is the table of the row-level security cases, with rows of
// two owners; alice sees her own rows only but may insert, update and
// delete any (a drop box), and every write of docs writes docs_log from a
// user trigger, so that capture of docs goes by state.
const rlsSchema = `
CREATE ROLE alice LOGIN;
CREATE TABLE docs (id int PRIMARY KEY, owner text NOT NULL, v text, secret text NOT NULL DEFAULT 'none');
CREATE TABLE docs_log (id bigserial PRIMARY KEY, doc int, op text);
INSERT INTO docs VALUES (1, 'alice', 'a', 'x1'), (2, 'bob', 'b', 'x2'), (3, 'bob', 'c', 'x3');
GRANT SELECT, INSERT, UPDATE, DELETE ON docs TO alice;
GRANT INSERT ON docs_log TO alice;
GRANT USAGE ON SEQUENCE docs_log_id_seq TO alice;
ALTER TABLE docs ENABLE ROW LEVEL SECURITY;
CREATE POLICY docs_see ON docs FOR SELECT USING (owner = current_user);
CREATE POLICY docs_add ON docs FOR INSERT WITH CHECK (true);
CREATE POLICY docs_change ON docs FOR UPDATE USING (true) WITH CHECK (true);
CREATE POLICY docs_remove ON docs FOR DELETE USING (true);
CREATE FUNCTION log_doc() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO docs_log (doc, op) VALUES (CASE TG_OP WHEN 'DELETE' THEN OLD.id ELSE NEW.id END, TG_OP);
	RETURN NULL;
END $$;
CREATE TRIGGER log_after AFTER INSERT OR UPDATE OR DELETE ON docs FOR EACH ROW EXECUTE FUNCTION log_doc();`

// rlsForced makes alice the owner of docs, with FORCE ROW LEVEL SECURITY:
// the owner is then held to the policies too.
const rlsForced = `
ALTER TABLE docs OWNER TO alice;
ALTER TABLE docs FORCE ROW LEVEL SECURITY;`

// roleSession opens a connection as role (trust authentication, as
// pgtest's servers have) that went through PrepareSession, as a client's
// session through the proxy does.
func roleSession(t testing.TB, srv *pgserver.Server, role string) *pgx.Conn {
	t.Helper()
	c := roleConn(t, srv, role)
	if err := PrepareSession(tctx(t), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// replicated is one origin database written by alice and a second one
// the origin's writesets are applied to.
type replicated struct {
	admin, alice, other *pgx.Conn
	entries             []*certifierpb.LogEntry
	commit              func(sql string) *certifierpb.LogEntry
}

func newReplicated(t *testing.T, schema string) *replicated {
	t.Helper()
	srv, admin := instance(t, schema)
	_, other := applyInstance(t, schema)
	alice := roleSession(t, srv, "alice")
	token, err := ReadRecordToken(tctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	version := uint64(0)
	commit := func(sql string) *certifierpb.LogEntry {
		t.Helper()
		version++
		// As the proxy records it in a client's session, whatever its role.
		return commitAsClient(t, alice, version, sql, token)
	}
	return &replicated{admin: admin, alice: alice, other: other, commit: commit}
}

// write commits sql as alice, checks every row change of its writeset
// against the table as the superuser sees it and returns the changes.
func (r *replicated) write(t *testing.T, sql string) []string {
	t.Helper()
	e := r.commit(sql)
	r.entries = append(r.entries, e)
	for _, c := range e.GetWriteset().GetChanges() {
		checkChangeAgainstTable(t, r.admin, c)
	}
	return changes(e.GetWriteset().GetChanges())
}

// converge applies the writesets not yet applied to the other database
// and compares the two databases' checksums.
func (r *replicated) converge(t *testing.T) {
	t.Helper()
	if err := Apply(tctx(t), r.other, r.entries); err != nil {
		t.Fatal(err)
	}
	r.entries = nil
	sameChecksums(t, checksum(t, r.admin), checksum(t, r.other))
	if t.Failed() {
		t.Logf("origin docs:\n%s\nother docs:\n%s", dump(t, r.admin, "docs"), dump(t, r.other, "docs"))
	}
}

// checkChangeAgainstTable checks one row change of a committed writeset
// against the table, read by the superuser (no policy hides anything from
// it): an upsert must carry the row the table holds, a delete must name a
// key no row has. The tables here have one int key column, id.
func checkChangeAgainstTable(t *testing.T, admin *pgx.Conn, c *certifierpb.Change) {
	t.Helper()
	op := c.GetOp()
	if op != certifierpb.Op_OP_UPSERT && op != certifierpb.Op_OP_DELETE {
		return
	}
	found := queryStrings(t, admin, fmt.Sprintf(`SELECT x::text FROM %s AS x WHERE '[' || x.id || ']' = $1`,
		c.GetTable()), string(c.GetKey()))
	switch {
	case op == certifierpb.Op_OP_DELETE && len(found) != 0:
		t.Errorf("%s: the origin still holds %v", change(c), found)
	case op == certifierpb.Op_OP_UPSERT && (len(found) != 1 || found[0] != string(c.GetRow())):
		t.Errorf("%s: the origin holds %v", change(c), found)
	}
}

// wantEntries fails unless every want is among the changes ("op table
// key" or the whole entry with its row).
func wantEntries(t *testing.T, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !hasEntry(got, w) {
			t.Errorf("writeset lacks %q:\n  %s", w, strings.Join(got, "\n  "))
		}
	}
}

func TestCaptureNestedStateUnderRowLevelSecurity(t *testing.T) {
	for _, tc := range []struct{ name, schema string }{
		{"enabled, a role that does not own the table", rlsSchema},
		{"forced, the owner", rlsSchema + rlsForced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplicated(t, tc.schema)

			got := r.write(t, `INSERT INTO docs (id, owner, v) VALUES (4, 'bob', 'd')`)
			wantEntries(t, got, "U public.docs [4] (4,bob,d,none)")

			got = r.write(t, `UPDATE docs SET v = 'w'`)
			wantEntries(t, got, "U public.docs [1] (1,alice,w,x1)", "U public.docs [2] (2,bob,w,x2)",
				"U public.docs [3] (3,bob,w,x3)", "U public.docs [4] (4,bob,w,none)")

			got = r.write(t, `INSERT INTO docs (id, owner, v) VALUES (5, 'bob', 'e'), (6, 'alice', 'f')`)
			wantEntries(t, got, "U public.docs [5] (5,bob,e,none)", "U public.docs [6] (6,alice,f,none)")

			got = r.write(t, `DELETE FROM docs WHERE id = 1`)
			wantEntries(t, got, "D public.docs [1]")
			r.converge(t)

			// A key the transaction wrote before, hidden from alice now: a
			// nested statement may have written it after this statement
			// did. Capture reads the rows back with tashkent_capture's
			// rights (the buffer is sealed: see "Trust model" in doc.go),
			// which no policy limits, so it records the current row; it
			// used to refuse the statement (0A000), not knowing it.
			got = r.write(t, `INSERT INTO docs (id, owner, v) VALUES (7, 'bob', 'g'); UPDATE docs SET v = 'h'`)
			wantEntries(t, got, "U public.docs [7] (7,bob,h,none)", "U public.docs [2] (2,bob,h,x2)")
			r.converge(t)

			// Deleting rows alice cannot see (no WHERE: the DELETE policy
			// lets her).
			got = r.write(t, `DELETE FROM docs`)
			wantEntries(t, got, "D public.docs [2]", "D public.docs [3]", "D public.docs [4]",
				"D public.docs [5]", "D public.docs [6]")
			r.converge(t)
		})
	}
}

// rlsPartitionedSchema: a partitioned table under row-level security
// whose user trigger writes the row again straight through its
// partition, where capture records the change under the partition's
// name.
const rlsPartitionedSchema = `
CREATE ROLE alice LOGIN;
CREATE TABLE parts (id int, r int, owner text NOT NULL, v text, PRIMARY KEY (id, r)) PARTITION BY RANGE (r);
CREATE TABLE parts1 PARTITION OF parts FOR VALUES FROM (0) TO (10);
INSERT INTO parts VALUES (1, 1, 'alice', 'a'), (2, 1, 'bob', 'b');
GRANT SELECT, UPDATE ON parts, parts1 TO alice;
ALTER TABLE parts ENABLE ROW LEVEL SECURITY;
CREATE POLICY parts_see ON parts FOR SELECT USING (owner = current_user);
CREATE POLICY parts_change ON parts FOR UPDATE USING (true) WITH CHECK (true);
CREATE FUNCTION mark_part() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE parts1 SET v = v || '!' WHERE id = NEW.id AND r = NEW.r;
	RETURN NULL;
END $$;
CREATE TRIGGER mark_after AFTER UPDATE ON parts FOR EACH ROW WHEN (NEW.v NOT LIKE '%!') EXECUTE FUNCTION mark_part();`

// TestCaptureNestedStateUnderRowLevelSecurityPartitioned: bob's row,
// hidden through the root, was written again by a nested statement on the
// partition after the statement did (the nested change is recorded under
// parts1, not parts). Capture reads the current row back with
// tashkent_capture's rights and records it, not the statement's own,
// stale, row; it used to refuse the statement (0A000), not seeing it.
func TestCaptureNestedStateUnderRowLevelSecurityPartitioned(t *testing.T) {
	r := newReplicated(t, rlsPartitionedSchema)
	e := r.commit(`UPDATE parts SET v = 'w'`)
	wantEntries(t, changes(e.GetWriteset().GetChanges()), "U public.parts [2,1] (2,1,bob,w!)")
	r.entries = append(r.entries, e)
	r.converge(t)
}

// updateOnlySchema: alice may update docs but not read it (an UPDATE
// without a WHERE clause or SET expression reading a column needs no
// SELECT in PostgreSQL); a user trigger writes docs_log.
const updateOnlySchema = `
CREATE ROLE alice LOGIN;
CREATE TABLE docs (id int PRIMARY KEY, v text, secret text NOT NULL DEFAULT 'none');
CREATE TABLE docs_log (id bigserial PRIMARY KEY, doc int, op text);
INSERT INTO docs VALUES (1, 'a', 'x1'), (2, 'b', 'x2');
GRANT UPDATE ON docs TO alice;
GRANT INSERT ON docs_log TO alice;
GRANT USAGE ON SEQUENCE docs_log_id_seq TO alice;
CREATE FUNCTION log_doc() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO docs_log (doc, op) VALUES (NEW.id, TG_OP);
	RETURN NULL;
END $$;
CREATE TRIGGER log_after AFTER UPDATE ON docs FOR EACH ROW EXECUTE FUNCTION log_doc();`

func TestCaptureNestedStateWithoutSelect(t *testing.T) {
	r := newReplicated(t, updateOnlySchema)

	got := r.write(t, `UPDATE docs SET v = 'u'`)
	wantEntries(t, got, "U public.docs [1] (1,u,x1)", "U public.docs [2] (2,u,x2)")
	r.converge(t)

	// The second UPDATE of the same keys in one transaction: the first
	// one's nested statements could have written them after it. alice
	// cannot read them back, but capture reads with tashkent_capture's
	// rights (the buffer is sealed, see "Trust model" in doc.go): the
	// rows are recorded as they are. It used to refuse (42501).
	got = r.write(t, `UPDATE docs SET v = 'p'; UPDATE docs SET v = 'q'`)
	wantEntries(t, got, "U public.docs [1] (1,q,x1)", "U public.docs [2] (2,q,x2)")
	r.converge(t)
}

// TestCaptureNestedStateReadsNothingHidden: the state path reads with
// tashkent_capture's rights (every row: see "Trust model" in doc.go), so
// forcing it (the nested flag is a setting any session can set) must
// reveal nothing to the session: what it records goes to the sealed
// buffer, which the session cannot read (42501), and to the other
// replicas. And the functions with their owner's rights are exactly
// these, each safe for a reason doc.go gives: the installer's
// (ensure_*, on_ddl, align_*: run by the event trigger and Install;
// record_version: only for the holder of the record token;
// recorded_version: the highest version, nothing else) and
// tashkent_capture's (the capture triggers, which no one else may call or
// attach; create_writeset_buffer; take_writeset, trim_writeset_buffer:
// the record token; collect_writeset: superusers).
func TestCaptureNestedStateReadsNothingHidden(t *testing.T) {
	srv, admin := instance(t, rlsSchema)
	alice := roleSession(t, srv, "alice")
	mustExec(t, alice, `BEGIN; SELECT pg_catalog.set_config('tashkent.nested_capture_1', 'on', true)`)
	for _, sql := range []string{
		`UPDATE docs SET v = 'probe' WHERE id = 2`,
		`DELETE FROM docs WHERE id = 2`,
		`UPDATE docs SET v = 'probe' WHERE secret = 'x2'`,
	} {
		mustExec(t, alice, sql)
	}
	_, err := alice.Exec(tctx(t), `SELECT concat_ws(' ', op, tbl, key, "row") FROM pg_temp.tashkent_writeset ORDER BY seq`)
	if pe := pgErr(t, err); pe.Code != "42501" {
		t.Errorf("alice reads the buffer: %s %s", pe.Code, pe.Message)
	}
	mustExec(t, alice, `ROLLBACK`)

	definer := queryStrings(t, admin, `SELECT p.proname::text FROM pg_proc p
		WHERE p.pronamespace = 'tashkent'::regnamespace AND p.prosecdef ORDER BY 1`)
	eqStrings(t, "tashkent's functions with their owner's rights", definer, []string{
		"align_all_sequences", "align_relation_sequences", "align_sequence", "assert_nothing_to_replicate",
		"capture", "capture_key", "capture_key_plpgsql", "capture_reference_keys", "capture_references",
		"collect_writeset", "create_writeset_buffer",
		"ensure_all_triggers", "ensure_linked_triggers", "ensure_triggers", "on_ddl", "record_version",
		"recorded_version", "take_writeset", "trim_writeset_buffer"})
}
