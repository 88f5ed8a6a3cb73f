package compat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgcode"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
)

// psqlPath is PostgreSQL 15's psql, next to the server binaries the tests
// use.
func psqlPath() (string, error) {
	dir, err := pgserver.FindBinDir()
	if err != nil {
		return "", fmt.Errorf("psql: %v", err)
	}
	p := filepath.Join(dir, "psql")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("psql is not in %s: apt-get install -y postgresql-client-15", dir)
	}
	return p, nil
}

// psqlRun is one psql process's outcome.
type psqlRun struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

func (r psqlRun) String() string {
	return fmt.Sprintf("exit %d after %s\nstdout:\n%s\nstderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), process.OutputTail(r.stdout, 2000), process.OutputTail(r.stderr, 3000))
}

// psql runs psql with the target's environment (env), on port if not 0.
// interruptAfter, if not 0, sends psql SIGINT then, as Ctrl-C would.
func psql(ctx context.Context, env []string, port int, interruptAfter time.Duration, args ...string) (psqlRun, error) {
	bin, err := psqlPath()
	if err != nil {
		return psqlRun{}, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"-X", "-q", "-v", "ON_ERROR_STOP=1"}, args...)...)
	cmd.Env = env
	if port != 0 {
		cmd.Env = append(append([]string(nil), env...), "PGPORT="+strconv.Itoa(port))
	}
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return psqlRun{}, err
	}
	if interruptAfter > 0 {
		timer := time.AfterFunc(interruptAfter, func() { _ = cmd.Process.Signal(syscall.SIGINT) })
		defer timer.Stop()
	}
	err = cmd.Wait()
	r := psqlRun{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		r.code = exitErr.ExitCode()
	default:
		return r, err
	}
	return r, nil
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// psqlTables are the tables the psql scripts create (dropped at the end
// whatever happened).
var psqlTables = []string{"simple", "prepared", "tx", "copyin", "copyout", "copyout2", "errors", "counter", "nopk"}

// runPsqlSuite runs compat/psql/*.sql, one psql process per scenario, and
// drives the scenarios that need more than a script (cancel, the 40001
// retry loop).
func runPsqlSuite(ctx context.Context, t *testing.T, root string, tg target, env []string) map[string]result {
	dir := filepath.Join(root, "compat", "psql")
	prefix := envValue(env, "COMPAT_PREFIX")
	tmp := t.TempDir()
	res := map[string]result{}
	var details []string
	script := func(name string) result {
		r, err := psql(ctx, env, 0, 0, "-v", "prefix="+prefix, "-v", "tmpdir="+tmp, "-v", "target="+tg.name, "-f", filepath.Join(dir, name+".sql"))
		switch {
		case err != nil:
			return result{status: "FAIL", detail: err.Error()}
		case r.code != 0:
			details = append(details, name+": "+r.String())
			return result{status: "FAIL", detail: fmt.Sprintf("psql exit %d: %s", r.code, oneLine(lastError(r.stderr)))}
		}
		return result{status: "PASS", detail: r.elapsed.Round(10 * time.Millisecond).String()}
	}
	for _, sc := range scenarios {
		if !selected("COMPAT_ONLY", sc) {
			continue
		}
		switch sc {
		case "extended_query":
			res[sc] = result{status: "NA", detail: "psql 15 sends every statement with the simple Query protocol (\\bind arrived in psql 16)"}
		case "pipeline":
			res[sc] = result{status: "NA", detail: "psql 15 has no pipeline mode (\\startpipeline arrived in psql 18)"}
		case "connect":
			r := script(sc)
			if r.status == "PASS" {
				r = psqlWrongPassword(ctx, env)
			}
			res[sc] = r
		case "cancel":
			res[sc] = psqlCancel(ctx, env, filepath.Join(dir, "cancel.sql"))
		case "retry_40001":
			res[sc] = psqlRetry(ctx, env, tg, prefix, filepath.Join(dir, "retry_worker.sql"))
		default:
			res[sc] = script(sc)
		}
	}
	var drop []string
	for _, tb := range psqlTables {
		drop = append(drop, `"`+prefix+"_"+tb+`"`)
	}
	if r, err := psql(ctx, env, 0, 0, "-c", "DROP TABLE IF EXISTS "+strings.Join(drop, ", ")); err != nil || r.code != 0 {
		t.Errorf("psql cleanup: %v %s", err, r)
	}
	if len(details) > 0 {
		t.Logf("psql %s failures:\n%s", tg.name, strings.Join(details, "\n\n"))
	}
	return res
}

func psqlWrongPassword(ctx context.Context, env []string) result {
	bad := append(append([]string(nil), env...), "PGPASSWORD=wrong-"+compatPassword)
	r, err := psql(ctx, bad, 0, 0, "-c", "SELECT 1")
	switch {
	case err != nil:
		return result{status: "FAIL", detail: err.Error()}
	case r.code != 2 || !strings.Contains(r.stderr, "password authentication failed"):
		return result{status: "FAIL", detail: "a wrong password: " + oneLine(r.String())}
	}
	return result{status: "PASS"}
}

// psqlCancel: SIGINT while pg_sleep(10) runs makes psql send a CancelRequest;
// the statement fails with 57014 and psql (ON_ERROR_STOP) exits 3.
func psqlCancel(ctx context.Context, env []string, file string) result {
	r, err := psql(ctx, env, 0, time.Second, "-f", file)
	switch {
	case err != nil:
		return result{status: "FAIL", detail: err.Error()}
	case r.code != 3 || !strings.Contains(r.stderr, pgcode.QueryCanceled):
		return result{status: "FAIL", detail: "want exit 3 and 57014: " + oneLine(r.String())}
	case r.elapsed > 5*time.Second:
		return result{status: "FAIL", detail: fmt.Sprintf("the cancel took %s", r.elapsed.Round(time.Millisecond))}
	}
	return result{status: "PASS", detail: r.elapsed.Round(10 * time.Millisecond).String()}
}

// psqlRetry is the 40001 scenario with psql: two workers (on two
// replicas of the cluster, or two sessions of one server) each make two
// increments of one counter, reading it and writing it plus one in a
// REPEATABLE READ transaction. On the first attempt worker A reads, then
// sleeps while worker B reads, writes and commits: A's write must fail with
// 40001. A worker that fails with 40001 runs again (the retry loop psql
// itself cannot have). The counter must end at the number of successful
// increments.
func psqlRetry(ctx context.Context, env []string, tg target, prefix, file string) result {
	fail := func(format string, a ...any) result {
		return result{status: "FAIL", detail: oneLine(fmt.Sprintf(format, a...))}
	}
	table := prefix + "_counter"
	if r, err := psql(ctx, env, tg.port, 0, "-c", fmt.Sprintf(`CREATE TABLE %q (id int PRIMARY KEY, n int NOT NULL)`, table),
		"-c", fmt.Sprintf(`INSERT INTO %q VALUES (1, 0)`, table)); err != nil || r.code != 0 {
		return fail("setup: %v %s", err, r)
	}
	read := func(port int) (string, error) {
		r, err := psql(ctx, env, port, 0, "-tA", "-c", fmt.Sprintf(`SELECT n FROM %q WHERE id = 1`, table))
		if err != nil {
			return "", err
		}
		if r.code != 0 {
			return "", fmt.Errorf("%s", oneLine(r.stderr))
		}
		return strings.TrimSpace(r.stdout), nil
	}
	waitFor := func(port int, want string) error {
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := read(port)
			if err == nil && got == want {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("port %d reads %q (%v), want %q after 10s", port, got, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := waitFor(tg.port2, "0"); err != nil {
		return fail("the counter row on the second connection: %v", err)
	}
	const perWorker = 2
	var mu sync.Mutex
	ok, conflicts := 0, 0
	var errs []string
	worker := func(port int, firstPre, firstMid string) {
		pre, mid := firstPre, firstMid
		for done, attempt := 0, 1; done < perWorker; attempt++ {
			if attempt > 50 {
				mu.Lock()
				errs = append(errs, "no success after 50 attempts")
				mu.Unlock()
				return
			}
			r, err := psql(ctx, env, port, 0, "-v", "t="+table, "-v", "pre="+pre, "-v", "mid="+mid, "-f", file)
			pre, mid = "0", "0"
			mu.Lock()
			switch {
			case err != nil:
				errs = append(errs, err.Error())
				mu.Unlock()
				return
			case r.code == 0:
				done++
				ok++
			case strings.Contains(r.stderr, pgcode.SerializationFailure):
				conflicts++
			default:
				errs = append(errs, r.String())
				mu.Unlock()
				return
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); worker(tg.port, "0", "1.5") }()
	go func() { defer wg.Done(); worker(tg.port2, "0.5", "0") }()
	wg.Wait()
	if len(errs) > 0 {
		return fail("worker: %s", errs[0])
	}
	if ok != 2*perWorker {
		return fail("%d successful increments, want %d", ok, 2*perWorker)
	}
	if conflicts < 1 {
		return fail("no 40001: the concurrent updates did not conflict")
	}
	for _, port := range []int{tg.port, tg.port2} {
		if err := waitFor(port, strconv.Itoa(ok)); err != nil {
			return fail("counter after %d successful increments: %v", ok, err)
		}
	}
	return result{status: "PASS", detail: fmt.Sprintf("%d increments, %d serialization failures retried", ok, conflicts)}
}

// lastError is the last ERROR line psql printed (or the last line).
func lastError(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "ERROR:") || strings.Contains(lines[i], "FATAL:") || strings.Contains(lines[i], "error:") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
