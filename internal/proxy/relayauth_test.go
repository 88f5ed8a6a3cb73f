package proxy_test

// Relayed logins (--auth relay) against a PostgreSQL that asks for a
// password on the proxy's connection, and one that does not (red-team
// finding 7, redteam_test.go; pgwire/passwordless.go): PostgreSQL's
// password methods work without --allow-passwordless-logins, and a login
// PostgreSQL admits without asking anything is refused unless the proxy
// opted in.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// Roles of the relayed-login tests: one per pg_hba.conf method on the
// proxy's connection path (its Unix socket, or 127.0.0.1 over TCP).
const (
	scramRole     = "alice"
	scramPassword = "secret of alice"
	md5Role       = "bob"
	md5Password   = "secret of bob"
	trustedRole   = "carol" // no password: pg_hba.conf trusts her
)

// strictRelayCluster is a 1-replica cluster whose proxy relays
// authentication without --allow-passwordless-logins, whose PostgreSQL
// asks alice for SCRAM-SHA-256 and bob for md5 and trusts everyone else
// (the admin postgres and carol), as pgtest's initdb -A trust does.
func strictRelayCluster(t *testing.T) *testCluster {
	t.Helper()
	c := startClusterWith(t, 1, func(_ int, cfg *proxy.Config) { cfg.AllowPasswordlessLogins = false })
	admin := c.direct(0)
	for _, sql := range []string{
		`SET password_encryption = 'scram-sha-256'`,
		fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, scramRole, scramPassword),
		`SET password_encryption = 'md5'`,
		fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, md5Role, md5Password),
		fmt.Sprintf(`CREATE ROLE %s LOGIN`, trustedRole),
	} {
		execSQL(t, admin, sql)
	}
	requirePasswords(t, c, map[string]string{scramRole: "scram-sha-256", md5Role: "md5"})
	return c
}

// requirePasswords puts method lines for the roles before pg_hba.conf's
// trust lines, for the Unix socket and for 127.0.0.1, reloads, and waits
// until the proxy relays PostgreSQL's refusal of a wrong password.
func requirePasswords(t *testing.T, c *testCluster, methods map[string]string) {
	t.Helper()
	hba := filepath.Join(c.dbs[0].DataDir(), "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	var lines string
	for role, method := range methods {
		lines += fmt.Sprintf("local all %[1]s %[2]s\nhost all %[1]s 127.0.0.1/32 %[2]s\n", role, method)
	}
	// WriteFile keeps the file's owner (postgres) and mode.
	if err := os.WriteFile(hba, append([]byte(lines), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	execSQL(t, c.direct(0), `SELECT pg_reload_conf()`)
	deadline := time.Now().Add(10 * time.Second)
	for role := range methods {
		for {
			err := relayedLogin(c, role, "wrong")
			if sqlState(err) == "28P01" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pg_hba.conf reload: %s with a wrong password gets %v, want 28P01", role, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// relayedLogin logs in through proxy 0 as user and runs a query that
// checks who PostgreSQL thinks it is.
func relayedLogin(c *testCluster, user, password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(c.dsn(0))
	if err != nil {
		return err
	}
	cfg.User, cfg.Password = user, password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var who string
	if err := conn.QueryRow(ctx, `SELECT current_user`).Scan(&who); err != nil {
		return err
	}
	if who != user {
		return fmt.Errorf("logged in as %s, current_user is %s", user, who)
	}
	return nil
}

// wantPasswordlessRefusal checks the proxy's answer to a login PostgreSQL
// admitted without asking for a password.
func wantPasswordlessRefusal(t *testing.T, user string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "28000" || pgErr.Severity != "FATAL" {
		t.Fatalf("login as %s without a password: %v, want FATAL 28000", user, err)
	}
	want := fmt.Sprintf(`PostgreSQL admitted role %q on the tashkent proxy's connection without asking for a password, so the proxy would let anyone who reaches it log in as any role`, user)
	if pgErr.Message != want || pgErr.Hint == "" {
		t.Fatalf("refusal %q (hint %q)\nwant %q with a hint", pgErr.Message, pgErr.Hint, want)
	}
}

// relayedPasswordLoginsWork: PostgreSQL asked for a password, so the
// proxy relays its verdict, without --allow-passwordless-logins.
func relayedPasswordLoginsWork(t *testing.T, c *testCluster) {
	for _, r := range []struct{ method, role, password string }{
		{"scram-sha-256", scramRole, scramPassword},
		{"md5", md5Role, md5Password},
	} {
		t.Run(r.method, func(t *testing.T) {
			if err := relayedLogin(c, r.role, r.password); err != nil {
				t.Fatalf("%s with the right password: %v", r.role, err)
			}
			err := relayedLogin(c, r.role, r.password+"x")
			if sqlState(err) != "28P01" {
				t.Fatalf("%s with a wrong password: %v, want PostgreSQL's 28P01", r.role, err)
			}
		})
	}
}

// passwordlessLoginsAfterOptIn restarts proxy 0 with
// --allow-passwordless-logins (the harness's default): PostgreSQL's trust
// is the proxy's again.
func passwordlessLoginsAfterOptIn(t *testing.T, c *testCluster) {
	c.stopProxy(0)
	c.startProxy(0)
	for _, user := range []string{"postgres", trustedRole} {
		if err := relayedLogin(c, user, ""); err != nil {
			t.Fatalf("%s with --allow-passwordless-logins: %v", user, err)
		}
	}
	if err := relayedLogin(c, scramRole, "wrong"); sqlState(err) != "28P01" {
		t.Fatalf("%s with a wrong password after the opt-in: %v, want 28P01", scramRole, err)
	}
}
