package pgwire

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Relayed md5, SCRAM and cleartext logins work without
// AllowPasswordlessLogins: PostgreSQL asked each client for a credential.
func TestAuthenticationRelay(t *testing.T) {
	pg := postgresForTest(t)
	p := serveProxy(t, Config{BackendAddr: pg.addr})

	// The roles really have the password kinds the methods need (an md5 method
	// with a SCRAM verifier would silently do SCRAM).
	admin := connect(t, pg.directURL("postgres", ""))
	var md5Stored, scramStored bool
	if err := admin.QueryRow(context.Background(),
		"SELECT (SELECT rolpassword LIKE 'md5%' FROM pg_authid WHERE rolname = $1), (SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = $2)",
		md5User, scramUser).Scan(&md5Stored, &scramStored); err != nil {
		t.Fatal(err)
	}
	if !md5Stored || !scramStored {
		t.Fatalf("test setup: md5 verifier %v, scram verifier %v", md5Stored, scramStored)
	}

	cases := []struct {
		method, user, password string
	}{
		{"md5", md5User, md5Password},
		{"scram-sha-256", scramUser, scramPassword},
		{"password (cleartext)", clearUser, clearPassword},
	}
	for _, c := range cases {
		t.Run(c.method, func(t *testing.T) {
			t.Run("pgx right password", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				conn, err := pgx.Connect(ctx, p.url(c.user, c.password))
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				defer conn.Close(ctx)
				var who string
				if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != c.user {
					t.Fatalf("current_user = %q, %v", who, err)
				}
			})
			t.Run("pgx wrong password", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				conn, err := pgx.Connect(ctx, p.url(c.user, c.password+"x"))
				if err == nil {
					conn.Close(ctx)
					t.Fatal("connected with a wrong password")
				}
				if pgCode(err) != "28P01" {
					t.Fatalf("wrong password: %v, want SQLSTATE 28P01", err)
				}
			})
			t.Run("psql right password", func(t *testing.T) {
				out := runPsql(t, p.addr, c.user, c.password, "SELECT current_user")
				if strings.TrimSpace(out) != c.user {
					t.Fatalf("psql current_user = %q", out)
				}
			})
			t.Run("psql wrong password", func(t *testing.T) {
				_, errOut, err := psql(p.addr, c.user, "nope", "SELECT 1")
				if err == nil || !strings.Contains(errOut, "password authentication failed for user \""+c.user+"\"") {
					t.Fatalf("psql wrong password: %v, stderr %q", err, errOut)
				}
			})
			t.Run("psql no password", func(t *testing.T) {
				// psql learns that a password is needed, closes, and has none to
				// prompt for (stdin is not a terminal).
				_, errOut, err := psql(p.addr, c.user, "", "-w", "-c", "SELECT 1")
				if err == nil || !strings.Contains(errOut, "password") {
					t.Fatalf("psql without password: %v, stderr %q", err, errOut)
				}
			})
		})
	}

	t.Run("unknown database relays 3D000", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// PostgreSQL authenticates before it looks the database up.
		cfg, _ := pgx.ParseConfig(p.url(scramUser, scramPassword))
		cfg.Database = "no_such_db"
		_, err := pgx.ConnectConfig(ctx, cfg)
		if pgCode(err) != "3D000" {
			t.Fatalf("unknown database: %v, want 3D000", err)
		}
	})

	waitFor(t, "no cancel keys left from failed logins", func() bool { return p.srv.Registry.Len() == 0 })
}
