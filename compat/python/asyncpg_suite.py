"""Compatibility suite for asyncpg (its own implementation of the protocol,
no libpq). See compat_common.py for the environment it reads and the lines it
prints."""

import asyncio
import datetime
import decimal
import io
import random
import sys
import time

import asyncpg
from asyncpg import exceptions as exc

from compat_common import Env, Fail, check, check_eq, run_async


async def connect(env, port=None, password=None):
    conn = await asyncpg.connect(host=env.host, port=port or env.port, user=env.user,
                                 password=password if password is not None else (env.password or None),
                                 database=env.database, timeout=10)
    env.conns.append(conn)
    return conn


def q(name):
    return '"%s"' % name


async def expect_sqlstate(want, coro):
    try:
        await coro
    except asyncpg.PostgresError as e:
        check_eq(e.sqlstate, want, "SQLSTATE of %s" % type(e).__name__)
        return e
    raise Fail("no error, want SQLSTATE %s" % want)


async def apoll(fn, timeout=10.0, interval=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = await fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001
            last = e
        if time.monotonic() > deadline:
            raise Fail("timed out after %.1fs waiting for %s (last error: %r)" % (timeout, what, last))
        await asyncio.sleep(interval)


async def check_replicated(env, conn, t):
    """The table reads the same through the second port (another replica
    when run on the cluster)."""
    query = "SELECT count(*), coalesce(sum(hashtext(x::text)), 0) FROM %s x" % q(t)
    want = tuple(await conn.fetchrow(query))
    c2 = await connect(env, port=env.port2)
    try:
        async def same():
            return tuple(await c2.fetchrow(query)) == want
        await apoll(same, what="table %s to read %r through the second port" % (t, want))
    finally:
        await c2.close()


async def s_connect(env):
    conn = await connect(env)
    try:
        row = await conn.fetchrow("SELECT current_user, current_database(), current_setting('server_version_num')::int")
        check_eq(row[0], env.user, "current_user")
        check_eq(row[1], env.database, "current_database()")
        check(150000 <= row[2] < 160000, "server_version_num %d is not 15.x" % row[2])
        check_eq(conn.get_server_version().major, 15, "server_version ParameterStatus")
        check(conn.get_server_pid() > 0, "no backend pid (BackendKeyData)")
    finally:
        await conn.close()
    if env.password:
        try:
            c = await connect(env, password=env.password + "-wrong")
            await c.close()
        except exc.InvalidPasswordError as e:
            check_eq(e.sqlstate, "28P01", "SQLSTATE of a wrong password")
        else:
            raise Fail("a wrong password was accepted")


async def s_simple_query(env):
    t = env.table("simple")
    conn = await connect(env)
    try:
        # execute() without arguments uses the simple Query protocol.
        await conn.execute("CREATE TABLE %s (id int PRIMARY KEY, name text)" % q(t))
        status = await conn.execute("INSERT INTO {t} VALUES (1, 'one'); INSERT INTO {t} VALUES (2, 'two'); "
                                    "UPDATE {t} SET name = 'deux' WHERE id = 2".format(t=q(t)))
        check_eq(status, "UPDATE 1", "status of the last statement")
        rows = await conn.fetch("SELECT id, name FROM %s ORDER BY id" % q(t))
        check_eq([tuple(r) for r in rows], [(1, "one"), (2, "deux")], "table contents")
        await check_replicated(env, conn, t)
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


TYPED_ROW = (
    7, "naïve ☃ text", decimal.Decimal("12345.6789"), True,
    datetime.datetime(2024, 2, 29, 12, 34, 56, 789000, tzinfo=datetime.timezone.utc),
    b"\x00\x01\xfe\xff", None, 2.5, datetime.date(2000, 1, 1),
)


async def s_extended_query(env):
    t = env.table("extended")
    conn = await connect(env)
    try:
        await conn.execute("CREATE TABLE %s (id int PRIMARY KEY, t text, n numeric, b bool, ts timestamptz, "
                           "by bytea, nul text, f float8, d date)" % q(t))
        ins = "INSERT INTO %s VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)" % q(t)
        await conn.execute(ins, *TYPED_ROW)
        row = await conn.fetchrow("SELECT * FROM %s WHERE id = $1 AND t = $2" % q(t), 7, TYPED_ROW[1])
        check_eq(tuple(row), TYPED_ROW, "row read back")
        await conn.executemany(ins, [(i,) + TYPED_ROW[1:] for i in range(100, 110)])
        n = await conn.fetchval("SELECT count(*) FROM %s WHERE id >= $1" % q(t), 100)
        check_eq(n, 10, "rows inserted by executemany")
        status = await conn.execute("UPDATE %s SET f = f + $1 WHERE id >= $2" % q(t), 1.0, 100)
        check_eq(status, "UPDATE 10", "status of a parameterized UPDATE")
        await check_replicated(env, conn, t)
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


async def s_prepared(env):
    t = env.table("prepared")
    conn = await connect(env)
    try:
        await conn.execute("CREATE TABLE %s (id int PRIMARY KEY, v text)" % q(t))
        ins = await conn.prepare("INSERT INTO %s VALUES ($1, $2)" % q(t))
        sel = await conn.prepare("SELECT v FROM %s WHERE id = $1" % q(t))
        for i in range(5):
            await ins.fetch(i, "v%d" % i)  # autocommit writes through a named statement
        async with conn.transaction():
            for i in range(5, 10):
                await ins.fetch(i, "v%d" % i)
        for i in range(10):
            check_eq(await sel.fetchval(i), "v%d" % i, "prepared SELECT %d" % i)
        names = await conn.fetch("SELECT name, statement FROM pg_prepared_statements WHERE NOT from_sql")
        check(sum(1 for r in names if t in r["statement"]) >= 2,
              "no protocol-level prepared statements on the server: %r" % [tuple(r) for r in names])
        check_eq(await conn.fetchval("SELECT count(*) FROM %s" % q(t)), 10, "rows")
        await check_replicated(env, conn, t)
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


async def s_transactions(env):
    t = env.table("tx")
    conn = await connect(env)
    try:
        await conn.execute("CREATE TABLE %s (id int PRIMARY KEY, v text)" % q(t))
        ins = "INSERT INTO %s VALUES ($1, $2)" % q(t)
        ids = "SELECT array_agg(id ORDER BY id) FROM %s" % q(t)
        async with conn.transaction():
            await conn.execute(ins, 1, "a")
            try:
                async with conn.transaction():  # SAVEPOINT
                    await conn.execute(ins, 2, "b")
                    await conn.execute(ins, 1, "dup")
            except exc.UniqueViolationError:
                pass
            await conn.execute(ins, 3, "c")
        check_eq(await conn.fetchval(ids), [1, 3], "rows after COMMIT with ROLLBACK TO SAVEPOINT")
        tr = conn.transaction(isolation="repeatable_read")
        await tr.start()
        await conn.execute(ins, 4, "d")
        await tr.rollback()
        check_eq(await conn.fetchval(ids), [1, 3], "rows after ROLLBACK")
        await conn.execute("BEGIN")
        await conn.execute(ins, 5, "e")
        await conn.execute("SAVEPOINT s1")
        await conn.execute(ins, 6, "f")
        await conn.execute("RELEASE SAVEPOINT s1")
        await conn.execute("COMMIT")
        check_eq(await conn.fetchval(ids), [1, 3, 5, 6], "rows at the end")
        await check_replicated(env, conn, t)
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


async def s_copy_in(env):
    t = env.table("copyin")
    conn = await connect(env)
    try:
        await conn.execute("CREATE TABLE %s (id int PRIMARY KEY, name text, amount numeric)" % q(t))
        # Binary COPY FROM STDIN.
        res = await conn.copy_records_to_table(
            t, records=[(i, "row %d" % i, decimal.Decimal(i) / 4) for i in range(1, 1001)],
            columns=["id", "name", "amount"])
        check_eq(res, "COPY 1000", "copy_records_to_table status")
        async with conn.transaction():
            data = "".join("%d,\"csv %d, quoted\",%d\n" % (i, i, i) for i in range(1001, 1501)).encode()
            res = await conn.copy_to_table(t, source=io.BytesIO(data), format="csv")
            check_eq(res, "COPY 500", "copy_to_table status")
        row = await conn.fetchrow("SELECT count(*), sum(id), sum(amount) FROM %s" % q(t))
        want_amount = sum(decimal.Decimal(i) / 4 for i in range(1, 1001)) + sum(range(1001, 1501))
        check_eq(tuple(row), (1500, sum(range(1, 1501)), want_amount), "count, sum(id), sum(amount)")
        await expect_sqlstate("23505", conn.copy_records_to_table(t, records=[(5000, "new", 1), (1, "dup", 1)]))
        check_eq(await conn.fetchval("SELECT count(*) FROM %s" % q(t)), 1500, "rows after a failed COPY")
        await check_replicated(env, conn, t)
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


async def s_copy_out(env):
    t = env.table("copyout")
    conn = await connect(env)
    try:
        await conn.execute("CREATE TABLE %s (id int PRIMARY KEY, name text)" % q(t))
        await conn.execute("INSERT INTO %s SELECT g, 'n' || g FROM generate_series(1, 500) g" % q(t))
        out = io.BytesIO()
        res = await conn.copy_from_table(t, output=out)
        check_eq(res, "COPY 500", "copy_from_table status")
        lines = sorted(out.getvalue().decode().splitlines(), key=lambda l: int(l.split("\t")[0]))
        check_eq((len(lines), lines[0]), (500, "1\tn1"), "rows copied out")
        out = io.BytesIO()
        await conn.copy_from_query("SELECT g, g * 2 FROM generate_series(1, $1) g", 3, output=out, format="csv", header=True)
        check_eq(out.getvalue().decode(), "g,?column?\n1,2\n2,4\n3,6\n", "CSV out")
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


async def s_large_result(env):
    conn = await connect(env)
    try:
        rows = await conn.fetch("SELECT g, md5(g::text) FROM generate_series(1, $1) g", 100000)
        check_eq(len(rows), 100000, "rows")
        check_eq(sum(r[0] for r in rows), 100000 * 100001 // 2, "sum")
        check_eq(rows[-1][1], await conn.fetchval("SELECT md5('100000')"), "md5 of the last row")
    finally:
        await conn.close()


async def s_cursor(env):
    conn = await connect(env)
    try:
        n = total = 0
        async with conn.transaction():  # a portal fetched in batches (Execute with a row limit)
            async for r in conn.cursor("SELECT g FROM generate_series(1, 100000) g", prefetch=5000):
                n += 1
                total += r[0]
        check_eq((n, total), (100000, 100000 * 100001 // 2), "rows and sum through a cursor")
    finally:
        await conn.close()


async def s_pipeline(env):
    # asyncpg pipelines executemany(): Bind/Execute for every row, one Sync.
    t = env.table("pipeline")
    conn = await connect(env)
    try:
        await conn.execute("CREATE TABLE %s (id int PRIMARY KEY, v text)" % q(t))
        await conn.executemany("INSERT INTO %s VALUES ($1, $2)" % q(t), [(i, "v%d" % i) for i in range(1, 201)])
        async with conn.transaction():
            await conn.executemany("UPDATE %s SET v = $2 WHERE id = $1" % q(t), [(i, "u%d" % i) for i in range(1, 11)])
        check_eq(await conn.fetchval("SELECT count(*) FROM %s WHERE v LIKE 'u%%'" % q(t)), 10, "rows updated")
        check_eq(await conn.fetchval("SELECT count(*) FROM %s" % q(t)), 200, "rows")
        await check_replicated(env, conn, t)
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


async def s_errors(env):
    t = env.table("errors")
    conn = await connect(env)
    try:
        await conn.execute("CREATE TABLE %s (id int PRIMARY KEY)" % q(t))
        ins = "INSERT INTO %s VALUES ($1)" % q(t)
        await conn.execute(ins, 1)
        e = await expect_sqlstate("23505", conn.execute(ins, 1))
        check(isinstance(e, exc.UniqueViolationError), "23505 raised as %s" % type(e).__name__)
        check_eq(e.constraint_name, "%s_pkey" % t, "constraint name")
        await expect_sqlstate("23505", conn.execute("INSERT INTO %s VALUES (1)" % q(t)))
        e = await expect_sqlstate("22012", conn.fetchval("SELECT 1/0"))
        check(isinstance(e, exc.DivisionByZeroError), "22012 raised as %s" % type(e).__name__)
        await expect_sqlstate("22012", conn.execute("SELECT 1/0"))
        e = await expect_sqlstate("42P01", conn.fetch("SELECT * FROM compat_no_such_table"))
        check(isinstance(e, exc.UndefinedTableError), "42P01 raised as %s" % type(e).__name__)
        await expect_sqlstate("42601", conn.fetch("SELEC 1"))
        await conn.execute("BEGIN")
        await expect_sqlstate("23505", conn.execute(ins, 1))
        await expect_sqlstate("25P02", conn.fetchval("SELECT 1"))
        await conn.execute("ROLLBACK")
        check_eq(await conn.fetchval("SELECT 42"), 42, "the session works after errors")
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


async def s_cancel(env):
    # asyncpg's cancel API is cancelling the awaiting task (or a timeout=):
    # it sends a CancelRequest and swallows the server's 57014, so the check
    # is that the connection is free again at once: without a cancel that
    # reached the server, the next query would wait for pg_sleep(10).
    conn = await connect(env)
    try:
        start = time.monotonic()
        task = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(10)"))
        await asyncio.sleep(0.5)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise Fail("the cancelled query completed")
        check_eq(await conn.fetchval("SELECT 1", timeout=5), 1, "the session works after the cancel")
        elapsed = time.monotonic() - start
        check(elapsed < 5, "cancel via task.cancel() took %.1fs" % elapsed)
        start = time.monotonic()
        try:
            await conn.fetchval("SELECT pg_sleep(10)", timeout=0.5)
        except asyncio.TimeoutError:
            pass
        else:
            raise Fail("timeout= did not interrupt the query")
        check_eq(await conn.fetchval("SELECT 1", timeout=5), 1, "the session works after the timeout")
        elapsed = time.monotonic() - start
        check(elapsed < 5, "cancel via timeout= took %.1fs" % elapsed)
    finally:
        await conn.close()


async def s_statement_timeout(env):
    conn = await connect(env)
    try:
        await conn.execute("SET statement_timeout = 200")
        start = time.monotonic()
        e = await expect_sqlstate("57014", conn.fetchval("SELECT pg_sleep(5)"))
        elapsed = time.monotonic() - start
        check(isinstance(e, exc.QueryCanceledError), "57014 raised as %s" % type(e).__name__)
        check(elapsed < 3, "the timeout took %.1fs" % elapsed)
        await conn.execute("RESET statement_timeout")
        check_eq(await conn.fetchval("SHOW statement_timeout"), "0", "statement_timeout after RESET")
    finally:
        await conn.close()


async def s_retry_40001(env):
    t = env.table("counter")
    per_worker = 3
    a = await connect(env)
    b = await connect(env, port=env.port2)
    try:
        await a.execute("CREATE TABLE %s (id int PRIMARY KEY, n int NOT NULL)" % q(t))
        await a.execute("INSERT INTO %s VALUES (1, 0)" % q(t))
        sel = "SELECT n FROM %s WHERE id = 1" % q(t)
        upd = "UPDATE %s SET n = $1 WHERE id = 1" % q(t)

        async def row_on_b():
            return await b.fetchval(sel) is not None
        await apoll(row_on_b, what="the counter row on the second connection")
        barrier = asyncio.Barrier(2)
        stats = {"ok": 0, "conflicts": 0}

        async def worker(conn):
            first = True
            done = attempts = 0
            while done < per_worker:
                attempts += 1
                if attempts > 200:
                    raise Fail("no success after 200 attempts")
                try:
                    async with conn.transaction(isolation="repeatable_read"):
                        n = await conn.fetchval(sel)
                        if first:
                            first = False
                            await asyncio.wait_for(barrier.wait(), 20)
                        else:
                            await asyncio.sleep(random.uniform(0, 0.03))
                        await conn.execute(upd, n + 1)
                    done += 1
                    stats["ok"] += 1
                except exc.SerializationError:
                    stats["conflicts"] += 1
                    await asyncio.sleep(random.uniform(0.01, 0.05))

        await asyncio.wait_for(asyncio.gather(worker(a), worker(b)), 60)
        check_eq(stats["ok"], 2 * per_worker, "successful increments")
        check(stats["conflicts"] >= 1, "no 40001: the concurrent updates did not conflict")
        for conn in (a, b):
            async def final(conn=conn):
                return await conn.fetchval(sel) == stats["ok"]
            await apoll(final, what="counter == %d (successful increments)" % stats["ok"])
        print("retry_40001: %d increments, %d serialization failures retried" % (stats["ok"], stats["conflicts"]),
              file=sys.stderr)
    finally:
        try:
            await drop_retrying(a, t)
        finally:
            await a.close()
            await b.close()


async def drop_retrying(conn, t):
    """DROP TABLE, retried on 40001 as a client would: right after writes on
    the other replica, the DDL's snapshot may be labelled before this replica
    counted the last of them applied (Tashkent §6.2, conservative versions)."""
    for attempt in range(1, 6):
        try:
            await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
            return
        except exc.SerializationError:
            if attempt == 5:
                raise
            await asyncio.sleep(0.05)


async def s_no_pk_write(env):
    # A table without a primary key takes inserts (equal rows too), updates
    # and deletes, on the cluster as on PostgreSQL.
    t = env.table("nopk")
    conn = await connect(env)
    try:
        await conn.execute("CREATE TABLE %s (a int, b text)" % q(t))
        await conn.execute("INSERT INTO %s VALUES ($1, 'x'), ($1, 'x')" % q(t), 1)
        await conn.execute("UPDATE %s SET b = 'y' WHERE ctid = (SELECT min(ctid) FROM %s)" % (q(t), q(t)))
        await conn.execute("DELETE FROM %s WHERE b = $1" % q(t), "x")
        check_eq(await conn.fetchval("SELECT count(*)::text || min(b) FROM %s" % q(t)), "1y", "rows left")
    finally:
        await conn.execute("DROP TABLE IF EXISTS %s" % q(t))
        await conn.close()


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


async def main():
    env = Env()
    code = await run_async(env, SCENARIOS, lambda c: c.terminate())
    # Drop whatever a failed scenario left behind (simple protocol: no arguments).
    env.conns = []
    try:
        conn = await connect(env)
        await asyncio.wait_for(conn.execute("DROP TABLE IF EXISTS %s" % ", ".join(q(env.table(t)) for t in TABLES)), 30)
        await conn.close()
    except Exception as e:  # noqa: BLE001
        print("cleanup failed: %r" % e, file=sys.stderr)
        code = 1
    return code


if __name__ == "__main__":
    print("asyncpg %s" % asyncpg.__version__, file=sys.stderr)
    sys.exit(asyncio.run(main()))
