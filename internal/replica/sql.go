package replica

import (
	"regexp"
	"strings"
)

// installSQL creates (or updates) the tashkent schema in one database. It
// runs as one multi-statement simple query, that is, as one implicit
// transaction, serialized against concurrent installs by an advisory lock.
// Every statement is idempotent.
var installSQL = expand(strings.NewReplacer(
	"$PIN_OUTPUT_SETTINGS_UNLESS_PINNED", pinOutputSettingsUnlessPinned,
	"$SAVE_AND_PIN_OUTPUT_SETTINGS", saveAndPinOutputSettings,
	"$RESTORE_OUTPUT_SETTINGS_AND_RETURN", restoreOutputSettingsAndReturn,
	"$RESTORE_OUTPUT_SETTINGS", restoreOutputSettings,
	"$ROW_EVENTS_1", rowEvents("KEY"),
	"$ROW_EVENTS_N", rowEvents("KEYS"),
	"$STATE_EVENTS_1", stateEvents(keyExpr, "v_pk1"),
	"$STATE_EVENTS_N", stateEvents(keysExpr, "v_pk"),
	"$NESTED_CAPTURE_MAY_HAVE_RUN", nestedCaptureMayHaveRun,
	"$REFUSE_UNCAPTURED_ROWS", refuseUncapturedRows,
	"$CAPTURE_ON_WITH_PINNED_OUTPUT", captureOnWithPinnedOutput,
	"$UNIQUE_KEY_EVENTS_1", uniqueKeyEvents("UKEYS1"),
	"$UNIQUE_KEY_EVENTS_N", uniqueKeyEvents("UKEYSN"),
	"$COLLECT_QUERY", bufferCollectQuery,
	"$DDL_GUARD", ddlGuardSQL,
	"$CLIENT_DDL_SETTING", ClientDDLSetting,
).Replace(strings.NewReplacer(
	"$SEQUENCES", sequencesTemplate, "$CAPTURE_KEY_BODY", captureKeyBody).Replace(installTemplate)), map[string]string{
	"KEY": keyExpr, "KEYS": keysExpr, "UKEYS1": uniqueKeys1Expr, "UKEYSN": uniqueKeysNExpr,
	"REFS": referencesExpr, "REFKEY1": referenceKey1Expr, "REFKEYN": referenceKeyNExpr})

// captureOnWithPinnedOutput is true in a session with capture set up
// whose settings that change how values print are the ones capture pins
// (the C capture makes the same test, capture_on_with_pinned_output):
// then capture needs neither to refuse the write nor to pin them.
const captureOnWithPinnedOutput = `coalesce(pg_catalog.current_setting('tashkent.capture', true) OPERATOR(pg_catalog.=) 'on'
			AND pg_catalog.current_setting('TimeZone') OPERATOR(pg_catalog.=) ANY ('{UTC,Etc/UTC}'::pg_catalog.text[])
			AND pg_catalog.current_setting('DateStyle') OPERATOR(pg_catalog.~~) 'ISO,%'
			AND pg_catalog.current_setting('IntervalStyle') OPERATOR(pg_catalog.=) 'postgres'
			AND pg_catalog.current_setting('bytea_output') OPERATOR(pg_catalog.=) 'hex'
			AND pg_catalog.current_setting('extra_float_digits')::pg_catalog.int4 OPERATOR(pg_catalog.>) 0, false)`

// refuseUncapturedRows ends a capture trigger's call in a session without
// capture (one that bypasses the proxy): it refuses the statement if it
// changed rows (refuse_uncaptured raises), and returns otherwise. For
// INSERT, UPDATE and DELETE; the transition tables are the trigger's.
const refuseUncapturedRows = `IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
			v_rows := EXISTS (SELECT FROM tashkent_new);
		ELSE
			v_rows := EXISTS (SELECT FROM tashkent_old);
		END IF;
		IF v_rows THEN
			PERFORM tashkent.refuse_uncaptured(TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME);
		END IF;
		RETURN NULL;`

// captureKeyBody is the PL/pgSQL body of tashkent.capture_key_plpgsql
// and of tashkent.capture_key, which the triggers call: the same function
// under both names where the C library is not installed (InstallCapture
// replaces capture_key with the C function where it can, and the C
// function falls back to capture_key_plpgsql). See the comment above them
// in installTemplate.
const captureKeyBody = `#variable_conflict use_variable
DECLARE
	v_tbl pg_catalog.text;
	v_saved pg_catalog.text[];
	v_rows pg_catalog.bool;
	v_pk1 pg_catalog.text;
	v_cols pg_catalog.text;
	v_trans pg_catalog.text[];
	v_read pg_catalog.bool;
	v_path pg_catalog.text;
BEGIN
	IF NOT $CAPTURE_ON_WITH_PINNED_OUTPUT THEN
		IF NOT coalesce(pg_catalog.current_setting('tashkent.capture', true) OPERATOR(pg_catalog.=) 'on', false) THEN
			$REFUSE_UNCAPTURED_ROWS
		END IF;
		$SAVE_AND_PIN_OUTPUT_SETTINGS
	END IF;
	v_tbl := pg_catalog.quote_ident(TG_TABLE_SCHEMA) OPERATOR(pg_catalog.||) '.'
		OPERATOR(pg_catalog.||) pg_catalog.quote_ident(TG_TABLE_NAME);

	IF $NESTED_CAPTURE_MAY_HAVE_RUN THEN
		IF tashkent.nested_capture_ran() THEN
			-- A nested capture ran first: record the keys' current state
			-- (see nested_capture_ran), under capture's search_path.
			v_path := pg_catalog.current_setting('search_path');
			PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
			v_pk1 := TG_ARGV[0];
			$STATE_EVENTS_1
			PERFORM pg_catalog.set_config('search_path', v_path, true);
			IF v_saved IS NOT NULL THEN
				$RESTORE_OUTPUT_SETTINGS
			END IF;
			RETURN NULL;
		END IF;
	END IF;

	IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
		PERFORM FROM tashkent_old AS tashkent_o, tashkent_new AS tashkent_n
		WHERE (pg_catalog.to_json(tashkent_o.*) OPERATOR(pg_catalog.->) TG_ARGV[0])::pg_catalog.text OPERATOR(pg_catalog.<>) (pg_catalog.to_json(tashkent_n.*) OPERATOR(pg_catalog.->) TG_ARGV[0])::pg_catalog.text
		LIMIT 1;
		IF FOUND THEN
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
			WITH nw AS (
				SELECT '[' OPERATOR(pg_catalog.||) (pg_catalog.to_json(tashkent_n.*) OPERATOR(pg_catalog.->) TG_ARGV[0])::pg_catalog.text OPERATOR(pg_catalog.||) ']' AS k, (tashkent_n.*)::pg_catalog.text AS r
				FROM tashkent_new AS tashkent_n
			), od AS (
				SELECT '[' OPERATOR(pg_catalog.||) (pg_catalog.to_json(tashkent_o.*) OPERATOR(pg_catalog.->) TG_ARGV[0])::pg_catalog.text OPERATOR(pg_catalog.||) ']' AS k
				FROM tashkent_old AS tashkent_o
			)
			SELECT v_tbl, 'D', od.k, NULL FROM od WHERE NOT EXISTS (SELECT FROM nw WHERE nw.k OPERATOR(pg_catalog.=) od.k)
			UNION ALL
			SELECT v_tbl, 'U', nw.k, nw.r FROM nw;
		ELSE
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
			SELECT v_tbl, COALESCE(TG_ARGV[1], 'U'), '[' OPERATOR(pg_catalog.||) (pg_catalog.to_json(tashkent_n.*) OPERATOR(pg_catalog.->) TG_ARGV[0])::pg_catalog.text OPERATOR(pg_catalog.||) ']', (tashkent_n.*)::pg_catalog.text
			FROM tashkent_new AS tashkent_n;
		END IF;
	ELSIF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
		SELECT v_tbl, 'U', '[' OPERATOR(pg_catalog.||) (pg_catalog.to_json(tashkent_n.*) OPERATOR(pg_catalog.->) TG_ARGV[0])::pg_catalog.text OPERATOR(pg_catalog.||) ']', (tashkent_n.*)::pg_catalog.text
		FROM tashkent_new AS tashkent_n;
	ELSE
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT v_tbl, 'D', '[' OPERATOR(pg_catalog.||) (pg_catalog.to_json(tashkent_o.*) OPERATOR(pg_catalog.->) TG_ARGV[0])::pg_catalog.text OPERATOR(pg_catalog.||) ']'
		FROM tashkent_old AS tashkent_o;
	END IF;

	$RESTORE_OUTPUT_SETTINGS_AND_RETURN
END`

// referenceKey1Expr and referenceKeyNExpr are the fast reference trigger's
// parent key of a row ($1, an alias of a transition table): the referencing
// column's value as a one-element JSON array, printed as the parent's own
// key is; referenceKey1Expr for a trigger with one foreign key (its column
// is TG_ARGV[1]), referenceKeyNExpr inside the loop over several (u.col).
const (
	referenceKey1Expr = `'[' OPERATOR(pg_catalog.||) (pg_catalog.to_json($1.*) OPERATOR(pg_catalog.->) TG_ARGV[1])::pg_catalog.text OPERATOR(pg_catalog.||) ']'`
	referenceKeyNExpr = `'[' OPERATOR(pg_catalog.||) (pg_catalog.to_json($1.*) OPERATOR(pg_catalog.->) u.col)::pg_catalog.text OPERATOR(pg_catalog.||) ']'`
)

// saveAndPinOutputSettings, in a capture function, saves (into v_saved)
// and pins, for the rest of the trigger call, the settings that change how
// values print as text, so that a key prints the same on every replica
// whatever the session set; restoreOutputSettings puts them back. They are
// schema-qualified: capture runs under the session's search_path.
const (
	saveAndPinOutputSettings = `v_saved := ARRAY[pg_catalog.current_setting('TimeZone'), pg_catalog.current_setting('DateStyle'),
			pg_catalog.current_setting('IntervalStyle'), pg_catalog.current_setting('bytea_output'),
			pg_catalog.current_setting('extra_float_digits')];
		PERFORM pg_catalog.set_config('TimeZone', 'UTC', true), pg_catalog.set_config('DateStyle', 'ISO, YMD', true),
			pg_catalog.set_config('IntervalStyle', 'postgres', true), pg_catalog.set_config('bytea_output', 'hex', true),
			pg_catalog.set_config('extra_float_digits', '1', true);`
	// pinOutputSettingsUnlessPinned saves and pins them unless they already
	// have the pinned values (v_saved then stays NULL: nothing to restore).
	pinOutputSettingsUnlessPinned = `IF NOT (current_setting('TimeZone') IN ('UTC', 'Etc/UTC')
			AND current_setting('DateStyle') LIKE 'ISO,%'
			AND current_setting('IntervalStyle') = 'postgres'
			AND current_setting('bytea_output') = 'hex'
			AND current_setting('extra_float_digits')::int > 0) THEN
		` + saveAndPinOutputSettings + `
	END IF;`
	restoreOutputSettings = `PERFORM pg_catalog.set_config('TimeZone', v_saved[1], true), pg_catalog.set_config('DateStyle', v_saved[2], true),
			pg_catalog.set_config('IntervalStyle', v_saved[3], true), pg_catalog.set_config('bytea_output', v_saved[4], true),
			pg_catalog.set_config('extra_float_digits', v_saved[5], true);`
	// restoreOutputSettingsAndReturn ends a capture trigger function:
	// the settings restored if it pinned them, and no row returned.
	restoreOutputSettingsAndReturn = `IF v_saved IS NOT NULL THEN
		` + restoreOutputSettings + `
	END IF;
	RETURN NULL;`
)

// rowEvents is the general capture trigger's statement that buffers a
// statement's row events ('U' upsert with the new row, 'D' delete), with
// keys computed by the macro named key (keyExpr or keysExpr). An UPDATE
// deletes the old keys that no new row has, then upserts every new row.
func rowEvents(key string) string {
	return strings.ReplaceAll(`IF TG_OP = 'UPDATE' THEN
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
			WITH nw AS (
				SELECT $KEY(s.j) AS k, s.r
				FROM (SELECT to_json(tashkent_n.*) AS j, (tashkent_n.*)::text AS r FROM tashkent_new AS tashkent_n) AS s
			), od AS (
				SELECT $KEY(s.j) AS k
				FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
			)
			SELECT v_tbl, 'D', od.k, NULL FROM od WHERE NOT EXISTS (SELECT FROM nw WHERE nw.k = od.k)
			UNION ALL
			SELECT v_tbl, 'U', nw.k, nw.r FROM nw;
		ELSIF TG_OP = 'INSERT' THEN
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
			SELECT v_tbl, 'U', $KEY(s.j), s.r
			FROM (SELECT to_json(tashkent_n.*) AS j, (tashkent_n.*)::text AS r FROM tashkent_new AS tashkent_n) AS s;
		ELSE
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
			SELECT v_tbl, 'D', $KEY(s.j)
			FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s;
		END IF;`, "$KEY", "$"+key)
}

// nestedCaptureMayHaveRun is the test, one plpgsql expression, that a
// capture function makes first: is this a nested capture (trigger depth
// above 1: it must flag the capture of the statement whose trigger ran it,
// see tashkent.nested_capture_ran), or has a nested capture run under a
// top-level statement of this transaction? Neither, the common case, and
// capture records the statement's events as usual, at the cost of this
// one expression.
const nestedCaptureMayHaveRun = `(pg_catalog.pg_trigger_depth() OPERATOR(pg_catalog.>) 1
		OR pg_catalog.current_setting('tashkent.nested_capture_1', true) OPERATOR(pg_catalog.=) 'on')`

// stateEvents is the capture functions' statement that records, when a
// nested capture ran (see tashkent.nested_capture_ran), the current state
// of every key the statement touched: its old and new rows' keys, looked
// up in the table the events name (the trigger's table: the root of a
// partitioned table, which covers its partitions; ONLY the table itself
// otherwise) with the key columns' own equality, which the primary key
// index serves. A key that a row of the table prints as now gets 'U' and
// that row, the nested statements' changes included. (A row found by
// equality that prints its key differently, numeric 1.50 for 1.5, was
// written last either by a nested statement, whose capture recorded it
// under its own key, or by this statement, whose new rows then hold that
// key too: the key gets 'D'.) Keys print exactly as the normal path
// prints them: the same macro (key: keyExpr or keysExpr) over to_json of
// the row, the key columns (pkVar, the capture function's v_pk1 or v_pk)
// passed as $2 of the dynamic statement, which cannot read plpgsql
// variables. The derived tables name every column themselves (tashkent_j,
// tashkent_r, tashkent_nr, tashkent_kk, tashkent_c1..n for the key
// columns), so that no column name of the user's table can clash with
// them. An UPDATE's old and new rows name a key twice: the plain
// statement records it twice alike (Collapse keeps one), the other once
// (DISTINCT ON, preferring the new row). A keeping update is recorded as
// a plain 'U' (conservative).
//
// The lookup runs with the rights of tashkent_capture, the capture
// functions' owner (SECURITY DEFINER; see "Trust model" in doc.go), which
// reads every table (pg_read_all_data) and is exempt from row-level
// security (BYPASSRLS: a policy is user code, and would run with its
// rights). What it reads goes to the sealed buffer and on to the other
// replicas, never back to the session, so it reveals nothing the session
// may not see; and it looks up only the keys of the statement's transition
// tables, which no one can forge (a trigger function cannot be called,
// and no one but a superuser may attach the capture functions). (Before
// the buffer was sealed, the lookup ran with the session's rights, on
// purpose: the session could read its buffer.) So
// $READABLE holds and row_security_active is false: the plain statement
// (first EXECUTE) runs. The second statement is for a tashkent_capture
// that cannot read the whole table (an operator revoked pg_read_all_data
// or BYPASSRLS): a key the lookup does not find is absent for sure only
// when it could read the whole table: SELECT on every column ($READABLE
// below, else the table is not read at all) and no row-level security
// applying to it (row_security_active: policies may hide rows). Otherwise
// the key is recorded from the statement's own rows ('U' with its new
// row, 'D' if it has none), which is the table's state for that key
// unless something wrote the key after this statement did and before
// this capture ran: a nested statement, whose capture ran before this one
// and recorded the key in the buffer. So if the buffer holds a row change
// of this transaction for the key (op U, D or M: 'K' and 'R' events name
// other things), under the table's name or, for a partition tree, under
// any of its tables' (a nested statement may write a partition straight),
// the state is unknown and tashkent.refuse_state_capture raises a clear
// error (0A000 under row-level security, 42501 without SELECT) instead of
// recording a guess. That test is conservative: a change of the key by an
// earlier statement of the transaction refuses too.
//
// The statement is built and planned at every call (the table and key
// columns vary), which is most of this path's cost (see "Nested
// statements" in doc.go). It runs under the capture function's pinned
// print settings and with search_path pg_catalog, pg_temp (capture's SET
// clause; capture_key sets it around this statement).
func stateEvents(key, pkVar string) string {
	macro := map[string]string{"KEY": strings.ReplaceAll(key, pkVar, "$$2")}
	cols := pkVar
	if pkVar == "v_pk1" {
		cols = "ARRAY[v_pk1]"
	}
	return strings.NewReplacer(
		"$TRANSITION_KEY", expand(`$KEY(k.tashkent_j)`, macro),
		"$CURRENT_KEY", expand(`$KEY(t.tashkent_j)`, macro),
		"$READABLE", stateReadable,
		"$LOOKUP_MATCH", strings.ReplaceAll(stateLookupMatch, "$PK_COLS", cols),
		"$LOOKUP", stateLookup,
		"$PK_VAR", pkVar, "$PK_COLS", cols,
	).Replace(`v_cols := (SELECT string_agg(format('tashkent_q.%I AS tashkent_c%s', u.c, u.o), ', ' ORDER BY u.o)
			FROM unnest($PK_COLS) WITH ORDINALITY AS u(c, o));
		v_trans := CASE TG_OP WHEN 'INSERT' THEN '{tashkent_new}'::text[] WHEN 'DELETE' THEN '{tashkent_old}'::text[]
			ELSE '{tashkent_old,tashkent_new}'::text[] END;
		v_read := $READABLE;
		IF v_read AND NOT row_security_active(TG_RELID) THEN
			EXECUTE format($q$
				INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
				SELECT $1, CASE WHEN s.tashkent_r IS NULL THEN 'D' ELSE 'U' END, s.tashkent_kk, s.tashkent_r
				FROM (SELECT $TRANSITION_KEY AS tashkent_kk,
						CASE WHEN t.tashkent_j IS NOT NULL AND ($CURRENT_KEY) = ($TRANSITION_KEY) THEN t.tashkent_r END AS tashkent_r
					FROM (%1$s) AS k
					LEFT JOIN (%2$s) AS t
					ON %3$s) AS s$q$,
				(SELECT string_agg(format('SELECT to_json(tashkent_q.*) AS tashkent_j, %s FROM %I AS tashkent_q', v_cols, tt), ' UNION ALL ')
					FROM unnest(v_trans) AS tt),
				$LOOKUP, $LOOKUP_MATCH)
			USING v_tbl, $PK_VAR;
		ELSE
			EXECUTE format($q$
				INSERT INTO pg_temp.tashkent_writeset (tbl, op, key, row)
				SELECT $1, CASE WHEN s.tashkent_r IS NULL THEN 'D' ELSE 'U' END, s.tashkent_kk, s.tashkent_r
				FROM (SELECT k.tashkent_kk,
						CASE WHEN t.tashkent_j IS NOT NULL THEN
								CASE WHEN ($CURRENT_KEY) = k.tashkent_kk THEN t.tashkent_r END
							WHEN EXISTS (SELECT FROM pg_temp.tashkent_writeset AS w
								WHERE w.xid = pg_current_xact_id() AND w.key = k.tashkent_kk AND w.op IN ('U', 'D', 'M')
									AND (w.tbl = $1 OR w.tbl = ANY (ARRAY(SELECT format('%%I.%%I', n.nspname, c.relname)
										FROM pg_partition_tree(coalesce(pg_partition_root($3), $3)) AS p
										JOIN pg_class AS c ON c.oid = p.relid JOIN pg_namespace AS n ON n.oid = c.relnamespace))))
								THEN tashkent.refuse_state_capture($3, k.tashkent_kk, $4)
							ELSE k.tashkent_nr END AS tashkent_r
					FROM (SELECT DISTINCT ON (k.tashkent_kk) k.*
						FROM (SELECT $TRANSITION_KEY AS tashkent_kk, k.* FROM (%1$s) AS k) AS k
						ORDER BY k.tashkent_kk, k.tashkent_nr NULLS LAST) AS k
					LEFT JOIN (%2$s) AS t
					ON %3$s) AS s$q$,
				(SELECT string_agg(format('SELECT to_json(tashkent_q.*) AS tashkent_j, %s AS tashkent_nr, %s FROM %I AS tashkent_q',
						CASE tt WHEN 'tashkent_new' THEN '(tashkent_q.*)::text' ELSE 'NULL::text' END, v_cols, tt), ' UNION ALL ')
					FROM unnest(v_trans) AS tt),
				CASE WHEN v_read THEN $LOOKUP ELSE 'SELECT NULL::json AS tashkent_j, NULL::text AS tashkent_r' END,
				CASE WHEN v_read THEN $LOOKUP_MATCH ELSE 'false' END)
			USING v_tbl, $PK_VAR, TG_RELID, v_read;
		END IF;`)
}

// stateLookup and stateLookupMatch are the state path's lookup (see
// stateEvents): the table's rows as t, and the condition that t has the
// key columns of k, a transition row.
const (
	stateLookup = `format('SELECT to_json(tashkent_q.*) AS tashkent_j, (tashkent_q.*)::text AS tashkent_r, %s FROM %s AS tashkent_q',
					v_cols,
					(SELECT CASE c.relkind WHEN 'p' THEN '' ELSE 'ONLY ' END FROM pg_class c WHERE c.oid = TG_RELID)
						|| format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME))`
	stateLookupMatch = `'(' || (SELECT string_agg(format('t.tashkent_c%s', u.o), ', ' ORDER BY u.o) FROM unnest($PK_COLS) WITH ORDINALITY AS u(c, o))
					|| ') = (' || (SELECT string_agg(format('k.tashkent_c%s', u.o), ', ' ORDER BY u.o) FROM unnest($PK_COLS) WITH ORDINALITY AS u(c, o))
					|| ')'`
)

// stateReadable is the state path's test (see stateEvents) that
// capture's role can read every row of the trigger's table back: SELECT on the
// table or on each of its columns, and row_security not off where
// row-level security applies (PostgreSQL then refuses the query).
const stateReadable = `(has_table_privilege(TG_RELID, 'SELECT')
				OR NOT EXISTS (SELECT FROM pg_attribute AS a
					WHERE a.attrelid = TG_RELID AND a.attnum > 0 AND NOT a.attisdropped
						AND NOT has_column_privilege(TG_RELID, a.attnum, 'SELECT')))
			AND NOT (current_setting('row_security') = 'off' AND row_security_active(TG_RELID))`

// uniqueKeyEvents is the capture trigger's statement that buffers the
// unique-index keys a statement took or freed ('K' events), with keys
// computed by the macro named keys (uniqueKeys1Expr or uniqueKeysNExpr):
// INSERT takes the new rows' keys, DELETE frees the old rows', UPDATE does
// both for the keys that are not in both.
func uniqueKeyEvents(keys string) string {
	return strings.ReplaceAll(`IF TG_OP = 'INSERT' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT uk.tbl, 'K', uk.key
		FROM (SELECT to_json(tashkent_n.*) AS j FROM tashkent_new AS tashkent_n) AS s
		CROSS JOIN LATERAL $KEYS(s.j) AS uk;
	ELSIF TG_OP = 'UPDATE' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT coalesce(nu.tbl, ou.tbl), 'K', coalesce(nu.key, ou.key)
		FROM (SELECT uk.tbl, uk.key
			FROM (SELECT to_json(tashkent_n.*) AS j FROM tashkent_new AS tashkent_n) AS s
			CROSS JOIN LATERAL $KEYS(s.j) AS uk) AS nu
		FULL JOIN (SELECT uk.tbl, uk.key
			FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
			CROSS JOIN LATERAL $KEYS(s.j) AS uk) AS ou
		ON ou.tbl = nu.tbl AND ou.key = nu.key
		WHERE nu.key IS NULL OR ou.key IS NULL;
	ELSE
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT uk.tbl, 'K', uk.key
		FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
		CROSS JOIN LATERAL $KEYS(s.j) AS uk;
	END IF;`, "$KEYS", "$"+keys)
}

// expand replaces every $NAME(x) in s by the template of NAME, whose $1
// stands for x.
func expand(s string, macros map[string]string) string {
	for name, tmpl := range macros {
		s = regexp.MustCompile(`\$`+name+`\(([a-z._]+)\)`).ReplaceAllString(s, tmpl)
	}
	return s
}

// keyExpr renders a row's primary key as a JSON array of the key columns'
// values, in key order, from the row as to_json prints it ($1); the values
// are copied verbatim, so the key is the same text on every replica. It is
// written inline rather than as a function: a SQL function that is not
// inlined is planned again at every trigger call (~80 µs). keyExpr is the
// form for one key column (v_pk1), the common case; keysExpr the general
// one (v_pk), whose subplan costs every statement that holds it about
// 5 µs to set up even where it is not evaluated, so capture runs
// statements with one or the other, never both (see "Capture cost" in
// doc.go).
const keyExpr = `'[' || ($1 -> v_pk1)::text || ']'`

const keysExpr = `'[' || array_to_string(ARRAY(
		SELECT ($1 -> u.c)::text FROM unnest(v_pk) WITH ORDINALITY AS u(c, o) ORDER BY u.o), ',') || ']'`

// uniqueKeys1Expr and uniqueKeysNExpr are subqueries, for a LATERAL join,
// giving the keys of a row ($1, as to_json prints it) in the table's unique
// indexes other than the primary key: one row (tbl, key) per index, tbl
// being "<table>#<index>" and key a JSON array of the index's key columns'
// values, each printed as keyExpr prints it. Keys with a NULL are left out
// where the index lets NULLs repeat (flag 's'). The indexes come from the
// trigger arguments (see tashkent.capture). uniqueKeys1Expr covers the
// single-column indexes (v_1lab, v_1flag, v_1col: quoted name, flag and
// column per index), uniqueKeysNExpr the others (v_nlab, v_nflag, v_nst,
// v_nn per index; v_ncol holds every index's columns, index i's from
// v_nst[i], v_nn[i] of them). Two forms because the general one costs
// about 15 µs more per statement (its subplans) and nearly every unique
// index has one column; tables with wider ones run both.
const uniqueKeys1Expr = `(SELECT v_tbl || '#' || u.lab AS tbl, '[' || ($1 -> u.col)::text || ']' AS key
	FROM unnest(v_1lab, v_1flag, v_1col) AS u(lab, flag, col)
	WHERE NOT (u.flag = 's' AND ($1 -> u.col)::text = 'null'))`

const uniqueKeysNExpr = `(SELECT v_tbl || '#' || u.lab AS tbl, x.key
	FROM unnest(v_nlab, v_nflag, v_nst, v_nn) AS u(lab, flag, st, n)
	CROSS JOIN LATERAL (
		SELECT '[' || string_agg(e.v, ',' ORDER BY e.g) || ']' AS key, bool_or(e.v = 'null') AS hasnull
		FROM (SELECT g.g, ($1 -> v_ncol[g.g])::text AS v
			FROM generate_series(u.st, u.st + u.n - 1) AS g(g)) AS e) AS x
	WHERE NOT (u.flag = 's' AND x.hasnull))`

// referencesExpr is a subquery, for a LATERAL join, giving the parent keys
// a row ($1, as to_json prints it) references through the table's foreign
// keys: one row (tbl, key) per foreign key whose columns are all non-NULL,
// tbl the name the parent's key is certified under and key a JSON array
// of the values in the parent key's order, each printed as keyExpr prints
// it. The foreign keys come from the trigger arguments (v_lab, v_st, v_n
// per foreign key, its columns in v_col from v_st[i], v_n[i] of them; see
// tashkent.capture_references).
const referencesExpr = `(SELECT u.lab AS tbl, x.key
	FROM unnest(v_lab, v_st, v_n) AS u(lab, st, n)
	CROSS JOIN LATERAL (
		SELECT '[' || string_agg(e.v, ',' ORDER BY e.g) || ']' AS key, bool_or(e.v = 'null') AS hasnull
		FROM (SELECT g.g, ($1 -> v_col[g.g])::text AS v
			FROM generate_series(u.st, u.st + u.n - 1) AS g(g)) AS e) AS x
	WHERE NOT x.hasnull)`

const installTemplate = `
-- Install's own statements (this lock, the tables' defaults and CHECK
-- constraints, which bind the functions and operators they name when they
-- are created) and the bodies of the functions below that have no SET
-- clause name every function and operator with its schema: Install and
-- those functions run under the search_path the database and role give
-- the session, which may list a schema whose look-alike of a builtin is
-- found first (see "Remote apply" in doc.go). The functions with a SET
-- search_path clause find pg_catalog's first and need not.
SELECT pg_catalog.pg_advisory_xact_lock(7346001);

CREATE SCHEMA IF NOT EXISTS tashkent;
GRANT USAGE ON SCHEMA tashkent TO PUBLIC;

-- The writeset buffer's role (see "Trust model" in doc.go): it owns the
-- sessions' writeset buffers and the functions that write and read them,
-- which run with its rights (SECURITY DEFINER), so that no client role can
-- touch a buffer itself. Roles are cluster-wide: the first database's
-- Install creates it, the others find it (a concurrent creation from
-- another database is caught). NOLOGIN, not a superuser, no member; it
-- reads every table (pg_read_all_data, BYPASSRLS) because capture reads
-- back rows by state (see stateEvents) and looks parent keys up, which no
-- row-level security policy (user code) may then run for.
DO $role$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) 'tashkent_capture') THEN
		BEGIN
			CREATE ROLE tashkent_capture NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION BYPASSRLS;
		EXCEPTION WHEN duplicate_object OR unique_violation THEN
			NULL; -- created meanwhile by another database's Install
		END;
	END IF;
	IF EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) 'tashkent_capture'
			AND (r.rolcanlogin OR r.rolsuper OR NOT r.rolbypassrls)) THEN
		ALTER ROLE tashkent_capture NOLOGIN NOSUPERUSER BYPASSRLS;
	END IF;
	IF NOT pg_catalog.pg_has_role('tashkent_capture', 'pg_read_all_data', 'MEMBER') THEN
		BEGIN
			GRANT pg_read_all_data TO tashkent_capture;
		EXCEPTION WHEN unique_violation THEN
			NULL;
		END;
	END IF;
	-- The buffer is a temporary table it creates: it needs TEMP here even
	-- where PUBLIC lost it.
	IF NOT pg_catalog.has_database_privilege('tashkent_capture', pg_catalog.current_database(), 'TEMPORARY') THEN
		EXECUTE pg_catalog.format('GRANT TEMPORARY ON DATABASE %I TO tashkent_capture', pg_catalog.current_database());
	END IF;
END
$role$;

-- Sequences: per-replica stride and offset (sequences.go). Before the
-- event trigger below, which calls these functions.
$SEQUENCES

-- The DDL guard: DDL by roles that are not superusers (ddlguard.go).
$DDL_GUARD

-- One row per committed version, inserted by the transaction that commits
-- the version (a local commit or a remote apply), so that any database image
-- says which versions it holds: max(version) is the replica_version.
CREATE TABLE IF NOT EXISTS tashkent.applied (
	version      bigint PRIMARY KEY,
	committed_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- A client's session records the version of its own commit, in its own
-- transaction, whatever its role: through record_version, which runs with
-- the installer's rights. No role may write tashkent.applied itself: a
-- forged version would make the replica claim commits it does not hold
-- (after a restart it would skip them, or be refused as ahead of the
-- certifier). record_version checks a secret only the proxy knows: drawn
-- here once, readable only by superusers (no grants; the proxy reads it
-- with its administrative connection), and sent by the proxy as a bound
-- parameter, which no other session sees.
CREATE TABLE IF NOT EXISTS tashkent.record_token (token text NOT NULL);
REVOKE ALL ON tashkent.record_token FROM PUBLIC;
INSERT INTO tashkent.record_token (token)
	SELECT pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text OPERATOR(pg_catalog.||)
		pg_catalog.gen_random_uuid()::pg_catalog.text, '-', '')
	WHERE NOT EXISTS (SELECT FROM tashkent.record_token);

-- record_version runs at every local commit, so it has no SET clause (search_path set
-- and restored cost 0.03-0.04 ms per call, measured with pgbench): every
-- name in it is qualified instead, as in capture_key, so that the caller's
-- search_path cannot change what it means.
CREATE OR REPLACE FUNCTION tashkent.record_version(p_version bigint, p_token text) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
BEGIN
	IF p_token IS NULL OR NOT EXISTS (SELECT FROM tashkent.record_token AS t
			WHERE t.token OPERATOR(pg_catalog.=) p_token) THEN
		RAISE EXCEPTION USING
			ERRCODE = '42501',
			MESSAGE = 'only the tashkent proxy records committed versions',
			HINT = 'tashkent.applied says which versions this database holds; do not write it.';
	END IF;
	INSERT INTO tashkent.applied (version) VALUES (p_version);
END
$fn$;

-- recorded_version is max(tashkent.applied), the version this database
-- holds, for any role: a new session's setup compares it with the versions
-- the proxy counts as committed, and refuses a database that lost commits
-- in a crash its postmaster survived (internal/proxy/setup.go). The table
-- itself stays unreadable to client roles.
CREATE OR REPLACE FUNCTION tashkent.recorded_version() RETURNS bigint
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog
AS $fn$
	SELECT coalesce(pg_catalog.max(version), 0) FROM tashkent.applied
$fn$;

-- One row per DDL transaction that changed a replicated table, inserted by
-- the event trigger. The applier caches table definitions and checks
-- max(gen), in its own snapshot, before it trusts the cache. A table rather
-- than a sequence: the row becomes visible when the DDL commits, together
-- with the catalog change.
CREATE TABLE IF NOT EXISTS tashkent.ddl_log (
	gen bigserial PRIMARY KEY,
	at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- check_ddl_generation runs in every apply transaction, so, like
-- capture_key, it has no SET clause (a SET clause costs every call a GUC
-- nest level and a new search path: 2% of the replicas' CPU in a TPC-B
-- profile) and qualifies every name instead.
CREATE OR REPLACE FUNCTION tashkent.check_ddl_generation(p_gen bigint) RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
	IF coalesce((SELECT pg_catalog.max(d.gen) FROM tashkent.ddl_log AS d), 0) OPERATOR(pg_catalog.<>) p_gen THEN
		RAISE EXCEPTION USING ERRCODE = 'TK001',
			MESSAGE = 'tashkent: table definitions changed since the applier cached them';
	END IF;
END
$fn$;

-- refuse_uncaptured raises the error for a write from a session that did
-- not set up capture (see capture).
CREATE OR REPLACE FUNCTION tashkent.refuse_uncaptured(p_op text, p_schema name, p_table name) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	RAISE EXCEPTION USING
		ERRCODE = '55000',
		MESSAGE = format('cannot %s %s: writes must go through the tashkent proxy',
			CASE p_op WHEN 'INSERT' THEN 'insert into' WHEN 'DELETE' THEN 'delete from' ELSE lower(p_op) END,
			format('%I.%I', p_schema, p_table)),
		DETAIL = 'This session did not set up tashkent''s writeset capture, so the change would not reach the other replicas.',
		HINT = 'Connect to the tashkent proxy instead of to PostgreSQL directly; writes must go through the tashkent proxy.';
END
$fn$;

-- nested_capture_ran is called by a capture function when
-- NESTED_CAPTURE_MAY_HAVE_RUN (sql.go) holds. A statement run inside a
-- user trigger (a nested statement) has its capture fire at the end of
-- that statement: for an AFTER ROW trigger, or an AFTER STATEMENT trigger
-- whose name sorts before tashkent_capture_*, before the capture of the
-- outer statement whose trigger ran it, so the buffer's order is not the
-- order of the changes (an outer UPDATE recorded after the nested DELETE
-- of the same row would resurrect it on the other replicas). A capture at
-- trigger depth d > 1 therefore flags depth d - 1 (a transaction-local
-- setting, tashkent.nested_capture_<d-1>), and a capture whose own depth
-- is flagged records the current state of its statement's keys instead of
-- its transition rows (the STATE_EVENTS statements in sql.go): true at the
-- end of the statement in the AFTER and BEFORE cases alike.
--
-- The flag stays set until the transaction ends: one statement can run
-- several capture calls (INSERT ... ON CONFLICT DO UPDATE runs the update's
-- and the insert's; MERGE up to three), all after the nested statements of
-- its row triggers, and a flag cleared by the first would leave the others
-- recording stale rows. A transaction whose user triggers wrote once thus
-- records its later statements at that depth by state too: correct, and
-- about one index lookup per row dearer. It runs with its caller's rights
-- (the capture functions': tashkent_capture's) and no SET clause, like
-- capture_key; anyone may call it, which only makes capture dearer.
CREATE OR REPLACE FUNCTION tashkent.nested_capture_ran() RETURNS boolean
LANGUAGE plpgsql
AS $fn$
DECLARE
	v_depth pg_catalog.int4 := pg_catalog.pg_trigger_depth();
BEGIN
	IF v_depth OPERATOR(pg_catalog.>) 1 THEN
		PERFORM pg_catalog.set_config('tashkent.nested_capture_' OPERATOR(pg_catalog.||)
			(v_depth OPERATOR(pg_catalog.-) 1)::pg_catalog.text, 'on', true);
	END IF;
	RETURN coalesce(pg_catalog.current_setting('tashkent.nested_capture_' OPERATOR(pg_catalog.||)
		v_depth::pg_catalog.text, true) OPERATOR(pg_catalog.=) 'on', false);
END
$fn$;

-- refuse_state_capture raises the error of a statement captured by state
-- (see nested_capture_ran) that cannot learn the current state of one of
-- its keys: the table's row is not visible to capture's role,
-- tashkent_capture (row-level security, or no SELECT on the table:
-- p_readable false; only where an operator took pg_read_all_data or
-- BYPASSRLS from it, see stateEvents) and a nested
-- statement may have written the key after the statement did (the
-- STATE_EVENTS statements in sql.go say when). Recording the statement's
-- own row, or a delete, could be wrong, and the other replicas would keep
-- it. It returns text so that it can stand in a CASE of that statement,
-- but never returns.
CREATE OR REPLACE FUNCTION tashkent.refuse_state_capture(p_rel oid, p_key text, p_readable boolean) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_tbl text := (SELECT format('%I.%I', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_rel);
BEGIN
	IF p_readable THEN
		RAISE EXCEPTION USING
			ERRCODE = '0A000',
			MESSAGE = format('cannot replicate this write of %s key %s: row-level security hides the row from role %s',
				v_tbl, p_key, current_user),
			DETAIL = 'A trigger wrote rows in this transaction, so tashkent reads back the rows the statement wrote to learn their final state, with the role''s rights. The row is not visible to the role, and this transaction already changed that key, so tashkent cannot tell what to replicate.',
			HINT = format('Give role %s a SELECT policy on %s that shows it the rows it writes, exempt it from row-level security (BYPASSRLS), or write this key once per transaction.',
				current_user, v_tbl);
	END IF;
	IF current_setting('row_security') = 'off' AND row_security_active(p_rel) THEN
		RAISE EXCEPTION USING
			ERRCODE = '42501',
			MESSAGE = format('cannot replicate this write of %s key %s: row_security is off and row-level security applies to role %s',
				v_tbl, p_key, current_user),
			DETAIL = 'A trigger wrote rows in this transaction, so tashkent reads back the rows the statement wrote to learn their final state, with the role''s rights, which row_security = off forbids on this table. This transaction already changed that key, so tashkent cannot tell what to replicate.',
			HINT = 'SET row_security = on, or write this key once per transaction.';
	END IF;
	RAISE EXCEPTION USING
		ERRCODE = '42501',
		MESSAGE = format('cannot replicate this write of %s key %s: role %s lacks SELECT on the table', v_tbl, p_key, current_user),
		DETAIL = 'A trigger wrote rows in this transaction, so tashkent reads back the rows the statement wrote to learn their final state, with the role''s rights. This transaction already changed that key, and the role cannot read it.',
		HINT = format('GRANT SELECT ON %s TO %s (row_security must not be off either), or write this key once per transaction.', v_tbl, current_user);
END
$fn$;

-- capture is the statement-level AFTER INSERT / UPDATE / DELETE / TRUNCATE
-- trigger of the replicated tables (the TRUNCATE trigger of all; the
-- others of the tables that capture_key, below, does not cover: a key of
-- several columns, or certified unique indexes). It appends the
-- statement's row changes to the session's writeset buffer,
-- pg_temp.tashkent_writeset, which PrepareSession creates.
--
-- The trigger arguments are the primary key columns and, when the table
-- has unique indexes other than the primary key that tashkent certifies
-- (see ensure_triggers), an empty argument (no column is named '') and
-- then: the number n of single-column indexes, their n quoted names, their
-- n flags ('s': keys with a NULL are skipped, 'n': not), their n columns;
-- then per wider index: its quoted name, flag, number of key columns, and
-- those columns.
--
-- Statement level with transition tables rather than FOR EACH ROW: one call
-- per statement, set-based, and it sees the statement as a whole, which an
-- UPDATE that moves primary keys needs (UPDATE t SET id = 3 - id swaps two
-- keys: per row, "delete 1, upsert 2, delete 2, upsert 1" would end with key
-- 2 deleted). Here the old keys that no new row has are deleted first, then
-- every new row is upserted.
--
-- A row travels in PostgreSQL's own text form of the row (record_out; the
-- applier reads it back with record_in), which is exact for every type:
-- to_json would print SQL NULL and a JSON null in a json/jsonb column alike,
-- and normalize json text. The key is a JSON array of the key values (see
-- keyExpr), readable and compared as bytes by the certifier.
--
-- Unique index values ('K' events, certified like rows and never applied):
-- an INSERT records the new rows' values, a DELETE the old rows' (it frees
-- them), an UPDATE the values the statement took or freed: those of the
-- new rows that no old row had, and those of the old rows that no new row
-- has. A value the statement only moved between its rows stays held by a
-- row the transaction writes, so a transaction that could take or free it
-- conflicts on that row's primary key. The row changes are recorded by the
-- same statements for every table, the values by statements of their own
-- that tables without such indexes never run.
--
-- The function's statements read the transition tables, whose columns are
-- the user's: with variable_conflict use_variable a column that happens to
-- be named like one of the function's variables (v_tbl, tg_argv, ...) does
-- not make them ambiguous (it used to be an error).
--
-- Values must print the same on every replica whatever the client set:
-- the time zone of timestamptz, date and interval style, bytea format and
-- float digits are pinned while capture runs. Pinning them with SET
-- clauses on the function cost about 15 µs per call (five settings set
-- and restored, at every statement), so capture pins them itself, and only
-- when the session's values would print differently: with TimeZone UTC
-- (or Etc/UTC), an ISO DateStyle (its field order does not change ISO
-- output), IntervalStyle postgres, bytea_output hex and
-- extra_float_digits > 0 (all print shortest-exact floats) values print
-- exactly as under the pinned ones. Otherwise it sets them for the
-- transaction (set_config(..., true)) and sets the session's values back
-- before it returns; an error in between aborts the (sub)transaction,
-- which undoes both. capture keeps its SET clause on search_path (about
-- 10 µs per call), so that name lookup in its statements is the same
-- whatever the client's search_path; capture_key qualifies every name
-- instead.
CREATE OR REPLACE FUNCTION tashkent.capture() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
	v_tbl text := format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
	v_pk1 text := TG_ARGV[0];
	v_sep int;
	v_pk text[];
	v_saved text[];
	v_rows boolean;
	v_1lab text[];
	v_1flag text[];
	v_1col text[];
	v_nlab text[];
	v_nflag text[];
	v_nst int[];
	v_nn int[];
	v_ncol text[];
	v_i int;
	v_n int;
	v_cols text;
	v_trans text[];
	v_read boolean;
BEGIN
	IF current_setting('tashkent.capture', true) IS DISTINCT FROM 'on' THEN
		IF TG_OP = 'TRUNCATE' THEN
			PERFORM tashkent.refuse_uncaptured(TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME); -- raises
		END IF;
		$REFUSE_UNCAPTURED_ROWS
	END IF;
	IF TG_OP = 'TRUNCATE' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op) VALUES (v_tbl, 'T');
		RETURN NULL;
	END IF;

	$PIN_OUTPUT_SETTINGS_UNLESS_PINNED

	v_sep := array_position(TG_ARGV, '');
	IF $NESTED_CAPTURE_MAY_HAVE_RUN AND tashkent.nested_capture_ran() THEN
		-- A nested capture ran first: record the keys' current state
		-- (see nested_capture_ran).
		v_pk := CASE WHEN v_sep IS NULL THEN TG_ARGV ELSE TG_ARGV[0:v_sep - 1] END;
		$STATE_EVENTS_N
	ELSIF coalesce(v_sep, TG_NARGS) = 1 THEN
		$ROW_EVENTS_1
	ELSE
		v_pk := CASE WHEN v_sep IS NULL THEN TG_ARGV ELSE TG_ARGV[0:v_sep - 1] END;
		$ROW_EVENTS_N
	END IF;

	IF v_sep IS NOT NULL THEN
		-- Single-column unique indexes.
		v_n := TG_ARGV[v_sep + 1]::int;
		IF v_n > 0 THEN
			v_1lab := TG_ARGV[v_sep + 2:v_sep + 1 + v_n];
			v_1flag := TG_ARGV[v_sep + 2 + v_n:v_sep + 1 + 2 * v_n];
			v_1col := TG_ARGV[v_sep + 2 + 2 * v_n:v_sep + 1 + 3 * v_n];
			$UNIQUE_KEY_EVENTS_1
		END IF;

		-- Wider unique indexes.
		v_i := v_sep + 2 + 3 * v_n;
		IF v_i < TG_NARGS THEN
			WHILE v_i < TG_NARGS LOOP
				v_n := TG_ARGV[v_i + 2]::int;
				v_nlab := v_nlab || TG_ARGV[v_i];
				v_nflag := v_nflag || TG_ARGV[v_i + 1];
				v_nst := v_nst || (coalesce(cardinality(v_ncol), 0) + 1);
				v_nn := v_nn || v_n;
				v_ncol := v_ncol || TG_ARGV[v_i + 3:v_i + 2 + v_n];
				v_i := v_i + 3 + v_n;
			END LOOP;
			$UNIQUE_KEY_EVENTS_N
		END IF;
	END IF;

	$RESTORE_OUTPUT_SETTINGS_AND_RETURN
END
$fn$;

-- capture_key is capture for the common case, a table with one primary key
-- column and no certified unique index (ensure_triggers picks it): the same
-- events, keys and rows, in the same order, at about half the cost per
-- statement (measured, see "Capture cost" in doc.go). Its PL/pgSQL body
-- (captureKeyBody in sql.go) is both capture_key_plpgsql's and that of
-- tashkent.capture_key, which the triggers call; where the C library is
-- installed, InstallCapture then makes capture_key the C function of
-- csrc/tashkent_capture.c, which captures the plain statements itself and
-- calls capture_key_plpgsql for the rest (see "Capture in C" in doc.go).
-- What the PL/pgSQL body saves over capture:
--
--   - No SET clause at all. A SET clause costs every call a GUC nest level
--     and, for search_path, a new search path for the function's
--     statements and again for the caller's; instead every function,
--     operator and type here is schema-qualified, so the client's
--     search_path cannot change what they mean, and the print settings are
--     pinned only when needed (see capture).
--   - Few plpgsql expressions: each is set up again in every transaction.
--   - An UPDATE that moved no key records its upserts without comparing
--     the old and new key sets (the CTE, anti-join and union of capture's
--     UPDATE cost about as much as everything else together). Whether a key
--     moved is asked first, cheaply and exactly: is there an old row and a
--     new row with different keys? With at most one row each (the OLTP
--     case), no such pair means the key did not move. With two rows or more
--     there always is one (keys are distinct), the answer comes after a
--     row or two (LIMIT 1 on a nested loop: the join condition is not an
--     equality, so no hash is built), and the general comparison follows,
--     as in capture. So the events are exactly capture's, but for the op
--     letter of an UPDATE that moved no key (below).
--
-- An UPDATE that moved no key records its rows with the letter TG_ARGV[1]
-- (ensure_triggers passes it): 'M', a keeping update, which certification
-- does not hold against concurrent foreign-key references to the row
-- (certification.KeepingWrite), unless some foreign key references the
-- table through other columns than its primary key: then 'U', a plain
-- write (an UPDATE may have changed the referenced value; no per-row
-- comparison is made). Such a table has a certified unique index (a
-- foreign key needs one on the referenced columns) and is captured by
-- capture, which always records 'U'; the check is made anyway. Choosing
-- the letter is all the hot path does for it; triggers installed before
-- the argument existed ('U') keep working until ensure_triggers replaces
-- them.
CREATE OR REPLACE FUNCTION tashkent.capture_key_plpgsql() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
$CAPTURE_KEY_BODY
$fn$;
CREATE OR REPLACE FUNCTION tashkent.capture_key() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
$CAPTURE_KEY_BODY
$fn$;

-- reject_nopk guards tables without a primary key: tashkent identifies rows
-- by primary key, so it cannot replicate writes to them.
CREATE OR REPLACE FUNCTION tashkent.reject_nopk() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_tbl text := format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
BEGIN
	IF current_setting('tashkent.capture', true) = 'on' THEN
		RAISE EXCEPTION USING
			ERRCODE = '55000',
			MESSAGE = format('table %s has no primary key; tashkent cannot replicate writes to it', v_tbl),
			HINT = format('ALTER TABLE %s ADD PRIMARY KEY (...)', v_tbl);
	END IF;
	RETURN NULL;
END
$fn$;

-- Foreign-key references (see "Foreign keys" in doc.go). A transaction
-- that inserts a row, or updates rows so that they reference a parent row
-- they did not reference before, records that parent as an 'R' event,
-- certified as a shared key (OP_REFERENCE) and never applied: it conflicts
-- with a concurrent write of the parent row, so a parent deleted on one
-- replica while a child is inserted on another aborts one of the two
-- instead of leaving the same orphan on every replica.
--
-- reference_prints_alike reports whether a referencing column (type,
-- typmod, collation) and the parent key column it references print equal
-- values as the same text (to_json, under capture's pinned settings), so
-- that the referencing row's own values name the parent's key. True for
-- the same type and typmod among types whose equality is identity of the
-- printed value (numeric and char only with a typmod: it fixes the scale
-- and the padding), for integers of any width, and for text and varchar;
-- collatable ones only under deterministic collations. Everything else
-- (other types, domains, float -0 = 0, jsonb 'null', interval) goes
-- through the parent lookup.
CREATE OR REPLACE FUNCTION tashkent.reference_prints_alike(p_ctype oid, p_cmod int, p_ccoll oid,
	p_ptype oid, p_pmod int, p_pcoll oid) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
	SELECT (
		(p_ctype = p_ptype AND p_cmod = p_pmod
			AND p_ctype IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype, 'text'::regtype,
				'varchar'::regtype, 'uuid'::regtype, 'bool'::regtype, 'date'::regtype,
				'timestamp'::regtype, 'timestamptz'::regtype, 'time'::regtype, 'bytea'::regtype,
				'oid'::regtype, 'numeric'::regtype, 'bpchar'::regtype)
			AND NOT (p_ctype IN ('numeric'::regtype, 'bpchar'::regtype) AND p_cmod = -1))
		OR (p_ctype IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)
			AND p_ptype IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype))
		OR (p_ctype IN ('text'::regtype, 'varchar'::regtype) AND p_ptype IN ('text'::regtype, 'varchar'::regtype)))
		AND coalesce((SELECT bool_and(c.collisdeterministic) FROM pg_collation c WHERE c.oid IN (p_ccoll, p_pcoll)), true)
$fn$;

-- reference_condition is the condition, for capture_references' parent
-- lookup, that the parent row p's column p_pcol equals the referencing
-- row x's column p_ccol under the foreign key's operator p_op (PK = FK),
-- the referencing value cast to the operator's type, compared under the
-- parent column's collation p_coll, as PostgreSQL's own check compares.
-- Where the operator compares a timestamptz with a timestamp or date, the
-- session's time zone decides which instant the other one is, and the
-- lookup runs under capture's pinned UTC: that side is converted
-- explicitly, at the time zone the statement ran in ($1 of the lookup).
CREATE OR REPLACE FUNCTION tashkent.reference_condition(p_pcol name, p_ccol name, p_op oid, p_coll oid)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
	SELECT CASE WHEN op.oprleft <> op.oprright AND 'timestamptz'::regtype IN (op.oprleft, op.oprright)
			AND (op.oprleft IN ('timestamp'::regtype, 'date'::regtype) OR op.oprright IN ('timestamp'::regtype, 'date'::regtype))
		THEN format('%s OPERATOR(pg_catalog.=) %s',
			CASE WHEN op.oprleft = 'timestamptz'::regtype THEN format('p.%I', p_pcol)
				ELSE format('((p.%I)::timestamp AT TIME ZONE $1)', p_pcol) END,
			CASE WHEN op.oprright = 'timestamptz'::regtype THEN format('(x.%I)::timestamptz', p_ccol)
				ELSE format('((x.%I)::timestamp AT TIME ZONE $1)', p_ccol) END)
		ELSE format('p.%I OPERATOR(%I.%s) (x.%I)::%s', p_pcol, opn.nspname, op.oprname, p_ccol, format_type(op.oprright, -1))
			|| coalesce((SELECT format(' COLLATE %I.%I', cn.nspname, co.collname)
				FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
				WHERE co.oid = p_coll), '')
		END
	FROM pg_operator op JOIN pg_namespace opn ON opn.oid = op.oprnamespace
	WHERE op.oid = p_op
$fn$;

-- reference_arguments lists a table's foreign keys as the arguments of its
-- reference triggers: per foreign key, the name the parent's key goes by
-- in certification, the number n of columns, and the n referencing
-- columns in the order of the parent's key. The name is the parent table
-- (format('%I.%I'), as capture names it) when the foreign key uses the
-- parent's primary key, and "<table>#<index>" (as capture names a unique
-- index value) when it uses another unique index, so that the reference
-- meets the parent's row changes or its unique-index values. Foreign keys
-- are in name order. Left out: the per-partition copies PostgreSQL makes
-- of a foreign key that references a partitioned table (same referencing
-- table, a parent constraint): the parent's rows are captured under the
-- partitioned table's name, which the top constraint gives. For the same
-- reason a foreign key that references a partition itself is named by the
-- root of its partition tree and the root's index (pg_partition_root),
-- when the index is part of the tree's.
--
-- A foreign key whose referencing values can print differently from the
-- parent key they equal (reference_prints_alike is false for a column:
-- numeric 1.5 = 1.50, char(2) 'ab' = char(4) 'ab  ', timestamp against
-- timestamptz, float -0 = 0, jsonb 'null', a nondeterministic collation,
-- a domain) is listed instead as the name, 'L', and three SQL fragments
-- for capture_references' parent lookup: the parent relation (AS p), the
-- parent key's JSON array printed from the parent row p (as capture
-- prints the parent's own key), and the condition that p is the row a
-- referencing row x references, with the foreign key's own equality
-- operators (conpfeqop) and the parent column's collation, as
-- PostgreSQL's own foreign-key check compares.
CREATE OR REPLACE FUNCTION tashkent.reference_arguments(p_rel oid) RETURNS text[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
	SELECT coalesce(array_agg(x.a ORDER BY f.conname, f.oid, x.o), '{}')
	FROM (
		SELECT con.conname, con.oid,
			format('%I.%I', pn.nspname, pc.relname)
				|| CASE WHEN ri.indisprimary THEN '' ELSE '#' || quote_ident(ic.relname) END AS lab,
			cardinality(con.conkey) AS n,
			cols.names AS cols, cols.alike,
			CASE WHEN pc.relkind = 'p' THEN '' ELSE 'ONLY ' END
				|| format('%I.%I', pn.nspname, pc.relname) || ' AS p' AS lookup_from,
			cols.lookup_key, cols.lookup_match
		FROM pg_constraint con
		JOIN pg_index pi ON pi.indexrelid = con.conindid
		CROSS JOIN LATERAL (SELECT coalesce(pg_partition_root(con.conindid), con.conindid) AS idx,
			CASE WHEN pg_partition_root(con.conindid) IS NULL THEN con.confrelid
				ELSE pg_partition_root(con.confrelid) END AS rel) AS root
		JOIN pg_index ri ON ri.indexrelid = root.idx
		JOIN pg_class ic ON ic.oid = root.idx
		JOIN pg_class pc ON pc.oid = root.rel
		JOIN pg_namespace pn ON pn.oid = pc.relnamespace
		CROSS JOIN LATERAL (
			SELECT array_agg(ca.attname::text ORDER BY k.ord) AS names,
				bool_and(tashkent.reference_prints_alike(ca.atttypid, ca.atttypmod, ca.attcollation,
					pa.atttypid, pa.atttypmod, pa.attcollation)) AS alike,
				'''['' || ' || string_agg(format('to_json(p.%I)::text', pa.attname), ' || '','' || ' ORDER BY k.ord)
					|| ' || '']''' AS lookup_key,
				string_agg(tashkent.reference_condition(pa.attname, ca.attname, m.eqop, pa.attcollation),
					' AND ' ORDER BY k.ord) AS lookup_match
			FROM unnest(pi.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
			JOIN unnest(con.confkey, con.conkey, con.conpfeqop) AS m(pk, fk, eqop) ON m.pk = k.attnum
			JOIN pg_attribute ca ON ca.attrelid = con.conrelid AND ca.attnum = m.fk
			JOIN pg_attribute pa ON pa.attrelid = con.confrelid AND pa.attnum = m.pk
			WHERE k.ord <= pi.indnkeyatts) AS cols
		WHERE con.contype = 'f' AND con.conrelid = p_rel
			AND (con.conparentid = 0
				OR (SELECT pcon.conrelid FROM pg_constraint pcon WHERE pcon.oid = con.conparentid) <> con.conrelid)
	) AS f
	CROSS JOIN LATERAL unnest(CASE WHEN f.alike THEN ARRAY[f.lab, f.n::text] || f.cols
		ELSE ARRAY[f.lab, 'L', f.lookup_from, f.lookup_key, f.lookup_match] END) WITH ORDINALITY AS x(a, o)
	WHERE cardinality(f.cols) = f.n
$fn$;

-- capture_references is the statement-level AFTER INSERT and AFTER UPDATE
-- trigger of tables with foreign keys (tashkent_capture_ref_ins and
-- _upd; ensure_triggers installs them only there, so tables without
-- foreign keys run nothing more). Its arguments are reference_arguments'.
-- It fires after the capture triggers (names sort so), which already
-- refused the write if the session bypasses the proxy.
--
-- INSERT: every new row references, per foreign key, the parent key its
-- columns hold. UPDATE: only the parent keys the statement's new rows hold
-- and its old rows did not (the foreign-key columns changed). A parent key
-- an old row already held needs no reference: a transaction that deleted
-- or re-keyed that parent concurrently had to cascade to, or fail on, that
-- old row (its foreign-key check saw it), and this statement writes that
-- row too, so the two conflict on it; or the old row was written earlier
-- in this transaction, whose own statement recorded the reference. MATCH
-- SIMPLE: a key with any NULL column references nothing (MATCH FULL allows
-- only all or none NULL, so the rule holds for it too). Values print as in
-- capture (the same JSON text, settings pinned the same way), so the key
-- equals the parent's key text when the columns print alike
-- (reference_prints_alike); the other foreign keys ('L' arguments) look
-- the parent rows up and print their key. It runs with tashkent_capture's
-- rights, like the other capture functions (see "Trust model" in doc.go),
-- which read every parent (and no policy runs). Its arguments are SQL,
-- run with those rights: only ensure_triggers writes them, from the
-- catalog, because no one else may execute (so attach) this function.
CREATE OR REPLACE FUNCTION tashkent.capture_references() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
	v_lab text[];
	v_st int[];
	v_n int[];
	v_col text[];
	v_i int := 0;
	v_k int;
	v_saved text[];
	v_lookups text[] := '{}'; -- per lookup foreign key: name, from, key, match
	v_zone text := current_setting('TimeZone'); -- the statement's, before pinning
BEGIN
	IF current_setting('tashkent.capture', true) IS DISTINCT FROM 'on' THEN
		RETURN NULL;
	END IF;
	$PIN_OUTPUT_SETTINGS_UNLESS_PINNED

	WHILE v_i < TG_NARGS LOOP
		IF TG_ARGV[v_i + 1] = 'L' THEN
			v_lookups := v_lookups || TG_ARGV[v_i] || TG_ARGV[v_i + 2:v_i + 4];
			v_i := v_i + 5;
			CONTINUE;
		END IF;
		v_k := TG_ARGV[v_i + 1]::int;
		v_lab := v_lab || TG_ARGV[v_i];
		v_st := v_st || (coalesce(cardinality(v_col), 0) + 1);
		v_n := v_n || v_k;
		v_col := v_col || TG_ARGV[v_i + 2:v_i + 1 + v_k];
		v_i := v_i + 2 + v_k;
	END LOOP;

	IF v_lab IS NULL THEN
		NULL; -- every foreign key goes through the parent lookup
	ELSIF TG_OP = 'INSERT' THEN
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT DISTINCT r.tbl, 'R', r.key
		FROM (SELECT to_json(tashkent_n.*) AS j FROM tashkent_new AS tashkent_n) AS s
		CROSS JOIN LATERAL $REFS(s.j) AS r;
	ELSE
		INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
		SELECT r.tbl, 'R', r.key
		FROM (SELECT to_json(tashkent_n.*) AS j FROM tashkent_new AS tashkent_n) AS s
		CROSS JOIN LATERAL $REFS(s.j) AS r
		EXCEPT
		SELECT r.tbl, 'R', r.key
		FROM (SELECT to_json(tashkent_o.*) AS j FROM tashkent_old AS tashkent_o) AS s
		CROSS JOIN LATERAL $REFS(s.j) AS r;
	END IF;

	-- Foreign keys whose values may print differently from the parent key
	-- they equal (see reference_arguments): the parent rows the new rows
	-- reference, found with the foreign key's own equality, print the key
	-- as the parent's capture does. UPDATE: those no old row referenced.
	v_i := 1;
	WHILE v_i < cardinality(v_lookups) LOOP
		EXECUTE format('INSERT INTO pg_temp.tashkent_writeset (tbl, op, key) '
			'SELECT DISTINCT %L, ''R'', %s FROM %s '
			'WHERE EXISTS (SELECT FROM tashkent_new AS x WHERE %s)',
			v_lookups[v_i], v_lookups[v_i + 2], v_lookups[v_i + 1], v_lookups[v_i + 3])
			|| CASE WHEN TG_OP = 'UPDATE' THEN format(
				' AND NOT EXISTS (SELECT FROM tashkent_old AS x WHERE %s)', v_lookups[v_i + 3]) ELSE '' END
			USING v_zone;
		v_i := v_i + 4;
	END LOOP;

	$RESTORE_OUTPUT_SETTINGS_AND_RETURN
END
$fn$;

-- capture_reference_keys is capture_references for the common case, a
-- table whose foreign keys all have one column (ensure_triggers picks it):
-- the same events, at a fraction of the cost per statement (measured, see
-- "Foreign keys" in doc.go). Its arguments are pairs: the name the parent
-- key is certified under, and the referencing column. Like capture_key it
-- has no SET clause: every name is schema-qualified, and print settings
-- are pinned only when the session's would print differently.
CREATE OR REPLACE FUNCTION tashkent.capture_reference_keys() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
#variable_conflict use_variable
DECLARE
	v_saved pg_catalog.text[];
	v_lab pg_catalog.text[];
	v_col pg_catalog.text[];
	v_i pg_catalog.int4 := 0;
BEGIN
	IF NOT $CAPTURE_ON_WITH_PINNED_OUTPUT THEN
		IF NOT coalesce(pg_catalog.current_setting('tashkent.capture', true) OPERATOR(pg_catalog.=) 'on', false) THEN
			RETURN NULL; -- the capture trigger, which fired first, refused the write
		END IF;
		$SAVE_AND_PIN_OUTPUT_SETTINGS
	END IF;

	IF TG_NARGS OPERATOR(pg_catalog.=) 2 THEN
		-- One foreign key: no arrays.
		IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
			SELECT DISTINCT TG_ARGV[0], 'R', s.k
			FROM (SELECT $REFKEY1(tashkent_n) AS k
				FROM tashkent_new AS tashkent_n) AS s
			WHERE s.k OPERATOR(pg_catalog.<>) '[null]';
		ELSE
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
			SELECT TG_ARGV[0], 'R', s.k
			FROM (SELECT $REFKEY1(tashkent_n) AS k
				FROM tashkent_new AS tashkent_n
				EXCEPT
				SELECT $REFKEY1(tashkent_o)
				FROM tashkent_old AS tashkent_o) AS s
			WHERE s.k OPERATOR(pg_catalog.<>) '[null]';
		END IF;
	ELSE
		WHILE v_i OPERATOR(pg_catalog.<) TG_NARGS LOOP
			v_lab := v_lab OPERATOR(pg_catalog.||) TG_ARGV[v_i];
			v_col := v_col OPERATOR(pg_catalog.||) TG_ARGV[v_i OPERATOR(pg_catalog.+) 1];
			v_i := v_i OPERATOR(pg_catalog.+) 2;
		END LOOP;
		IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
			SELECT DISTINCT s.lab, 'R', s.k
			FROM (SELECT u.lab, $REFKEYN(tashkent_n) AS k
				FROM tashkent_new AS tashkent_n, ROWS FROM (pg_catalog.unnest(v_lab), pg_catalog.unnest(v_col)) AS u(lab, col)) AS s
			WHERE s.k OPERATOR(pg_catalog.<>) '[null]';
		ELSE
			INSERT INTO pg_temp.tashkent_writeset (tbl, op, key)
			SELECT s.lab, 'R', s.k
			FROM (SELECT u.lab, $REFKEYN(tashkent_n) AS k
				FROM tashkent_new AS tashkent_n, ROWS FROM (pg_catalog.unnest(v_lab), pg_catalog.unnest(v_col)) AS u(lab, col)
				EXCEPT
				SELECT u.lab, $REFKEYN(tashkent_o)
				FROM tashkent_old AS tashkent_o, ROWS FROM (pg_catalog.unnest(v_lab), pg_catalog.unnest(v_col)) AS u(lab, col)) AS s
			WHERE s.k OPERATOR(pg_catalog.<>) '[null]';
		END IF;
	END IF;

	$RESTORE_OUTPUT_SETTINGS_AND_RETURN
END
$fn$;

-- reference_pairs turns reference_arguments' list into capture_reference_keys'
-- pairs (name, column) when every foreign key has one column, else NULL.
CREATE OR REPLACE FUNCTION tashkent.reference_pairs(p_args text[]) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_out text[] := '{}';
	v_i int := 1;
BEGIN
	WHILE v_i <= cardinality(p_args) LOOP
		IF p_args[v_i + 1] <> '1' THEN
			RETURN NULL;
		END IF;
		v_out := v_out || ARRAY[p_args[v_i], p_args[v_i + 2]];
		v_i := v_i + 3;
	END LOOP;
	RETURN v_out;
END
$fn$;

-- ensure_linked_triggers runs ensure_triggers on the tables a foreign key
-- links to p_rel (other than p_rel itself): those whose foreign keys
-- reference it (p_referencing) or those its own foreign keys reference
-- (not p_referencing); it reports whether any of their triggers changed.
CREATE OR REPLACE FUNCTION tashkent.ensure_linked_triggers(p_rel oid, p_referencing boolean) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_rel oid;
	v_changed boolean := false;
BEGIN
	FOR v_rel IN
		SELECT DISTINCT CASE WHEN p_referencing THEN con.conrelid ELSE con.confrelid END FROM pg_constraint con
		WHERE con.contype = 'f' AND con.conrelid <> con.confrelid
			AND CASE WHEN p_referencing THEN con.confrelid ELSE con.conrelid END = p_rel
	LOOP
		IF tashkent.ensure_triggers(v_rel) IS DISTINCT FROM 'unchanged' THEN
			v_changed := true;
		END IF;
	END LOOP;
	RETURN v_changed;
END
$fn$;
-- Its one-direction predecessor (session 4), replaced by it.
DROP FUNCTION IF EXISTS tashkent.ensure_referencing_triggers(oid);

-- ensure_triggers gives one table the triggers it should have: the capture
-- triggers (with the primary key columns and the certified unique indexes
-- as arguments, see capture) when it has a primary key, the no-primary-key
-- guard otherwise, nothing when it is not a replicated table. Triggers named
-- tashkent_* that are already right are left alone, so running it again
-- takes no lock.
--
-- Certified unique indexes: unique, not the primary key, valid, neither
-- partial nor on expressions, in name order; only their key columns
-- (INCLUDE columns are not part of the key). Keys with a NULL are skipped
-- ('s') unless the index treats NULLs as equal (NULLS NOT DISTINCT) or a
-- column's value can print as a JSON null without being NULL (json, jsonb,
-- or a type with its own cast to json, which to_json uses): then SQL NULL
-- and that value share a key, which can only cause a spurious conflict.
CREATE OR REPLACE FUNCTION tashkent.ensure_triggers(p_rel oid) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_rel regclass;
	v_fn text;
	v_pk text[];
	v_uargs text[] := '{}';
	v_1lab text[] := '{}';
	v_1flag text[] := '{}';
	v_1col text[] := '{}';
	v_idx record;
	v_args text;
	v_argbytes bytea;
	v_refargs text[];
	v_refpairs text[];
	v_reffn text := 'tashkent.capture_references';
	v_refargbytes bytea;
	v_want text[];
	v_have text[];
	v_trg name;
BEGIN
	SELECT c.oid::regclass INTO v_rel
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.oid = p_rel
		AND c.relkind IN ('r', 'p')
		AND c.relpersistence <> 't'
		AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'tashkent', 'pg_toast')
		AND n.nspname NOT LIKE 'pg\_temp\_%'
		AND n.nspname NOT LIKE 'pg\_toast\_temp\_%';
	IF v_rel IS NULL THEN
		RETURN NULL;
	END IF;

	v_pk := ARRAY(
		SELECT a.attname::text
		FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = p_rel AND i.indisprimary AND k.ord <= i.indnkeyatts
		ORDER BY k.ord);

	IF cardinality(v_pk) > 0 THEN
		FOR v_idx IN
			SELECT quote_ident(ci.relname) AS name,
				ARRAY(SELECT a.attname::text
					FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
					JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
					WHERE k.ord <= i.indnkeyatts ORDER BY k.ord) AS cols,
				i.indnullsnotdistinct OR EXISTS (
					WITH RECURSIVE b(t) AS (
						SELECT a.atttypid
						FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
						JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
						WHERE k.ord <= i.indnkeyatts
						UNION
						SELECT ty.typbasetype FROM pg_type ty JOIN b ON ty.oid = b.t WHERE ty.typtype = 'd')
					SELECT FROM b
					WHERE b.t IN ('json'::regtype, 'jsonb'::regtype)
						OR (b.t >= 16384 AND EXISTS (SELECT FROM pg_cast c
							WHERE c.castsource = b.t AND c.casttarget = 'json'::regtype))) AS keepnull
			FROM pg_index i JOIN pg_class ci ON ci.oid = i.indexrelid
			WHERE i.indrelid = p_rel AND i.indisunique AND NOT i.indisprimary AND i.indisvalid
				AND i.indpred IS NULL AND i.indexprs IS NULL
			ORDER BY ci.relname
		LOOP
			IF cardinality(v_idx.cols) = 1 THEN
				v_1lab := v_1lab || v_idx.name;
				v_1flag := v_1flag || CASE WHEN v_idx.keepnull THEN 'n' ELSE 's' END;
				v_1col := v_1col || v_idx.cols;
			ELSE
				v_uargs := v_uargs || ARRAY[v_idx.name, CASE WHEN v_idx.keepnull THEN 'n' ELSE 's' END,
					cardinality(v_idx.cols)::text] || v_idx.cols;
			END IF;
		END LOOP;
		IF cardinality(v_1lab) > 0 OR cardinality(v_uargs) > 0 THEN
			v_uargs := ARRAY['', cardinality(v_1lab)::text] || v_1lab || v_1flag || v_1col || v_uargs;
		END IF;
		v_args := (SELECT string_agg(quote_literal(c), ', ' ORDER BY o) FROM unnest(v_pk || v_uargs) WITH ORDINALITY AS u(c, o));
		v_argbytes := (SELECT string_agg(convert_to(u.c, 'UTF8') || '\x00'::bytea, ''::bytea ORDER BY u.o)
			FROM unnest(v_pk || v_uargs) WITH ORDINALITY AS u(c, o));
		-- One key column and no certified unique index: the common case,
		-- captured by capture_key (see there); the others by capture.
		v_fn := CASE WHEN cardinality(v_pk) = 1 AND cardinality(v_uargs) = 0
			THEN 'tashkent.capture_key' ELSE 'tashkent.capture' END;
		IF v_fn = 'tashkent.capture_key' THEN
			-- The op letter of an UPDATE that moved no key (see
			-- capture_key): 'M' unless a foreign key references the table
			-- through an index other than its primary key.
			v_pk := v_pk || CASE WHEN EXISTS (SELECT FROM pg_constraint con
					WHERE con.contype = 'f' AND con.confrelid = p_rel
						AND NOT EXISTS (SELECT FROM pg_index i WHERE i.indexrelid = con.conindid AND i.indisprimary))
				THEN 'U' ELSE 'M' END;
			v_args := (SELECT string_agg(quote_literal(c), ', ' ORDER BY o) FROM unnest(v_pk) WITH ORDINALITY AS u(c, o));
			v_argbytes := (SELECT string_agg(convert_to(u.c, 'UTF8') || '\x00'::bytea, ''::bytea ORDER BY u.o)
				FROM unnest(v_pk) WITH ORDINALITY AS u(c, o));
		END IF;
		v_refargs := tashkent.reference_arguments(p_rel);
		-- One-column foreign keys only, the common case: the cheaper
		-- capture_reference_keys.
		v_refpairs := tashkent.reference_pairs(v_refargs);
		IF cardinality(v_refargs) > 0 AND v_refpairs IS NOT NULL THEN
			v_refargs := v_refpairs;
			v_reffn := 'tashkent.capture_reference_keys';
		END IF;
		v_refargbytes := (SELECT string_agg(convert_to(u.c, 'UTF8') || '\x00'::bytea, ''::bytea ORDER BY u.o)
			FROM unnest(v_refargs) WITH ORDINALITY AS u(c, o));
		v_want := ARRAY[
			'tashkent_capture_del:' || encode(v_argbytes, 'hex') || ':O:' || v_fn,
			'tashkent_capture_ins:' || encode(v_argbytes, 'hex') || ':O:' || v_fn]
			|| CASE WHEN cardinality(v_refargs) > 0 THEN ARRAY[
				'tashkent_capture_ref_ins:' || encode(v_refargbytes, 'hex') || ':O:' || v_reffn,
				'tashkent_capture_ref_upd:' || encode(v_refargbytes, 'hex') || ':O:' || v_reffn]
				ELSE '{}'::text[] END
			|| ARRAY[
			'tashkent_capture_trunc::O:tashkent.capture',
			'tashkent_capture_upd:' || encode(v_argbytes, 'hex') || ':O:' || v_fn];
	ELSE
		v_want := ARRAY['tashkent_nopk::O:tashkent.reject_nopk'];
	END IF;
	v_have := ARRAY(
		SELECT t.tgname || ':' || encode(t.tgargs, 'hex') || ':' || t.tgenabled::text || ':' || t.tgfoid::regproc::text
		FROM pg_trigger t
		WHERE t.tgrelid = p_rel AND NOT t.tgisinternal AND t.tgname LIKE 'tashkent\_%'
		ORDER BY t.tgname);
	IF v_have = v_want THEN
		RETURN 'unchanged';
	END IF;

	FOR v_trg IN
		SELECT t.tgname FROM pg_trigger t
		WHERE t.tgrelid = p_rel AND NOT t.tgisinternal AND t.tgname LIKE 'tashkent\_%'
	LOOP
		EXECUTE format('DROP TRIGGER %I ON %s', v_trg, v_rel);
	END LOOP;

	IF cardinality(v_pk) > 0 THEN
		EXECUTE format('CREATE TRIGGER tashkent_capture_ins AFTER INSERT ON %s '
			'REFERENCING NEW TABLE AS tashkent_new '
			'FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)', v_rel, v_fn, v_args);
		EXECUTE format('CREATE TRIGGER tashkent_capture_upd AFTER UPDATE ON %s '
			'REFERENCING OLD TABLE AS tashkent_old NEW TABLE AS tashkent_new '
			'FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)', v_rel, v_fn, v_args);
		EXECUTE format('CREATE TRIGGER tashkent_capture_del AFTER DELETE ON %s '
			'REFERENCING OLD TABLE AS tashkent_old '
			'FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)', v_rel, v_fn, v_args);
		EXECUTE format('CREATE TRIGGER tashkent_capture_trunc AFTER TRUNCATE ON %s '
			'FOR EACH STATEMENT EXECUTE FUNCTION tashkent.capture()', v_rel);
		IF cardinality(v_refargs) > 0 THEN
			v_args := (SELECT string_agg(quote_literal(c), ', ' ORDER BY o) FROM unnest(v_refargs) WITH ORDINALITY AS u(c, o));
			EXECUTE format('CREATE TRIGGER tashkent_capture_ref_ins AFTER INSERT ON %s '
				'REFERENCING NEW TABLE AS tashkent_new '
				'FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)', v_rel, v_reffn, v_args);
			EXECUTE format('CREATE TRIGGER tashkent_capture_ref_upd AFTER UPDATE ON %s '
				'REFERENCING OLD TABLE AS tashkent_old NEW TABLE AS tashkent_new '
				'FOR EACH STATEMENT EXECUTE FUNCTION %s(%s)', v_rel, v_reffn, v_args);
		END IF;
		RETURN 'capture';
	END IF;
	EXECUTE format('CREATE TRIGGER tashkent_nopk BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s '
		'FOR EACH STATEMENT EXECUTE FUNCTION tashkent.reject_nopk()', v_rel);
	RETURN 'nopk';
END
$fn$;

CREATE OR REPLACE FUNCTION tashkent.ensure_all_triggers() RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	PERFORM tashkent.ensure_triggers(c.oid) FROM pg_class c WHERE c.relkind IN ('r', 'p');
END
$fn$;

-- The trigger functions above run with their owner's (a superuser's)
-- rights for on_ddl and Install, which call them as that owner; no other
-- role may (every role could drop and create triggers on any table with
-- them: PUBLIC gets EXECUTE on a new function by default).
REVOKE EXECUTE ON FUNCTION tashkent.ensure_triggers(oid), tashkent.ensure_linked_triggers(oid, boolean),
	tashkent.ensure_all_triggers() FROM PUBLIC;

-- on_ddl keeps the triggers right as tables are created and altered (a new
-- table, CREATE TABLE AS, a primary key added or dropped, a key column
-- renamed, a partition attached, a unique index created, dropped or
-- renamed). A command on an index or a constraint counts for its table. A
-- dropped index is gone from the catalog by now, and DROP reports no
-- objects here: DROP INDEX refreshes every table whose capture triggers
-- list unique indexes (their arguments hold an empty one, the only empty
-- argument there is, so two NUL bytes in a row).
--
-- It also guards the sealed writeset buffer (see create_writeset_buffer):
-- a temporary relation named tashkent_writeset (created, or renamed so)
-- that tashkent_capture does not own is refused, and so is a cast whose
-- function a non-superuser owns (refuse_unsafe_casts).
CREATE OR REPLACE FUNCTION tashkent.on_ddl() RETURNS event_trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_rel oid;
	v_temp_child text;
	v_changed boolean := false;
BEGIN
	-- A temporary table that inherits from a replicated one: a statement
	-- on the parent (UPDATE, DELETE without ONLY) reaches the child's rows,
	-- and the parent's capture triggers record them, as rows of the parent,
	-- for the other replicas, which then hold rows that exist nowhere on
	-- this one (a role that owns a table made rows of its temporary table
	-- permanent rows there). Refused.
	SELECT format('%s inherits from %s', i.inhrelid::regclass, i.inhparent::regclass) INTO v_temp_child
	FROM pg_event_trigger_ddl_commands() AS d
	JOIN pg_inherits i ON i.inhrelid = d.objid
	JOIN pg_class c ON c.oid = i.inhrelid
	JOIN pg_class p ON p.oid = i.inhparent
	WHERE d.classid = 'pg_class'::regclass AND c.relpersistence = 't' AND p.relpersistence <> 't'
	LIMIT 1;
	IF v_temp_child IS NOT NULL THEN
		RAISE EXCEPTION USING ERRCODE = '0A000',
			MESSAGE = format('tashkent does not support a temporary table that inherits from a permanent one (%s)', v_temp_child),
			DETAIL = 'Writes to the parent that reach the temporary table''s rows would be replicated as rows of the parent.',
			HINT = 'Create the temporary table with LIKE instead of INHERITS.';
	END IF;
	IF EXISTS (SELECT FROM pg_event_trigger_ddl_commands() AS d JOIN pg_class AS c ON c.oid = d.objid
			WHERE d.classid = 'pg_class'::regclass AND c.relname = 'tashkent_writeset'
				AND c.relpersistence = 't' AND pg_get_userbyid(c.relowner) <> 'tashkent_capture') THEN
		RAISE EXCEPTION USING
			ERRCODE = '42501',
			MESSAGE = 'the name pg_temp.tashkent_writeset is reserved for tashkent''s writeset buffer',
			HINT = 'Choose another name for the temporary relation.';
	END IF;
	IF TG_TAG IN ('CREATE CAST', 'ALTER FUNCTION') THEN
		PERFORM tashkent.refuse_unsafe_casts();
	END IF;
	IF TG_TAG = 'ALTER TRIGGER' AND EXISTS (SELECT FROM pg_event_trigger_ddl_commands() AS d
			JOIN pg_trigger AS tg ON tg.oid = d.objid
			WHERE d.classid = 'pg_trigger'::regclass AND tg.tgname NOT LIKE 'tashkent\_%'
				AND tg.tgfoid IN ('tashkent.capture'::regproc, 'tashkent.capture_key'::regproc,
					'tashkent.capture_references'::regproc, 'tashkent.capture_reference_keys'::regproc,
					'tashkent.reject_nopk'::regproc)) THEN
		RAISE EXCEPTION USING
			ERRCODE = '42501',
			MESSAGE = 'cannot rename a tashkent_* trigger: tashkent captures the table''s writes with it',
			HINT = 'Triggers named tashkent_* are tashkent''s; leave them as they are.';
	END IF;
	FOR v_rel IN
		WITH cmd AS (
			SELECT CASE d.classid
				WHEN 'pg_class'::regclass THEN
					coalesce((SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = d.objid), d.objid)
				WHEN 'pg_constraint'::regclass THEN
					(SELECT nullif(c.conrelid, 0) FROM pg_constraint c WHERE c.oid = d.objid)
				END AS rel
			FROM pg_event_trigger_ddl_commands() AS d
		)
		SELECT cmd.rel FROM cmd WHERE cmd.rel IS NOT NULL
		UNION
		SELECT p.relid FROM cmd CROSS JOIN LATERAL pg_partition_tree(cmd.rel::regclass) AS p
		WHERE cmd.rel IS NOT NULL
	LOOP
		IF tashkent.ensure_triggers(v_rel) IS NOT NULL THEN
			v_changed := true;
		END IF;
		-- Tables whose foreign keys reference this one name it (and its
		-- unique indexes) in their reference triggers' arguments: a
		-- renamed parent table or index must reach them.
		IF tashkent.ensure_linked_triggers(v_rel, true) THEN
			v_changed := true;
		END IF;
		-- And the tables this one's foreign keys reference: whether a
		-- foreign key references a parent through other columns than its
		-- primary key decides the parent's capture_key op letter (see
		-- ensure_triggers). A dropped foreign key is gone from the catalog
		-- by now: its parent keeps the conservative 'U' until its next
		-- refresh.
		IF tashkent.ensure_linked_triggers(v_rel, false) THEN
			v_changed := true;
		END IF;
	END LOOP;
	-- Sequences created or restarted by the command (see sequences.go).
	FOR v_rel IN
		SELECT DISTINCT d.objid FROM pg_event_trigger_ddl_commands() AS d
		WHERE d.classid = 'pg_class'::regclass
	LOOP
		PERFORM tashkent.align_relation_sequences(v_rel);
	END LOOP;
	IF TG_TAG = 'DROP INDEX' THEN
		FOR v_rel IN
			SELECT t.tgrelid FROM pg_trigger t
			WHERE t.tgname = 'tashkent_capture_ins' AND position('\x0000'::bytea IN t.tgargs) > 0
		LOOP
			IF tashkent.ensure_triggers(v_rel) IS DISTINCT FROM 'unchanged' THEN
				v_changed := true;
			END IF;
		END LOOP;
	END IF;
	-- A parent lookup (an 'L' argument, see reference_arguments) names the
	-- parent, its key columns and types; DROP ... CASCADE and ALTER on the
	-- parent can drop or change them, and the children's foreign keys,
	-- without a command on the children (DROP reports no objects): every
	-- write to a child would then fail. Those few tables are refreshed. A
	-- renamed schema renames parents under every reference: all tables
	-- with reference triggers are.
	IF TG_TAG LIKE 'DROP %' OR TG_TAG LIKE 'ALTER %' THEN
		FOR v_rel IN
			SELECT t.tgrelid FROM pg_trigger t
			WHERE t.tgname = 'tashkent_capture_ref_ins'
				AND (TG_TAG = 'ALTER SCHEMA' OR position('\x004c00'::bytea IN t.tgargs) > 0)
		LOOP
			IF tashkent.ensure_triggers(v_rel) IS DISTINCT FROM 'unchanged' THEN
				v_changed := true;
			END IF;
		END LOOP;
	END IF;
	IF v_changed THEN
		INSERT INTO tashkent.ddl_log DEFAULT VALUES;
	END IF;
END
$fn$;

-- The event trigger fires in every session_replication_role ("ALWAYS"):
-- DDL applied from a remote writeset runs with the role set to replica and
-- its tables need their triggers here too, for this replica's own clients.
DROP EVENT TRIGGER IF EXISTS tashkent_ddl;
CREATE EVENT TRIGGER tashkent_ddl ON ddl_command_end
	WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE', 'CREATE SCHEMA',
		'CREATE INDEX', 'DROP INDEX', 'ALTER INDEX', 'CREATE SEQUENCE', 'ALTER SEQUENCE',
		-- for the parent lookups of foreign-key references (see on_ddl)
		'DROP TABLE', 'DROP SCHEMA', 'DROP TYPE', 'DROP DOMAIN', 'DROP EXTENSION', 'DROP OWNED',
		'ALTER TYPE', 'ALTER DOMAIN', 'ALTER SCHEMA',
		-- for the sealed writeset buffer (see on_ddl)
		'CREATE VIEW', 'ALTER VIEW', 'CREATE CAST', 'ALTER FUNCTION',
		-- a table owner renaming the capture triggers of its table
		'ALTER TRIGGER')
	EXECUTE FUNCTION tashkent.on_ddl();
ALTER EVENT TRIGGER tashkent_ddl ENABLE ALWAYS;

-- on_drop_trigger refuses to let a role other than a superuser drop a
-- capture trigger (a tashkent_* trigger named in the command): a table's
-- owner may drop its table's triggers, and its writes would then no longer
-- be captured, never replicated, with no error. (DROP TABLE drops them
-- with the table: not the command's own object, allowed.) ensure_triggers
-- drops them as the installer. A renamed capture trigger would escape the
-- name test: on_ddl refuses the rename.
CREATE OR REPLACE FUNCTION tashkent.on_drop_trigger() RETURNS event_trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_trg text;
BEGIN
	SELECT o.object_identity INTO v_trg FROM pg_event_trigger_dropped_objects() AS o
	WHERE o.object_type = 'trigger' AND o.original AND o.address_names[cardinality(o.address_names)] LIKE 'tashkent\_%'
	LIMIT 1;
	IF v_trg IS NOT NULL AND NOT coalesce((SELECT r.rolsuper FROM pg_roles AS r WHERE r.rolname = current_user), false) THEN
		RAISE EXCEPTION USING
			ERRCODE = '42501',
			MESSAGE = format('cannot drop trigger %s: tashkent captures the table''s writes with it', v_trg),
			HINT = 'Triggers named tashkent_* are tashkent''s; without them the table''s writes would not reach the other replicas.';
	END IF;
END
$fn$;
DROP EVENT TRIGGER IF EXISTS tashkent_drop_trigger;
CREATE EVENT TRIGGER tashkent_drop_trigger ON sql_drop
	WHEN TAG IN ('DROP TRIGGER')
	EXECUTE FUNCTION tashkent.on_drop_trigger();
ALTER EVENT TRIGGER tashkent_drop_trigger ENABLE ALWAYS;

-- The writeset buffer is sealed (see "Trust model" in doc.go): the
-- temporary table pg_temp.tashkent_writeset is created by
-- create_writeset_buffer, which runs with the rights of its owner,
-- tashkent_capture, so the table is tashkent_capture's, with no grants:
-- a client role can neither read it (it holds the whole new rows of what
-- the session wrote, columns and rows it may not SELECT included) nor
-- write it (a forged row would be applied on every other replica as
-- superuser; a deleted one would never be replicated). Only the capture
-- triggers write it and only the proxy's collect reads it, both with
-- tashkent_capture's rights.
--
-- The buffer is a plain temporary table, emptied by the collect's DELETE.
-- Not ON COMMIT DELETE ROWS: truncating the table (and its TOAST table)
-- at every commit cost about 0.5 ms per write transaction here. Each row
-- carries the transaction that wrote it, so that rows a transaction left
-- behind (it committed without collecting: a bug in the caller) are never
-- mistaken for the next transaction's.
--
-- A client can drop the buffer (DISCARD TEMP drops every temporary table
-- of the session, with no privilege check) and, until the proxy prepares
-- the session again, capture then fails (no buffer: the write is refused),
-- and so does the collect. A new buffer is not created in a transaction
-- that has written (its earlier rows went with the old one).
-- A table of its own under that name would receive capture's rows (if it
-- granted tashkent_capture the rights) and feed the collect: so on_ddl
-- refuses any temporary relation named tashkent_writeset that
-- tashkent_capture does not own, this function refuses to use one, and
-- the collect checks the owner too.
--
-- No SET clause: it qualifies every name instead (it runs under the
-- session's search_path, and the buffer's DEFAULT binds the function it
-- names when the table is created: a look-alike pg_current_xact_id would
-- tag every row with the wrong transaction, and collect would drop them
-- all).
CREATE OR REPLACE FUNCTION tashkent.create_writeset_buffer() RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
DECLARE
	v_owner pg_catalog.name := (SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class AS c
		WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('pg_temp.tashkent_writeset'));
BEGIN
	IF v_owner IS NULL AND pg_catalog.pg_current_xact_id_if_assigned() IS NOT NULL THEN
		-- The buffer was dropped (DISCARD TEMP) in a transaction that has
		-- written: its rows went with it, and a new one would let the
		-- transaction commit without them, never replicated. The proxy
		-- prepares a session when it is idle.
		RAISE EXCEPTION USING
			ERRCODE = '25001',
			MESSAGE = 'cannot set up writeset capture in a transaction that has written',
			DETAIL = 'The session''s writeset buffer is gone (DISCARD TEMP): the changes this transaction made before would not reach the other replicas.',
			HINT = 'Roll the transaction back; the tashkent proxy sets capture up again when the session is idle.';
	ELSIF v_owner IS NULL THEN
		CREATE TEMPORARY TABLE tashkent_writeset (
			seq bigserial,
			xid pg_catalog.xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
			tbl pg_catalog.text NOT NULL,
			op  pg_catalog.text NOT NULL,
			key pg_catalog.text,
			row pg_catalog.text
		) USING heap;
		-- Default privileges a superuser gave for tashkent_capture's
		-- tables would unseal it.
		IF (SELECT c.relacl FROM pg_catalog.pg_class AS c
				WHERE c.oid OPERATOR(pg_catalog.=) 'pg_temp.tashkent_writeset'::pg_catalog.regclass) IS NOT NULL THEN
			RAISE EXCEPTION USING
				ERRCODE = '42501',
				MESSAGE = 'tashkent''s writeset buffer would be granted to other roles (default privileges of role tashkent_capture)',
				HINT = 'ALTER DEFAULT PRIVILEGES FOR ROLE tashkent_capture REVOKE ... the grants on tables and sequences.';
		END IF;
	ELSIF v_owner OPERATOR(pg_catalog.<>) CURRENT_USER THEN
		PERFORM tashkent.refuse_foreign_buffer(v_owner);
	END IF;
END
$fn$;

-- refuse_foreign_buffer raises the error for a pg_temp.tashkent_writeset
-- that tashkent_capture does not own (see create_writeset_buffer).
CREATE OR REPLACE FUNCTION tashkent.refuse_foreign_buffer(p_owner pg_catalog.name) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	RAISE EXCEPTION USING
		ERRCODE = '42501',
		MESSAGE = format('pg_temp.tashkent_writeset belongs to role %s, not to tashkent: writeset capture cannot use it', p_owner),
		DETAIL = 'tashkent keeps the session''s writeset in a temporary table that only its own role, tashkent_capture, may read or write.',
		HINT = 'Do not create relations named tashkent_writeset; DROP TABLE pg_temp.tashkent_writeset or reconnect.';
END
$fn$;

-- prepare_session sets up writeset capture for the calling session: the
-- sealed buffer (create_writeset_buffer, which refuses a table of that
-- name that is not tashkent_capture's, such as one an older tashkent
-- created with the session's role: DROP it or reconnect) and the
-- tashkent.capture setting. No SET clause (its set_config must outlive
-- the call); every name qualified.
CREATE OR REPLACE FUNCTION tashkent.prepare_session() RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
	PERFORM tashkent.create_writeset_buffer();
	PERFORM pg_catalog.set_config('tashkent.capture', 'on', false);
END
$fn$;

-- check_collector lets the collect and the trim run for the proxy (which
-- binds the database's record token, see record_version) and for a
-- superuser's session: a client that could call them could read its
-- buffer (the rows it may not SELECT) or empty it before the commit's
-- collect (its writes would never be replicated). It also checks that the
-- buffer is tashkent_capture's (see create_writeset_buffer). Runs in
-- take_writeset and trim_writeset_buffer, as tashkent_capture; no SET
-- clause, every name qualified.
CREATE OR REPLACE FUNCTION tashkent.check_collector(p_token pg_catalog.text) RETURNS pg_catalog.bool
LANGUAGE plpgsql
AS $fn$
DECLARE
	v_owner pg_catalog.name;
BEGIN
	IF NOT (EXISTS (SELECT FROM tashkent.record_token AS t WHERE t.token OPERATOR(pg_catalog.=) p_token)
			OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r
				WHERE r.rolname OPERATOR(pg_catalog.=) SESSION_USER AND r.rolsuper)) THEN
		RAISE EXCEPTION USING
			ERRCODE = '42501',
			MESSAGE = 'only the tashkent proxy collects writesets',
			HINT = 'The writeset buffer belongs to tashkent; the proxy collects it at COMMIT.';
	END IF;
	v_owner := (SELECT pg_catalog.pg_get_userbyid(c.relowner) FROM pg_catalog.pg_class AS c
		WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('pg_temp.tashkent_writeset'));
	IF v_owner OPERATOR(pg_catalog.<>) 'tashkent_capture' THEN
		PERFORM tashkent.refuse_foreign_buffer(v_owner);
	END IF;
	RETURN true;
END
$fn$;

-- warn_stale_writeset reports rows an earlier transaction left in the
-- buffer (see CollectQuery).
CREATE OR REPLACE FUNCTION tashkent.warn_stale_writeset(p_rows bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
	RAISE WARNING 'tashkent: discarded % writeset rows of an earlier transaction that committed without collecting them', p_rows;
	RETURN p_rows;
END
$fn$;

-- take_writeset returns the current transaction's buffered row events in
-- order and empties the buffer, for the proxy, which binds the record
-- token (check_collector), or a superuser's session. It returns them as
-- four arrays (one row), which replica.CollectQuery unnests in order: a
-- set-returning plpgsql function fills a tuplestore, and returning the
-- rows so cost about 15 µs more per commit. Its query is
-- bufferCollectQuery's, aggregated (it also drops rows an earlier
-- transaction left behind, with a warning). Autovacuum does not visit
-- temporary tables and the space of deleted rows is not reused without a
-- VACUUM (which cannot run inside a transaction), so once the table has
-- grown past 256 kB it is truncated (trim_writeset_buffer; a new, empty
-- file, rolled back with the transaction like the DELETE). Every collect
-- scans the whole table, dead rows included, and a truncation costs about
-- 1 ms: 256 kB, a few hundred typical transactions, keeps both small
-- (measured, see doc.go). Like capture_key it has no SET clause and
-- qualifies every name. With the C capture, InstallCapture replaces it by
-- its C twin (tashkent_take_writeset in csrc/tashkent_capture.c), of the
-- same checks and result: this body is the fallback and the reference.
--
-- The checks (the common case in one expression whose constants are
-- folded when it is planned, the buffer's OID and tashkent_capture's;
-- check_collector says what is wrong otherwise, or lets a superuser's
-- session through) are the HAVING clause of the one statement: a second
-- statement in the function cost about 50 µs per commit. An aggregate
-- without GROUP BY always has its one group, so the clause is evaluated
-- even when the buffer is empty; when it raises, the statement's DELETE
-- is undone with it.
CREATE OR REPLACE FUNCTION tashkent.take_writeset(p_token pg_catalog.text,
	OUT tbl pg_catalog.text[], OUT op pg_catalog.text[], OUT key pg_catalog.text[], OUT "row" pg_catalog.text[])
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
#variable_conflict use_column
BEGIN
	WITH d AS (DELETE FROM pg_temp.tashkent_writeset RETURNING *),
		stale AS (
			SELECT tashkent.warn_stale_writeset(pg_catalog.count(*)) FROM d
			WHERE NOT coalesce(d.xid OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned(), false)
			HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0
		)
	SELECT pg_catalog.array_agg(d.tbl ORDER BY d.seq), pg_catalog.array_agg(d.op ORDER BY d.seq),
		pg_catalog.array_agg(d.key ORDER BY d.seq), pg_catalog.array_agg(d.row ORDER BY d.seq)
	INTO tbl, op, key, "row"
	FROM d
	WHERE d.xid OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned()
		AND (SELECT pg_catalog.count(*) FROM stale) OPERATOR(pg_catalog.>=) 0
	HAVING (EXISTS (SELECT FROM tashkent.record_token AS t WHERE t.token OPERATOR(pg_catalog.=) p_token)
			AND EXISTS (SELECT FROM pg_catalog.pg_class AS c
				WHERE c.oid OPERATOR(pg_catalog.=) 'pg_temp.tashkent_writeset'::pg_catalog.regclass
					AND c.relowner OPERATOR(pg_catalog.=) 'tashkent_capture'::pg_catalog.regrole))
		OR tashkent.check_collector(p_token);
END
$fn$;

-- assert_nothing_to_replicate is the check before the proxy's COMMIT of a
-- transaction in which it saw only reads (proxy/readonly.go): it raises
-- TK001 (replica.CodeSomethingToReplicate) if the transaction buffered
-- writes or DDL notes after all (a writing function that a view calls),
-- so that the COMMIT pipelined after it does not run and the proxy rolls
-- the transaction back. A transaction without an xid wrote nothing: it
-- returns at once. It reads the sealed buffer (hence tashkent_capture's
-- rights; every name qualified, no SET clause, as take_writeset) and
-- tells the caller only whether its own transaction has rows there.
CREATE OR REPLACE FUNCTION tashkent.assert_nothing_to_replicate() RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
BEGIN
	IF pg_catalog.pg_current_xact_id_if_assigned() IS NULL THEN
		RETURN;
	END IF;
	IF EXISTS (SELECT FROM pg_temp.tashkent_writeset AS w
			WHERE w.xid OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned())
		OR coalesce(pg_catalog.current_setting('$CLIENT_DDL_SETTING', true), '') OPERATOR(pg_catalog.<>) '' THEN
		RAISE EXCEPTION USING ERRCODE = 'TK001',
			MESSAGE = 'tashkent: the transaction has writes to replicate';
	END IF;
END
$fn$;

-- collect_writeset is take_writeset's query for a superuser's session
-- (replica.CollectSQL): no one else may execute it (see the REVOKE
-- below), so it checks no token, only the buffer's owner. The proxy
-- prepares take_writeset's query instead (replica.CollectQuery). Both are
-- followed by the trim, in a statement of its own (TrimSQL): truncating
-- the buffer here, after RETURN QUERY, emptied its TOAST table under rows
-- not yet read (a row stored out of line in the buffer, then "missing
-- chunk number 0 for toast value ..." once the buffer had passed 256 kB;
-- TestCCaptureOfRowsLargerThanWorkMem).
CREATE OR REPLACE FUNCTION tashkent.collect_writeset()
RETURNS TABLE (tbl pg_catalog.text, op pg_catalog.text, key pg_catalog.text, "row" pg_catalog.text)
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
#variable_conflict use_column
BEGIN
	IF NOT EXISTS (SELECT FROM pg_catalog.pg_class AS c
			WHERE c.oid OPERATOR(pg_catalog.=) 'pg_temp.tashkent_writeset'::pg_catalog.regclass
				AND c.relowner OPERATOR(pg_catalog.=) 'tashkent_capture'::pg_catalog.regrole) THEN
		PERFORM tashkent.check_collector(NULL);
	END IF;
	RETURN QUERY
		$COLLECT_QUERY;
END
$fn$;

-- trim_writeset_buffer truncates the writeset buffer once it has grown past
-- 256 kB (see take_writeset), for the proxy (the record token) or a
-- superuser's session: truncating it before the collect would lose the
-- transaction's rows. The proxy runs it through a prepared statement that
-- calls it only then (replica.TrimSQL), after its collect.
DROP FUNCTION IF EXISTS tashkent.trim_writeset_buffer();
CREATE OR REPLACE FUNCTION tashkent.trim_writeset_buffer(p_token pg_catalog.text) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
AS $fn$
BEGIN
	PERFORM tashkent.check_collector(p_token);
	IF pg_catalog.pg_relation_size('pg_temp.tashkent_writeset') OPERATOR(pg_catalog.>) 262144 THEN
		TRUNCATE pg_temp.tashkent_writeset;
		RETURN true;
	END IF;
	RETURN false;
END
$fn$;

-- refuse_unsafe_casts raises an error if a cast runs a function that a
-- role other than a superuser owns. Capture runs as tashkent_capture and
-- converts values: to_json of a row calls the cast to json of any column
-- type that is not built in (an enum of the user's with CREATE CAST (mood
-- AS json) WITH FUNCTION ...), a row's ::text the cast from its row type
-- to text if there is one, a parent lookup the cast of the referencing
-- column to the foreign key operator's type. Such a function, if a client
-- role could write it, would run with tashkent_capture's rights and could
-- forge writeset rows. on_ddl calls it after CREATE CAST and ALTER
-- FUNCTION (a function given to another owner), Install at every run.
CREATE OR REPLACE FUNCTION tashkent.refuse_unsafe_casts() RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
	v_cast text;
	v_fn text;
	v_owner name;
BEGIN
	SELECT format('%s AS %s', format_type(c.castsource, NULL), format_type(c.casttarget, NULL)),
		f.oid::regprocedure::text, pg_get_userbyid(f.proowner)
	INTO v_cast, v_fn, v_owner
	FROM pg_cast AS c JOIN pg_proc AS f ON f.oid = c.castfunc
	WHERE c.castmethod = 'f'
		AND NOT coalesce((SELECT r.rolsuper FROM pg_roles AS r WHERE r.oid = f.proowner), false)
	ORDER BY c.oid LIMIT 1;
	IF v_cast IS NOT NULL THEN
		RAISE EXCEPTION USING
			ERRCODE = '0A000',
			MESSAGE = format('tashkent does not support the cast (%s): its function %s belongs to role %s, not to a superuser', v_cast, v_fn, v_owner),
			DETAIL = 'tashkent''s capture functions convert values with casts (to json, a row to text) and run with the rights of role tashkent_capture; a cast function that a non-superuser can change would run with those rights.',
			HINT = format('DROP CAST (%s), or have a superuser own the function (ALTER FUNCTION %s OWNER TO a superuser).', v_cast, v_fn);
	END IF;
END
$fn$;

-- The capture and collect functions belong to tashkent_capture, whose
-- rights they run with (SECURITY DEFINER; see "Trust model" in doc.go).
-- CREATE OR REPLACE keeps an existing function's owner and OID (triggers
-- keep working); these statements make an older install's functions its.
-- The trigger functions are not for calling: no one else may execute
-- them (a trigger fires without that right, but CREATE TRIGGER needs it,
-- so no client can attach them with arguments of its own, such as
-- capture_references' SQL fragments). take_writeset and
-- trim_writeset_buffer check the record token; collect_writeset is for
-- superusers.
ALTER FUNCTION tashkent.capture() OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.capture_key() OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.capture_key_plpgsql() OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.capture_references() OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.capture_reference_keys() OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.create_writeset_buffer() OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.take_writeset(pg_catalog.text) OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.collect_writeset() OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.trim_writeset_buffer(pg_catalog.text) OWNER TO tashkent_capture;
ALTER FUNCTION tashkent.assert_nothing_to_replicate() OWNER TO tashkent_capture;
REVOKE ALL ON FUNCTION tashkent.capture(), tashkent.capture_key(), tashkent.capture_key_plpgsql(), tashkent.capture_references(),
	tashkent.capture_reference_keys(), tashkent.collect_writeset() FROM PUBLIC;
SELECT tashkent.refuse_unsafe_casts();

SELECT tashkent.ensure_all_triggers();
`

// PrepareSessionSQL sets up writeset capture in the session that runs it
// (see PrepareSession), for callers that speak the wire protocol
// themselves. Run it outside a transaction.
const PrepareSessionSQL = `SELECT tashkent.prepare_session()`

// CollectSQL returns the current transaction's buffered row events in
// order and empties the buffer, in one statement, in a superuser's session
// (CollectWriteset sends it, then TrimSQL). A client's session of any role runs
// CollectQuery and TrimSQL with the record token instead.
const CollectSQL = `SELECT tbl, op, key, "row" FROM tashkent.collect_writeset()`

// CollectQuery returns the current transaction's buffered row events in
// order and empties the buffer, for a caller that prepares it once per
// session and runs it at every commit, followed by TrimSQL: $1 is the
// database's record token (ReadRecordToken), without which only a
// superuser's session may collect (the buffer is sealed: see "Trust
// model" in doc.go). The proxy sends it in the client's session, under
// the client's role. It runs bufferCollectQuery's query in
// tashkent.take_writeset, with tashkent_capture's rights, which returns
// the rows as four arrays (see there).
const CollectQuery = `SELECT u.tbl, u.op, u.key, u."row" FROM tashkent.take_writeset($1) AS w,
	ROWS FROM (pg_catalog.unnest(w.tbl), pg_catalog.unnest(w.op), pg_catalog.unnest(w.key), pg_catalog.unnest(w."row"))
		WITH ORDINALITY AS u(tbl, op, key, "row", n)
	ORDER BY u.n`

// bufferCollectQuery is take_writeset's query. Prepared on its own (the
// proxy ran it so before the buffer was sealed), it took 116-138 µs less
// than CollectSQL (its plpgsql call fills a tuplestore, and a simple query
// is planned every time) in five of six interleaved runs, 316 µs less in
// the sixth (one client over pgx, 3-row writesets, medians of 3,000
// commits each; the deferred-constraint check was left out of both, see
// doc.go).
//
// One statement deletes every row and returns the transaction's own: rows
// a transaction left behind (it committed without collecting: a bug in the
// caller) are dropped, never mistaken for this one's, and reported in a
// warning by tashkent.warn_stale_writeset, evaluated once (an InitPlan) and
// called only when there are any.
const bufferCollectQuery = `WITH d AS (DELETE FROM pg_temp.tashkent_writeset RETURNING *),
		stale AS (
			SELECT tashkent.warn_stale_writeset(pg_catalog.count(*)) FROM d
			WHERE NOT coalesce(d.xid OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned(), false)
			HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0
		)
		SELECT d.tbl, d.op, d.key, d.row FROM d
		WHERE d.xid OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned()
			AND (SELECT pg_catalog.count(*) FROM stale) OPERATOR(pg_catalog.>=) 0
		ORDER BY d.seq`

// TrimSQL truncates the writeset buffer if it has grown past 256 kB, as
// collect_writeset does after its query; run it after CollectQuery, in the
// same transaction, with the same $1. The size test is a file-size lookup;
// the truncation, about 1 ms, comes every few hundred typical transactions
// (doc.go).
const TrimSQL = `SELECT ` + trimExpr

const trimExpr = `CASE WHEN pg_catalog.pg_relation_size('pg_temp.tashkent_writeset') OPERATOR(pg_catalog.>) 262144
	THEN tashkent.trim_writeset_buffer($1) ELSE false END`

// CollectEndSQL is TrimSQL, for the proxy's collect, with a second column:
// the notes of the DDL guard (ClientDDLSetting; NULL or empty when no DDL
// on a persistent object ran), which the proxy checks against the DDL it
// replicates. One statement, so that the check costs no extra statement
// per commit.
const CollectEndSQL = `SELECT ` + trimExpr + `, pg_catalog.current_setting('` + ClientDDLSetting + `', true)`

// AssertNothingToReplicateSQL raises CodeSomethingToReplicate if the
// current transaction has writes or DDL to replicate, and does nothing in
// one that has not (nothing at all without an xid). The proxy sends it
// before the COMMIT of a transaction in which it saw only reads.
const AssertNothingToReplicateSQL = `SELECT tashkent.assert_nothing_to_replicate()`

// CodeSomethingToReplicate is the SQLSTATE of AssertNothingToReplicateSQL's
// error.
const CodeSomethingToReplicate = "TK001"

// RecordVersionSQL records a committed version from a client's session,
// whatever its role: $1 is the version, $2 the database's record token
// (ReadRecordToken). Send it in the transaction that commits the version.
//
// Deprecated: the proxy's; the extension records versions itself.
const RecordVersionSQL = `SELECT tashkent.record_version($1, $2)`

// readRecordTokenSQL reads the secret that record_version checks; only a
// superuser may.
const readRecordTokenSQL = `SELECT t.token FROM tashkent.record_token AS t`

// The statements of ReadVersion and PruneApplied name every function,
// operator and catalog table with its schema: they run under the
// search_path the database and role give the session, which may find a
// schema's max(bigint) or bigint = before pg_catalog's (see
// setApplySettings in apply.go).
const readVersionSQL = `SELECT tashkent.committed_version()`

const pruneAppliedSQL = `DELETE FROM tashkent.applied WHERE version OPERATOR(pg_catalog.<=) ` +
	`((SELECT pg_catalog.max(version) FROM tashkent.applied) OPERATOR(pg_catalog.-) $1)`

// tableMetaSQL loads, for each schema-qualified table name in $1, whether
// it exists, its canonical quoted name, whether its primary key is
// deferrable (ON CONFLICT cannot use it), the DDL generation, its primary key columns and their types (in key order), and
// its columns that can be inserted into (not generated), in order.
// format_type names a type as the session's search_path finds it (bare
// where that finds it, schema-qualified where not), so the names it gives
// mean the same types in the apply statements, which run under the same
// search_path.
const tableMetaSQL = `
SELECT t.name, c.oid IS NOT NULL, CASE WHEN c.oid IS NULL THEN '' ELSE pg_catalog.format('%I.%I', n.nspname, c.relname) END,
	coalesce((SELECT NOT i.indimmediate FROM pg_catalog.pg_index i
		WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary), false),
	(SELECT coalesce(pg_catalog.max(gen), 0) FROM tashkent.ddl_log),
	ARRAY(SELECT a.attname::pg_catalog.text
		FROM pg_catalog.pg_index i
		CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
		WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary AND k.ord OPERATOR(pg_catalog.<=) i.indnkeyatts ORDER BY k.ord),
	ARRAY(SELECT pg_catalog.format_type(a.atttypid, a.atttypmod)
		FROM pg_catalog.pg_index i
		CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) i.indrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
		WHERE i.indrelid OPERATOR(pg_catalog.=) c.oid AND i.indisprimary AND k.ord OPERATOR(pg_catalog.<=) i.indnkeyatts ORDER BY k.ord),
	ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
		WHERE a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
			AND a.attgenerated OPERATOR(pg_catalog.=) ''
		ORDER BY a.attnum)
FROM pg_catalog.unnest($1::pg_catalog.text[]) AS t(name)
LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(t.name)
LEFT JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace`

// userTablesSQL lists the tables Checksum covers, every name qualified
// (see Checksum). NOT IN and NOT LIKE are written as the operators they
// stand for, so that pg_catalog's are the ones used.
const userTablesSQL = `
SELECT pg_catalog.format('%I.%I', n.nspname, c.relname)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE c.relkind OPERATOR(pg_catalog.=) 'r' AND c.relpersistence OPERATOR(pg_catalog.<>) 't'
	AND n.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema,tashkent,pg_toast}'::pg_catalog.name[])
	AND n.nspname OPERATOR(pg_catalog.!~~) 'pg\_temp\_%' AND n.nspname OPERATOR(pg_catalog.!~~) 'pg\_toast\_temp\_%'
ORDER BY 1`
