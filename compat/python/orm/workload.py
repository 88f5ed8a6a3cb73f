"""The application side of the ORM migration scenarios (internal/compat's
TestAlembicMigrations and TestDjangoMigrations): one client that keeps
reading and writing through its ORM, on another replica than the one the
migrations run on, until the file named by ORM_STOP_FILE exists.

Each unit of work is one transaction. One that fails with SQLSTATE 40001
(a certification conflict, or a transaction that overlapped replicated DDL)
is retried, as an application on tashkent must; every other error is
recorded and the loop goes on. ORM_PAUSE_SECONDS is the pause between two
transactions. At the end it prints one line:

  ORM-RESULT {"transactions": N, "retried_40001": N, "errors": [...], "samples_40001": [...]}
"""

import json
import os
import random
import sys
import time

# A unit of work that still fails after this many attempts is an error:
# a conflict that never clears means the application cannot make progress.
ATTEMPTS_MAX = 50
# Pause between two transactions (ORM_PAUSE_SECONDS): how busy the
# application keeps the tables the migrations change.
PAUSE_SECONDS = float(os.environ.get("ORM_PAUSE_SECONDS", "0.005"))
# The workload's own limit, in case the test that started it died.
RUN_SECONDS_MAX = 600


def sqlstate(exc):
    """The SQLSTATE of exc or of the driver error it wraps (SQLAlchemy:
    .orig; Django: __cause__), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        code = getattr(exc, "sqlstate", None)
        if code:
            return code
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
    return None


def run(unit, on_error=lambda: None):
    """Runs unit(rng) until the stop file exists and prints the result.
    on_error is called after a failed attempt (to drop a broken connection)."""
    stop_file = os.environ["ORM_STOP_FILE"]
    rng = random.Random(os.getpid())
    stats = {"transactions": 0, "retried_40001": 0, "errors": [], "samples_40001": []}
    deadline = time.monotonic() + RUN_SECONDS_MAX
    while not os.path.exists(stop_file) and time.monotonic() < deadline:
        for attempt in range(1, ATTEMPTS_MAX + 1):
            try:
                unit(rng)
                stats["transactions"] += 1
                break
            except Exception as exc:  # noqa: BLE001: every error is reported
                on_error()
                line = " ".join(str(exc).split())[:400]
                if sqlstate(exc) != "40001":
                    stats["errors"].append("%s: %s" % (type(exc).__name__, line))
                    break
                stats["retried_40001"] += 1
                if len(stats["samples_40001"]) < 5 and line not in stats["samples_40001"]:
                    stats["samples_40001"].append(line)
                if attempt == ATTEMPTS_MAX:
                    stats["errors"].append("40001 %d times in a row: %s" % (ATTEMPTS_MAX, line))
        if len(stats["errors"]) > 20:
            break
        time.sleep(PAUSE_SECONDS)
    print("ORM-RESULT " + json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit("workload.py is a module: run sqlalchemy_app.py or django_project/app.py")
