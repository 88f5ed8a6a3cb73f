package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/clustertest"
	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/process"
)

// migrationTool is an ORM's migration tool and an application written with
// the ORM (compat/python/orm). The migrations create two tables with a
// foreign key, their sequences and indexes (step "first"), then add a
// column with an index and fill it in a data migration ("head"); "back"
// reverses those two, "zero" drops everything.
type migrationTool struct {
	name   string
	module string // what the preflight imports
	dir    string // the tool's directory under compat/python/orm
	// migrate is the command line that migrates to step "first", "head",
	// "back" or "zero".
	migrate map[string][]string
	app     []string // the application's command line
	authors string   // the application's tables
	books   string
}

var alembicTool = migrationTool{
	name: "alembic", module: "alembic", dir: ".",
	migrate: map[string][]string{
		"first": {"python3", "-m", "alembic", "-c", "alembic.ini", "upgrade", "0001"},
		"head":  {"python3", "-m", "alembic", "-c", "alembic.ini", "upgrade", "head"},
		"back":  {"python3", "-m", "alembic", "-c", "alembic.ini", "downgrade", "0001"},
		"zero":  {"python3", "-m", "alembic", "-c", "alembic.ini", "downgrade", "base"},
	},
	app:     []string{"python3", "-u", "sqlalchemy_app.py"},
	authors: "public.author", books: "public.book",
}

var djangoTool = migrationTool{
	name: "django", module: "django", dir: "django_project",
	migrate: map[string][]string{
		"first": {"python3", "manage.py", "migrate", "--no-input", "library", "0001"},
		"head":  {"python3", "manage.py", "migrate", "--no-input", "library"},
		"back":  {"python3", "manage.py", "migrate", "--no-input", "library", "0001"},
		"zero":  {"python3", "manage.py", "migrate", "--no-input", "library", "zero"},
	},
	app:     []string{"python3", "-u", "app.py"},
	authors: "public.library_author", books: "public.library_book",
}

// Alembic migrates replica 1 up, back down and to nothing while a
// SQLAlchemy application reads and writes the same tables on replica 2.
func TestAlembicMigrations(t *testing.T) { runMigrations(t, alembicTool) }

// Django's migrate does the same, with a Django application on replica 2.
func TestDjangoMigrations(t *testing.T) { runMigrations(t, djangoTool) }

// migrationAttemptsMax bounds the runs of one migration command: a
// migration that overlaps the application's commits on the tables it
// changes fails certification (40001) and is run again, as a user would.
const migrationAttemptsMax = 20

// The application's pause between two transactions: busy, it commits on
// the migrated tables about every 10 ms (more often than a migration's
// transaction lasts); calm, about 5 times a second, when a migration
// commits after a few runs also on a machine busy with the whole test
// suite (at 15 a second, 20 runs did not always suffice there).
const (
	busyPause = "0.005"
	calmPause = "0.2"
)

// busyAttempts is how often the starving migration is tried under the
// busy application.
const busyAttempts = 3

// appResult is what compat/python/orm/workload.py prints at its end.
type appResult struct {
	Transactions int      `json:"transactions"`
	Retried40001 int      `json:"retried_40001"`
	Errors       []string `json:"errors"`
	Samples40001 []string `json:"samples_40001"`
}

// runMigrations runs the scenario. A migration is one transaction per
// revision (alembic: one for all), certified like any writing transaction,
// and its DDL conflicts with every write to its tables that another
// replica commits while it runs (the lock watch ends it as soon as such a
// write waits for its locks). So under the busy application it fails: the
// test checks that its first run fails with 40001, so that the documented
// limitation stays true; a later run may find a gap in the application's
// writes (on a machine busy with the whole suite, it slows down). Under the
// calm application a migration commits after a few runs, the
// application's transactions that overlap one fail with 40001 and are
// retried, and nothing else fails.
func runMigrations(t *testing.T, tool migrationTool) {
	if testing.Short() {
		t.Skip("an ORM's migrations on a three-replica cluster take about a minute; not in -short")
	}
	root := repoRoot(t)
	if err := pythonModule(tool.module, `python3 -m pip install -r compat/python/requirements.txt`); err != nil {
		t.Fatalf("the %s scenario cannot run: %v", tool.name, err)
	}
	dir := filepath.Join(root, "compat", "python", "orm", tool.dir)
	cl := startAll(t, 3, clustertest.Options{Settings: upSettings})
	c := cl.cluster
	books := "SELECT count(*) FROM " + tool.books
	isbns := "SELECT count(*) FROM " + tool.books + " WHERE isbn IS NOT NULL"
	runs := map[string]int{}

	runs["first"] = migrate(t, tool, dir, c, "first", migrationAttemptsMax)
	t.Logf("%s: schema after the first migration:\n%s", tool.name, sameSchema(t, c))

	busy := startApp(t, tool, dir, c, busyPause)
	awaitCount(t, c, 1, books, 0, "the application's books")
	switch n := migrate(t, tool, dir, c, "head", -busyAttempts); n {
	case 1:
		t.Errorf("%s: the migration to head committed on replica 1 at its first run while the application wrote its tables on replica 2 "+
			"every few milliseconds: the limitation documented in docs/COMPATIBILITY.md (a migration fails with 40001 under a steady "+
			"write load from another replica) is gone; update the document and this test", tool.name)
	case 0:
	default:
		t.Logf("%s: under the busy application the migration to head failed with 40001 and then committed at run %d: "+
			"the application's writes left it a gap", tool.name, n)
	}
	reportApp(t, tool, "busy", busy.stop())

	calm := startApp(t, tool, dir, c, calmPause)
	n := awaitCount(t, c, 1, books, countOn(t, c, 1, books), "the calm application's books")
	runs["head"] = migrate(t, tool, dir, c, "head", migrationAttemptsMax)
	n = awaitCount(t, c, 1, books, countOn(t, c, 1, books), "books the application writes after the migrations")
	schema := sameSchema(t, c)
	if !strings.Contains(schema, "isbn") {
		t.Fatalf("after migrating to head, no replica has the isbn column:\n%s", schema)
	}
	filled := countOn(t, c, 0, isbns)
	if filled == 0 {
		t.Fatal("the data migration filled no isbn")
	}
	for i := range c.DBs {
		if got := countOn(t, c, i, isbns); got != filled {
			t.Errorf("replica %d has %d books with an isbn, replica 1 has %d", i+1, got, filled)
		}
	}
	t.Logf("%s: at head on every replica; %d books with an isbn after the data migration (%d books then)", tool.name, filled, n)

	runs["back"] = migrate(t, tool, dir, c, "back", migrationAttemptsMax)
	awaitCount(t, c, 1, books, countOn(t, c, 1, books), "books the application writes after the reverse migrations")
	if schema := sameSchema(t, c); strings.Contains(schema, "isbn") {
		t.Fatalf("after migrating back, the isbn column or its index is still there:\n%s", schema)
	}
	reportApp(t, tool, "calm", calm.stop())
	sums := sameData(t, c)
	t.Logf("%s: replicas equal with the application stopped: %s", tool.name, describeCounts(sums))

	runs["zero"] = migrate(t, tool, dir, c, "zero", migrationAttemptsMax)
	schema = sameSchema(t, c)
	for _, table := range []string{tool.authors, tool.books} {
		if strings.Contains(schema, strings.TrimPrefix(table, "public.")+".") {
			t.Errorf("after migrating to zero, %s is still there:\n%s", table, schema)
		}
	}
	sameData(t, c)
	t.Logf("%s: runs of each migration command until it committed: %v", tool.name, runs)
}

// reportApp logs what the application did and fails the test if it failed
// with anything but 40001 or committed nothing.
func reportApp(t *testing.T, tool migrationTool, phase string, res appResult) {
	t.Helper()
	t.Logf("%s application (%s) on replica 2: %d transactions, %d retried after 40001", tool.name, phase, res.Transactions, res.Retried40001)
	for _, s := range res.Samples40001 {
		t.Logf("%s application (%s): a 40001 it retried: %s", tool.name, phase, s)
	}
	if len(res.Errors) > 0 {
		t.Errorf("the %s application (%s) on replica 2 failed with other errors than 40001:\n%s", tool.name, phase, strings.Join(res.Errors, "\n"))
	}
	if res.Transactions == 0 {
		t.Errorf("the %s application (%s) committed nothing", tool.name, phase)
	}
}

// toolEnv is the environment of a tool or application connected to
// replica i as the suites' role.
func toolEnv(c *clustertest.Cluster, i int) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "ORM_") {
			env = append(env, kv)
		}
	}
	return append(env, "PGHOST=127.0.0.1", "PGPORT="+itoa(c.DBs[i].Port()), "PGUSER="+compatUser,
		"PGPASSWORD="+compatPassword, "PGDATABASE="+compatDatabase, "PGCONNECT_TIMEOUT=10",
		"PYTHONDONTWRITEBYTECODE=1")
}

// migrate runs the tool's migration to step on replica 1 until it
// succeeds, again after each 40001, at most attempts times, and returns
// how many runs it took. With attempts negative, -attempts runs must all
// fail with 40001 and it returns 0, or the run that succeeded.
func migrate(t *testing.T, tool migrationTool, dir string, c *clustertest.Cluster, step string, attempts int) int {
	t.Helper()
	args := tool.migrate[step]
	expectFail := attempts < 0
	if expectFail {
		attempts = -attempts
	}
	for run := 1; ; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir, cmd.Env, cmd.WaitDelay = dir, toolEnv(c, 0), 5*time.Second
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			return run
		}
		conflict := bytes.Contains(out, []byte("SerializationFailure")) || bytes.Contains(out, []byte(pgcode.SerializationFailure))
		if !conflict {
			t.Fatalf("%s on replica 1 (run %d): %v\n%s", strings.Join(args, " "), run, err, process.OutputTail(string(out), 6000))
		}
		t.Logf("%s on replica 1: run %d failed with 40001: %s", strings.Join(args, " "), run, conflictDetail(out))
		if run == attempts {
			if expectFail {
				return 0
			}
			t.Fatalf("%s on replica 1 failed with 40001 %d times in a row\n%s", strings.Join(args, " "), run, process.OutputTail(string(out), 6000))
		}
	}
}

// conflictDetail is the message and DETAIL of a migration tool's 40001.
func conflictDetail(out []byte) string {
	var parts []string
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if (strings.Contains(line, "could not serialize") || strings.HasPrefix(line, "DETAIL:")) && !slices.Contains(parts, line) {
			parts = append(parts, line)
		}
	}
	if len(parts) == 0 {
		return lastLine(string(out))
	}
	return strings.Join(parts, " ")
}

// app is a running application.
type app struct {
	t        *testing.T
	cmd      *exec.Cmd
	out      *bytes.Buffer
	stopFile string
}

// startApp starts the tool's application on replica 2, pausing pause
// seconds between transactions.
func startApp(t *testing.T, tool migrationTool, dir string, c *clustertest.Cluster, pause string) *app {
	t.Helper()
	a := &app{t: t, out: &bytes.Buffer{}, stopFile: filepath.Join(t.TempDir(), "stop")}
	a.cmd = exec.Command(tool.app[0], tool.app[1:]...)
	a.cmd.Dir = dir
	a.cmd.Env = append(toolEnv(c, 1), "ORM_STOP_FILE="+a.stopFile, "ORM_PAUSE_SECONDS="+pause)
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Stops it by its PID if the test ended before stop.
		if a.cmd.ProcessState == nil {
			_ = a.cmd.Process.Kill()
			_ = a.cmd.Wait()
		}
	})
	return a
}

// stop makes the application stop and returns what it reported.
func (a *app) stop() appResult {
	t := a.t
	t.Helper()
	if err := os.WriteFile(a.stopFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the application: %v\n%s", err, process.OutputTail(a.out.String(), 6000))
		}
	case <-time.After(time.Minute):
		_ = a.cmd.Process.Kill()
		<-done
		t.Fatalf("the application did not stop within a minute\n%s", process.OutputTail(a.out.String(), 6000))
	}
	for _, line := range strings.Split(a.out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "ORM-RESULT "); ok {
			var res appResult
			if err := json.Unmarshal([]byte(rest), &res); err != nil {
				t.Fatalf("the application's result %q: %v", rest, err)
			}
			return res
		}
	}
	t.Fatalf("the application printed no ORM-RESULT line:\n%s", process.OutputTail(a.out.String(), 6000))
	return appResult{}
}
