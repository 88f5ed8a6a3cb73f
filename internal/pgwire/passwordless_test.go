package pgwire

// Relayed logins that PostgreSQL admits without asking for a credential
// (passwordless.go; red-team finding 7). The package's PostgreSQL trusts
// its Unix socket and, for roles without a method of their own, 127.0.0.1
// (pg_test.go), as a `tashkent up` server does.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// plainUser has no password; pg_hba.conf trusts it on every path.
const plainUser = "plainuser"

// recordedLogs keeps the proxy's log records of level Warn and above.
type recordedLogs struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recordedLogs) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (r *recordedLogs) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recordedLogs) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recordedLogs) WithGroup(string) slog.Handler      { return r }

// lines renders the records as "LEVEL message key=value ...".
func (r *recordedLogs) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%s", a.Key, a.Value)
			return true
		})
		out = append(out, b.String())
	}
	return out
}

func createPlainUser(t *testing.T, pg *testPG) {
	t.Helper()
	admin := connect(t, pg.directURL("postgres", ""))
	_, err := admin.Exec(context.Background(), fmt.Sprintf(
		`DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s LOGIN; END IF; END $$`, plainUser))
	if err != nil {
		t.Fatal(err)
	}
}

// pgLogSize is how far the package's PostgreSQL has written its log.
func pgLogSize(t *testing.T, pg *testPG) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(filepath.Dir(pg.dir), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func pgLogSince(t *testing.T, pg *testPG, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(pg.dir), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b[min(offset, int64(len(b))):])
}

func TestPasswordlessRelayedLoginIsRefused(t *testing.T) {
	pg := postgresForTest(t)
	createPlainUser(t, pg)
	logs := &recordedLogs{}
	socket := filepath.Join(pg.dir, fmt.Sprintf(".s.PGSQL.%d", pg.port))
	const appName = "passwordless-refused"
	proxies := map[string]*testProxy{
		"unix socket (local trust)": serveProxy(t, Config{BackendAddr: socket, Logger: slog.New(logs)}),
		"loopback TCP (host trust)": serveProxy(t, Config{BackendAddr: pg.addr, Logger: slog.New(logs)}),
	}
	logFrom := pgLogSize(t, pg)
	refusals := 0
	for path, p := range proxies {
		// A role that does not exist gets the same answer: PostgreSQL
		// sends AuthenticationOk before it looks the role up, and the
		// proxy does not tell a prober which roles exist.
		for _, user := range []string{"postgres", plainUser, "nosuchrole"} {
			t.Run(path+"/"+user, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				cfg, err := pgx.ParseConfig(p.url(user, ""))
				if err != nil {
					t.Fatal(err)
				}
				cfg.RuntimeParams["application_name"] = appName
				if user == "postgres" {
					// PostgreSQL logs a client that vanished without
					// Terminate at DEBUG1 only.
					cfg.RuntimeParams["log_min_messages"] = "debug1"
				}
				conn, err := pgx.ConnectConfig(ctx, cfg)
				refusals++
				if err == nil {
					conn.Close(ctx)
					t.Fatalf("%s logged in through the proxy without a password", user)
				}
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "28000" || pgErr.Severity != "FATAL" {
					t.Fatalf("passwordless login: %v, want FATAL 28000", err)
				}
				want := fmt.Sprintf(`PostgreSQL admitted role %q on the tashkent proxy's connection without asking for a password, so the proxy would let anyone who reaches it log in as any role`, user)
				if pgErr.Message != want {
					t.Errorf("message %q\nwant    %q", pgErr.Message, want)
				}
				for _, way := range []string{"pg_hba.conf", "scram-sha-256", "--auth scram", "--allow-passwordless-logins"} {
					if !strings.Contains(pgErr.Hint, way) {
						t.Errorf("hint %q does not name %s", pgErr.Hint, way)
					}
				}
			})
		}
	}

	t.Run("psql shows the message and the hint", func(t *testing.T) {
		_, errOut, err := psql(proxies["unix socket (local trust)"].addr, "postgres", "", "-w", "-c", "SELECT 1")
		refusals++
		if err == nil || !strings.Contains(errOut, `admitted role "postgres"`) || !strings.Contains(errOut, "HINT:") {
			t.Fatalf("psql: %v, stderr %q", err, errOut)
		}
	})

	t.Run("one warning per refusal, with role and client", func(t *testing.T) {
		var warned []string
		// The proxy logs after it has ended the server's session, which may
		// be after the client has its answer.
		waitFor(t, "a warning per refusal", func() bool {
			warned = warned[:0]
			for _, l := range logs.lines() {
				if strings.Contains(l, "without asking for a password") {
					warned = append(warned, l)
				}
			}
			return len(warned) >= refusals
		})
		if len(warned) != refusals {
			t.Fatalf("%d warnings for %d refusals:\n%s", len(warned), refusals, strings.Join(logs.lines(), "\n"))
		}
		for _, l := range warned {
			if !strings.HasPrefix(l, "WARN ") || !strings.Contains(l, "client=127.0.0.1:") ||
				!(strings.Contains(l, "user=postgres") || strings.Contains(l, "user="+plainUser) || strings.Contains(l, "user=nosuchrole")) {
				t.Errorf("warning %q: want level WARN, the client's address and the role", l)
			}
		}
	})

	// The postgres logins ran with log_min_messages = debug1: a backend
	// whose client vanished without Terminate logs "unexpected EOF".
	t.Run("the server sessions ended cleanly", func(t *testing.T) {
		admin := connect(t, pg.directURL("postgres", ""))
		waitFor(t, "the refused logins' backends to exit", func() bool {
			var n int
			err := admin.QueryRow(context.Background(),
				`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&n)
			return err == nil && n == 0
		})
		log := pgLogSince(t, pg, logFrom)
		for _, bad := range []string{"could not send data", "connection reset", "unexpected EOF", "could not receive data"} {
			if strings.Contains(log, bad) {
				t.Fatalf("PostgreSQL logged %q for a refused login:\n%s", bad, log)
			}
		}
		for _, p := range proxies {
			if n := p.srv.Registry.Len(); n != 0 {
				t.Fatalf("%d cancel keys registered after refused logins", n)
			}
		}
	})
}

// With AllowPasswordlessLogins (tashkent up, test harnesses) PostgreSQL's
// trust is the proxy's, as before.
func TestPasswordlessRelayedLoginAllowedByOptIn(t *testing.T) {
	pg := postgresForTest(t)
	createPlainUser(t, pg)
	p := serveProxy(t, Config{BackendAddr: pg.addr, AllowPasswordlessLogins: true})
	for _, user := range []string{"postgres", plainUser} {
		conn := connect(t, p.url(user, ""))
		var who string
		if err := conn.QueryRow(context.Background(), "SELECT current_user").Scan(&who); err != nil || who != user {
			t.Fatalf("current_user = %q, %v; want %s", who, err, user)
		}
	}
}
