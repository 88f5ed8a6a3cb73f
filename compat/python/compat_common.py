"""Shared plumbing of the Python compatibility suites (psycopg, asyncpg).

Every suite reads the same environment (set by internal/compat's Go test, or
by hand):

  PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE   the server (a replica) to test
  COMPAT_PORT2     a second port on PGHOST: another replica of the same cluster
                   (or the same server when COMPAT_TARGET=direct), used by the
                   scenarios that need two sessions on two replicas
  COMPAT_TARGET    "direct" or "cluster"
  COMPAT_PREFIX    prefix of every table the suite creates (unique per run)
  COMPAT_ONLY      optional comma-separated list of scenarios to run
  COMPAT_EXPECT_FAIL  scenarios known to fail (a known bug): they still
                   run, with a short timeout, so that a fix shows

and prints one line per scenario:

  COMPAT-RESULT <scenario> PASS
  COMPAT-RESULT <scenario> FAIL <reason on one line>
  COMPAT-RESULT <scenario> NA <why the client has no such feature>
"""

import os
import sys
import time
import traceback

SCENARIOS = [
    "connect",
    "simple_query",
    "extended_query",
    "prepared",
    "transactions",
    "copy_in",
    "copy_out",
    "large_result",
    "cursor",
    "pipeline",
    "errors",
    "cancel",
    "statement_timeout",
    "retry_40001",
    "no_pk_write",
]


class Env:
    def __init__(self):
        self.host = os.environ.get("PGHOST", "127.0.0.1")
        self.port = int(os.environ.get("PGPORT", "5432"))
        self.port2 = int(os.environ.get("COMPAT_PORT2", str(self.port)))
        self.user = os.environ.get("PGUSER", "postgres")
        self.password = os.environ.get("PGPASSWORD", "")
        self.database = os.environ.get("PGDATABASE", "postgres")
        self.target = os.environ.get("COMPAT_TARGET", "direct")
        self.prefix = os.environ.get("COMPAT_PREFIX", "compat_py_%d" % os.getpid())
        only = os.environ.get("COMPAT_ONLY", "")
        self.only = set(s for s in only.split(",") if s)
        self.expect_fail = set(s for s in os.environ.get("COMPAT_EXPECT_FAIL", "").split(",") if s)
        self.conns = []  # connections the running scenario opened (async suites)

    def timeout(self, scenario):
        return 4.0 if scenario in self.expect_fail else 90.0

    def table(self, name):
        return "%s_%s" % (self.prefix, name)


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def check_eq(got, want, what):
    if got != want:
        raise Fail("%s: got %r, want %r" % (what, got, want))


class NotApplicable(Exception):
    pass


def report(name, status, detail=""):
    line = "COMPAT-RESULT %s %s" % (name, status)
    if detail:
        line += " " + " ".join(str(detail).split())
    print(line, flush=True)


def poll(fn, timeout=10.0, interval=0.02, what="condition"):
    """Calls fn until it returns a true value (returned) or timeout passes.
    Exceptions count as "not yet"; the last one is reported."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - anything means "not yet"
            last = e
        if time.monotonic() > deadline:
            raise Fail("timed out after %.1fs waiting for %s (last error: %r)" % (timeout, what, last))
        time.sleep(interval)


def same_on_both(env, query_a, query_b, what, timeout=10.0):
    """Polls until query_b (a callable reading through COMPAT_PORT2) returns
    what query_a (a callable reading through PGPORT) returns: on the cluster,
    writes made on one replica reach the other within the staleness bound."""
    want = query_a()
    poll(lambda: query_b() == want, timeout=timeout, what="%s to read %r through the second port" % (what, want))
    return want


def run_sync(env, scenarios):
    """Runs sync scenario functions (name -> fn(env)); returns the exit code."""
    failed = 0
    for name in SCENARIOS:
        if env.only and name not in env.only:
            continue
        fn = scenarios.get(name)
        if fn is None:
            report(name, "NA", "no such scenario in this suite")
            continue
        start = time.monotonic()
        try:
            fn(env)
            report(name, "PASS", "%.2fs" % (time.monotonic() - start))
        except NotApplicable as e:
            report(name, "NA", str(e))
        except Exception as e:  # noqa: BLE001
            failed += 1
            traceback.print_exc(file=sys.stderr)
            report(name, "FAIL", "%s: %s" % (type(e).__name__, e))
    return 1 if failed else 0


async def run_async(env, scenarios, terminate):
    """Runs async scenario functions with a timeout each. A scenario that
    hangs is cancelled and the connections it opened (env.conns) are closed
    with terminate(conn), so that the next scenario still runs."""
    import asyncio
    failed = 0
    for name in SCENARIOS:
        if env.only and name not in env.only:
            continue
        fn = scenarios.get(name)
        if fn is None:
            report(name, "NA", "no such scenario in this suite")
            continue
        start = time.monotonic()
        env.conns = []
        try:
            task = asyncio.ensure_future(fn(env))
            done, _ = await asyncio.wait({task}, timeout=env.timeout(name))
            if not done:
                for c in env.conns:
                    terminate(c)
                task.cancel()
                await asyncio.wait({task}, timeout=2)
                raise Fail("timed out after %.0fs (hung)" % env.timeout(name))
            task.result()
            report(name, "PASS", "%.2fs" % (time.monotonic() - start))
        except NotApplicable as e:
            report(name, "NA", str(e))
        except Exception as e:  # noqa: BLE001
            failed += 1
            traceback.print_exc(file=sys.stderr)
            report(name, "FAIL", "%s: %s" % (type(e).__name__, e))
    return 1 if failed else 0
