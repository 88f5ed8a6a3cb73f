"""Compatibility suite for psycopg 3 (libpq underneath). See compat_common.py
for the environment it reads and the lines it prints."""

import datetime
import decimal
import random
import sys
import threading
import time

import psycopg
from psycopg import errors, sql

from compat_common import (Env, Fail, check, check_eq, poll, run_sync, same_on_both)


def connect(env, port=None, **kw):
    kw.setdefault("autocommit", True)
    return psycopg.connect(host=env.host, port=port or env.port, user=env.user,
                           password=env.password or None, dbname=env.database,
                           connect_timeout=10, **kw)


def ident(name):
    return sql.Identifier(name)


def expect_sqlstate(want, fn):
    try:
        fn()
    except psycopg.Error as e:
        check_eq(e.sqlstate, want, "SQLSTATE of %s" % type(e).__name__)
        return e
    raise Fail("no error, want SQLSTATE %s" % want)


def check_replicated(env, conn, t):
    """The table reads the same through the second port (another replica
    when run on the cluster)."""
    q = sql.SQL("SELECT count(*), coalesce(sum(hashtext(x::text)), 0) FROM {} x").format(ident(t))
    with connect(env, port=env.port2) as c2:
        same_on_both(env, lambda: conn.execute(q).fetchone(), lambda: c2.execute(q).fetchone(), "table " + t)


def s_connect(env):
    with connect(env) as conn:
        row = conn.execute("SELECT current_user, current_database(), current_setting('server_version_num')::int").fetchone()
        check_eq(row[0], env.user, "current_user")
        check_eq(row[1], env.database, "current_database()")
        check(150000 <= row[2] < 160000, "server_version_num %d is not 15.x" % row[2])
        check(conn.info.server_version >= 150000, "ParameterStatus server_version %r" % conn.info.server_version)
        check(conn.info.backend_pid > 0, "no backend pid (BackendKeyData)")
    if env.password:
        try:
            psycopg.connect(host=env.host, port=env.port, user=env.user, password=env.password + "-wrong",
                            dbname=env.database, connect_timeout=10).close()
        except psycopg.OperationalError as e:
            check("password authentication failed" in str(e), "wrong password gave %r" % str(e))
        else:
            raise Fail("a wrong password was accepted")


def s_simple_query(env):
    t = env.table("simple")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, name text)").format(ident(t)))
            # No parameters: psycopg sends a simple Query, so several statements are allowed.
            cur = conn.execute(sql.SQL("INSERT INTO {t} VALUES (1, 'one'); INSERT INTO {t} VALUES (2, 'two')").format(t=ident(t)))
            check_eq(cur.rowcount, 1, "rowcount of the last INSERT")
            cur = conn.execute("SELECT 1 AS a; SELECT 2 AS b, 3 AS c")
            results = [cur.fetchall()]
            while cur.nextset():
                results.append(cur.fetchall())
            check_eq(results, [[(1,)], [(2, 3)]], "results of a two-statement query")
            # Client-side binding: still the simple protocol.
            ccur = psycopg.ClientCursor(conn)
            ccur.execute(sql.SQL("SELECT name FROM {} WHERE id = %s").format(ident(t)), (2,))
            check_eq(ccur.fetchall(), [("two",)], "client-side bound SELECT")
            ccur.execute(sql.SQL("UPDATE {} SET name = %s WHERE id = %s").format(ident(t)), ("deux", 2))
            check_eq(ccur.rowcount, 1, "rowcount of UPDATE")
            rows = conn.execute(sql.SQL("SELECT id, name FROM {} ORDER BY id").format(ident(t))).fetchall()
            check_eq(rows, [(1, "one"), (2, "deux")], "table contents")
            check_replicated(env, conn, t)
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


TYPED_ROW = (
    7, "naïve ☃ text", decimal.Decimal("12345.6789"), True,
    datetime.datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=datetime.timezone.utc),
    b"\x00\x01\xfe\xff", None, 2.5, datetime.date(2000, 1, 1),
)


def s_extended_query(env):
    t = env.table("extended")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL(
                "CREATE TABLE {} (id int PRIMARY KEY, t text, n numeric, b bool, ts timestamptz, "
                "by bytea, nul text, f float8, d date)").format(ident(t)))
            ins = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)").format(ident(t))
            conn.execute(ins, TYPED_ROW)  # parameters: Parse/Bind/Execute (unnamed statement)
            for binary in (False, True):
                cur = conn.cursor(binary=binary)
                cur.execute(sql.SQL("SELECT * FROM {} WHERE id = %s AND t = %s").format(ident(t)), (7, TYPED_ROW[1]))
                row = cur.fetchone()
                check_eq(row, TYPED_ROW, "row read back (binary=%s)" % binary)
            cur = conn.cursor()
            cur.executemany(ins, [(i,) + TYPED_ROW[1:] for i in range(100, 110)])
            n = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE id >= %s").format(ident(t)), (100,)).fetchone()[0]
            check_eq(n, 10, "rows inserted by executemany")
            cur = conn.execute(sql.SQL("UPDATE {} SET f = f + %s WHERE id >= %s").format(ident(t)), (1.0, 100))
            check_eq(cur.rowcount, 10, "rowcount of a parameterized UPDATE")
            check_replicated(env, conn, t)
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


def s_prepared(env):
    t = env.table("prepared")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident(t)))
            ins = sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident(t))
            sel = sql.SQL("SELECT v FROM {} WHERE id = %s").format(ident(t))
            for i in range(5):
                conn.execute(ins, (i, "v%d" % i), prepare=True)  # autocommit writes through a named statement
            with conn.transaction():
                for i in range(5, 10):
                    conn.execute(ins, (i, "v%d" % i), prepare=True)
            for i in range(10):
                check_eq(conn.execute(sel, (i,), prepare=True).fetchone(), ("v%d" % i,), "prepared SELECT %d" % i)
            stmts = conn.execute("SELECT name, statement FROM pg_prepared_statements WHERE NOT from_sql").fetchall()
            check(any(t in s for _, s in stmts) and len(stmts) >= 2,
                  "no protocol-level prepared statements on the server: %r" % stmts)
            n = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident(t))).fetchone()[0]
            check_eq(n, 10, "rows")
            # SQL-level PREPARE / EXECUTE too.
            conn.execute(sql.SQL("PREPARE compat_upd (int) AS UPDATE {} SET v = v || '!' WHERE id < $1").format(ident(t)))
            cur = conn.execute("EXECUTE compat_upd (3)")
            check_eq(cur.rowcount, 3, "EXECUTE rowcount")
            conn.execute("DEALLOCATE compat_upd")
            check_eq(conn.execute(sel, (0,), prepare=True).fetchone(), ("v0!",), "row after EXECUTE")
            check_replicated(env, conn, t)
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


def s_transactions(env):
    t = env.table("tx")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident(t)))
            ins = sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident(t))
            # Commit with a savepoint rolled back inside.
            with conn.transaction():
                conn.execute(ins, (1, "a"))
                try:
                    with conn.transaction():  # SAVEPOINT
                        conn.execute(ins, (2, "b"))
                        conn.execute(ins, (1, "dup"))
                except errors.UniqueViolation:
                    pass  # rolled back to the savepoint
                conn.execute(ins, (3, "c"))
            rows = conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(ident(t))).fetchall()
            check_eq(rows, [(1,), (3,)], "rows after COMMIT with ROLLBACK TO SAVEPOINT")
            # Explicit rollback.
            with conn.transaction() as tx:
                conn.execute(ins, (4, "d"))
                conn.execute(sql.SQL("DELETE FROM {} WHERE id = 1").format(ident(t)))
                raise psycopg.Rollback(tx)
            rows = conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(ident(t))).fetchall()
            check_eq(rows, [(1,), (3,)], "rows after ROLLBACK")
            # Plain SQL transaction control, RELEASE, and COMMIT of a failed block.
            conn.execute("BEGIN")
            conn.execute(ins, (5, "e"))
            conn.execute("SAVEPOINT s1")
            conn.execute(ins, (6, "f"))
            conn.execute("RELEASE SAVEPOINT s1")
            conn.execute("COMMIT")
            conn.execute("BEGIN")
            conn.execute(ins, (7, "g"))
            expect_sqlstate("22012", lambda: conn.execute("SELECT 1/0"))
            cur = conn.execute("COMMIT")
            check_eq(cur.statusmessage, "ROLLBACK", "COMMIT of a failed transaction answers")
            rows = conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(ident(t))).fetchall()
            check_eq(rows, [(1,), (3,), (5,), (6,)], "rows at the end")
            # Non-autocommit connection: the driver opens the transaction itself.
            with connect(env, autocommit=False) as c2:
                c2.execute(ins, (8, "h"))
                c2.commit()
                c2.execute(ins, (9, "i"))
                c2.rollback()
                check_eq(c2.execute(sql.SQL("SELECT count(*) FROM {} WHERE id >= 8").format(ident(t))).fetchone()[0], 1,
                         "rows 8 and 9 after commit and rollback")
                c2.rollback()
            check_replicated(env, conn, t)
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


def s_copy_in(env):
    t = env.table("copyin")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, name text, amount numeric)").format(ident(t)))
            cur = conn.cursor()
            with cur.copy(sql.SQL("COPY {} (id, name, amount) FROM STDIN").format(ident(t))) as copy:
                for i in range(1, 1001):
                    copy.write_row((i, "row %d\twith tab" % i, decimal.Decimal(i) / 4))
            check_eq(cur.rowcount, 1000, "COPY rowcount")
            with conn.transaction():
                with cur.copy(sql.SQL("COPY {} (id, name, amount) FROM STDIN (FORMAT BINARY)").format(ident(t))) as copy:
                    copy.set_types(["int4", "text", "numeric"])
                    for i in range(1001, 1501):
                        copy.write_row((i, "bin %d" % i, decimal.Decimal(i)))
                # A raw text block too.
                with cur.copy(sql.SQL("COPY {} FROM STDIN WITH (FORMAT csv)").format(ident(t))) as copy:
                    copy.write("2001,\"csv, quoted\",1.5\n2002,plain,2\n")
            row = conn.execute(sql.SQL("SELECT count(*), sum(id), sum(amount) FROM {}").format(ident(t))).fetchone()
            want_amount = sum(decimal.Decimal(i) / 4 for i in range(1, 1001)) + sum(range(1001, 1501)) + decimal.Decimal("3.5")
            check_eq(row, (1502, sum(range(1, 1501)) + 4003, want_amount), "count, sum(id), sum(amount)")
            check_eq(conn.execute(sql.SQL("SELECT name FROM {} WHERE id = 7").format(ident(t))).fetchone()[0],
                     "row 7\twith tab", "escaped text")
            # A COPY that fails (duplicate key) leaves the table unchanged.
            def dup():
                with cur.copy(sql.SQL("COPY {} (id, name) FROM STDIN").format(ident(t))) as copy:
                    copy.write_row((5000, "new"))
                    copy.write_row((1, "dup"))
            expect_sqlstate("23505", dup)
            check_eq(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(ident(t))).fetchone()[0], 1502,
                     "rows after a failed COPY")
            check_replicated(env, conn, t)
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


def s_copy_out(env):
    t = env.table("copyout")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, name text)").format(ident(t)))
            conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'n' || g FROM generate_series(1, 500) g").format(ident(t)))
            cur = conn.cursor()
            rows = []
            with cur.copy(sql.SQL("COPY {} TO STDOUT").format(ident(t))) as copy:
                copy.set_types(["int4", "text"])
                for row in copy.rows():
                    rows.append(row)
            check_eq(len(rows), 500, "rows copied out")
            check_eq(sorted(rows)[0], (1, "n1"), "first row")
            data = b""
            with cur.copy("COPY (SELECT g, g * 2 FROM generate_series(1, 3) g) TO STDOUT WITH (FORMAT csv, HEADER)") as copy:
                for block in copy:
                    data += bytes(block)
            check_eq(data.decode(), "g,?column?\n1,2\n2,4\n3,6\n", "CSV out")
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


def s_large_result(env):
    with connect(env) as conn:
        cur = conn.execute("SELECT g, md5(g::text) FROM generate_series(1, %s) g", (100000,))
        rows = cur.fetchall()
        check_eq(len(rows), 100000, "rows")
        check_eq(sum(r[0] for r in rows), 100000 * 100001 // 2, "sum")
        check_eq(conn.execute("SELECT md5('100000')").fetchone()[0], rows[-1][1], "md5 of the last row")


def s_cursor(env):
    with connect(env) as conn:
        # Server-side cursor (DECLARE / FETCH) in a transaction.
        n = 0
        total = 0
        with conn.transaction():
            with conn.cursor(name="compat_big") as scur:
                scur.itersize = 5000
                scur.execute("SELECT g FROM generate_series(1, 100000) g")
                for (g,) in scur:
                    n += 1
                    total += g
        check_eq((n, total), (100000, 100000 * 100001 // 2), "rows and sum through a server-side cursor")


def s_pipeline(env):
    # psycopg's pipeline mode (libpq pipeline mode): statements are sent without
    # waiting for their results; Sync at p.sync() and at the end of the block.
    t = env.table("pipeline")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v text)").format(ident(t)))
            ins = sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ident(t))
            sel = sql.SQL("SELECT v FROM {} WHERE id = %s").format(ident(t))
            with conn.pipeline() as p:
                conn.execute(ins, (1, "a"))
                cur = conn.execute(sel, (1,))
                p.sync()
                check_eq(cur.fetchone(), ("a",), "a row read in the pipeline")
                conn.execute(ins, (2, "b"))
                with conn.transaction():
                    conn.execute(ins, (3, "c"))
                    conn.execute(ins, (4, "d"))
            # After the pipeline: a plain (simple-protocol) query.
            rows = conn.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(ident(t))).fetchall()
            check_eq(rows, [(1,), (2,), (3,), (4,)], "rows written in the pipeline")
            check_replicated(env, conn, t)
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


def s_errors(env):
    t = env.table("errors")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY)").format(ident(t)))
            ins = sql.SQL("INSERT INTO {} VALUES (%s)").format(ident(t))
            conn.execute(ins, (1,))
            e = expect_sqlstate("23505", lambda: conn.execute(ins, (1,)))
            check(isinstance(e, errors.UniqueViolation), "23505 raised as %s" % type(e).__name__)
            check(e.diag.constraint_name == "%s_pkey" % t, "constraint name %r" % e.diag.constraint_name)
            expect_sqlstate("23505", lambda: conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(ident(t))))
            e = expect_sqlstate("22012", lambda: conn.execute("SELECT 1/0"))
            check(isinstance(e, errors.DivisionByZero), "22012 raised as %s" % type(e).__name__)
            expect_sqlstate("22012", lambda: conn.execute("SELECT %s::int / %s::int", (1, 0)))
            e = expect_sqlstate("42P01", lambda: conn.execute("SELECT * FROM compat_no_such_table"))
            check(isinstance(e, errors.UndefinedTable), "42P01 raised as %s" % type(e).__name__)
            expect_sqlstate("42601", lambda: conn.execute("SELEC 1"))
            # In a transaction block: the error fails the block, then 25P02.
            conn.execute("BEGIN")
            expect_sqlstate("23505", lambda: conn.execute(ins, (1,)))
            expect_sqlstate("25P02", lambda: conn.execute("SELECT 1"))
            conn.execute("ROLLBACK")
            check_eq(conn.execute("SELECT 42").fetchone()[0], 42, "the session works after errors")
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


def s_cancel(env):
    with connect(env) as conn:
        for method in ("cancel_safe", "cancel"):
            timer = threading.Timer(0.5, getattr(conn, method))
            start = time.monotonic()
            timer.start()
            try:
                e = expect_sqlstate("57014", lambda: conn.execute("SELECT pg_sleep(10)"))
            finally:
                timer.cancel()
            elapsed = time.monotonic() - start
            check(isinstance(e, errors.QueryCanceled), "57014 raised as %s" % type(e).__name__)
            check(elapsed < 5, "%s took %.1fs" % (method, elapsed))
            check_eq(conn.execute("SELECT 1").fetchone()[0], 1, "the session works after the cancel")


def s_statement_timeout(env):
    with connect(env) as conn:
        conn.execute("SET statement_timeout = 200")
        start = time.monotonic()
        e = expect_sqlstate("57014", lambda: conn.execute("SELECT pg_sleep(5)"))
        elapsed = time.monotonic() - start
        check(isinstance(e, errors.QueryCanceled), "57014 raised as %s" % type(e).__name__)
        check(elapsed < 3, "the timeout took %.1fs" % elapsed)
        conn.execute("RESET statement_timeout")
        check_eq(conn.execute("SHOW statement_timeout").fetchone()[0], "0", "statement_timeout after RESET")


def s_retry_40001(env):
    t = env.table("counter")
    per_worker = 3
    a = connect(env)
    b = connect(env, port=env.port2)
    try:
        a.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, n int NOT NULL)").format(ident(t)))
        a.execute(sql.SQL("INSERT INTO {} VALUES (1, 0)").format(ident(t)))
        sel = sql.SQL("SELECT n FROM {} WHERE id = 1").format(ident(t))
        upd = sql.SQL("UPDATE {} SET n = %s WHERE id = 1").format(ident(t))
        # Through the cluster, b's replica sees the row once it catches up.
        poll(lambda: b.execute(sel).fetchone() is not None, what="the counter row on the second connection")
        barrier = threading.Barrier(2, timeout=20)
        stats = {"ok": 0, "conflicts": 0}
        lock = threading.Lock()
        errs = []

        def worker(conn):
            try:
                first = True
                done = 0
                attempts = 0
                while done < per_worker:
                    attempts += 1
                    if attempts > 200:
                        raise Fail("no success after 200 attempts")
                    try:
                        with conn.transaction():
                            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                            n = conn.execute(sel).fetchone()[0]
                            if first:
                                first = False
                                barrier.wait()  # both have read the same value
                            else:
                                time.sleep(random.uniform(0, 0.03))
                            conn.execute(upd, (n + 1,))
                        done += 1
                        with lock:
                            stats["ok"] += 1
                    except errors.SerializationFailure:
                        with lock:
                            stats["conflicts"] += 1
                        time.sleep(random.uniform(0.01, 0.05))
            except Exception as e:  # noqa: BLE001
                errs.append(e)
                barrier.abort()

        threads = [threading.Thread(target=worker, args=(c,)) for c in (a, b)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        if errs:
            raise Fail("worker failed: %r" % errs[0])
        check_eq(stats["ok"], 2 * per_worker, "successful increments")
        check(stats["conflicts"] >= 1, "no 40001: the concurrent updates did not conflict")
        # Both connections must end up reading the final value.
        for conn in (a, b):
            poll(lambda: conn.execute(sel).fetchone()[0] == stats["ok"], timeout=10,
                 what="counter == %d (successful increments)" % stats["ok"])
        print("retry_40001: %d increments, %d serialization failures retried" % (stats["ok"], stats["conflicts"]),
              file=sys.stderr)
    finally:
        try:
            drop_retrying(a, t)
        finally:
            a.close()
            b.close()


def drop_retrying(conn, t):
    """DROP TABLE, retried on 40001 as a client would: right after writes on
    the other replica, the DDL's snapshot may be labelled before this replica
    counted the last of them applied (Tashkent §6.2, conservative versions)."""
    for attempt in range(1, 6):
        try:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))
            return
        except errors.SerializationFailure:
            if attempt == 5:
                raise
            time.sleep(0.05)


def s_no_pk_write(env):
    # A table without a primary key takes inserts (equal rows too), updates
    # and deletes, on the cluster as on PostgreSQL.
    t = env.table("nopk")
    with connect(env) as conn:
        try:
            conn.execute(sql.SQL("CREATE TABLE {} (a int, b text)").format(ident(t)))
            conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'x'), (%s, 'x')").format(ident(t)), (1, 1))
            conn.execute(sql.SQL("UPDATE {0} SET b = 'y' WHERE ctid = (SELECT min(ctid) FROM {0})").format(ident(t)))
            conn.execute(sql.SQL("DELETE FROM {} WHERE b = %s").format(ident(t)), ("x",))
            got = conn.execute(sql.SQL("SELECT count(*)::text || min(b) FROM {}").format(ident(t))).fetchone()[0]
            check_eq(got, "1y", "rows left")
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident(t)))


SCENARIOS = {
    "connect": s_connect,
    "simple_query": s_simple_query,
    "extended_query": s_extended_query,
    "prepared": s_prepared,
    "transactions": s_transactions,
    "copy_in": s_copy_in,
    "copy_out": s_copy_out,
    "large_result": s_large_result,
    "cursor": s_cursor,
    "pipeline": s_pipeline,
    "errors": s_errors,
    "cancel": s_cancel,
    "statement_timeout": s_statement_timeout,
    "retry_40001": s_retry_40001,
    "no_pk_write": s_no_pk_write,
}

TABLES = ["simple", "extended", "prepared", "tx", "copyin", "copyout", "pipeline", "errors", "counter", "nopk"]


def main():
    env = Env()
    code = run_sync(env, SCENARIOS)
    # Drop whatever a failed scenario left behind.
    try:
        with connect(env) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.SQL(", ").join(ident(env.table(t)) for t in TABLES)))
    except Exception as e:  # noqa: BLE001
        print("cleanup failed: %r" % e, file=sys.stderr)
        code = 1
    return code


if __name__ == "__main__":
    print("psycopg %s, libpq %s" % (psycopg.__version__, psycopg.pq.version()), file=sys.stderr)
    sys.exit(main())
