package pgwire

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// pgAuthidLookup reads verifiers from pg_authid, as the proxy does over
// its admin connection.
func pgAuthidLookup(t *testing.T, pg *testPG, lookups *atomic.Int32) SCRAMLookup {
	admin := connect(t, pg.directURL("postgres", ""))
	return func(ctx context.Context, user string) (string, bool, error) {
		lookups.Add(1)
		var v *string
		err := admin.QueryRow(ctx, `SELECT rolpassword FROM pg_authid WHERE rolname = $1 AND rolcanlogin`, user).Scan(&v)
		if err == pgx.ErrNoRows || (err == nil && v == nil) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		return *v, true, nil
	}
}

// scramProxy authenticates clients itself and reaches PostgreSQL over its
// Unix socket, which pg_hba.conf trusts (local all all trust). It does not
// allow passwordless logins: that refusal is for relayed logins only, and
// here the proxy verified the client itself.
func scramProxy(t *testing.T) (*testProxy, *atomic.Int32) {
	pg := postgresForTest(t)
	var lookups atomic.Int32
	socket := filepath.Join(pg.dir, fmt.Sprintf(".s.PGSQL.%d", pg.port))
	return serveProxy(t, Config{BackendAddr: socket, SCRAM: pgAuthidLookup(t, pg, &lookups)}), &lookups
}

func TestSCRAMAtTheProxy(t *testing.T) {
	p, lookups := scramProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("right password", func(t *testing.T) {
		conn := connect(t, p.url(scramUser, scramPassword))
		var who string
		if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != scramUser {
			t.Fatalf("current_user = %q, %v", who, err)
		}
		if lookups.Load() == 0 {
			t.Fatal("the proxy never looked up the verifier: it did not authenticate the client itself")
		}
	})
	for _, c := range []struct{ name, user, password string }{
		{"wrong password", scramUser, scramPassword + "x"},
		{"unknown user", "nobody", "whatever"},
		// md5user has an md5 hash, which SCRAM cannot use: refused like a
		// wrong password.
		{"user without a SCRAM verifier", md5User, md5Password},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, p.url(c.user, c.password))
			if err == nil {
				conn.Close(ctx)
				t.Fatal("connected")
			}
			want := fmt.Sprintf("password authentication failed for user %q", c.user)
			if pgCode(err) != CodeInvalidPassword || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want SQLSTATE 28P01 %s", err, want)
			}
		})
	}
	t.Run("psql", func(t *testing.T) {
		host, port, _ := strings.Cut(p.addr, ":")
		out, err := psqlAs(t, host, port, scramUser, scramPassword, "SELECT current_user")
		if err != nil || !strings.Contains(out, scramUser) {
			t.Fatalf("psql: %v\n%s", err, out)
		}
		out, err = psqlAs(t, host, port, scramUser, "wrong", "SELECT 1")
		if err == nil || !strings.Contains(out, "password authentication failed") {
			t.Fatalf("psql with a wrong password: %v\n%s", err, out)
		}
	})
}

// PostgreSQL asks the proxy itself for SCRAM-SHA-256 (pg_hba.conf:
// scram-sha-256 for scramuser over TCP): the proxy answers with the
// ClientKey the client's proof revealed, and checks PostgreSQL's
// signature. A user PostgreSQL asks for a cleartext password (clearuser:
// "password" in pg_hba.conf) is refused with 28000: the proxy has no
// password to give.
func TestSCRAMPassThroughToBackend(t *testing.T) {
	pg := postgresForTest(t)
	var lookups atomic.Int32
	p := serveProxy(t, Config{BackendAddr: pg.addr, SCRAM: pgAuthidLookup(t, pg, &lookups)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn := connect(t, p.url(scramUser, scramPassword))
	var who string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != scramUser {
		t.Fatalf("current_user = %q, %v", who, err)
	}
	if _, err := pgx.Connect(ctx, p.url(scramUser, "wrong")); pgCode(err) != CodeInvalidPassword {
		t.Fatalf("wrong password: %v, want 28P01", err)
	}
	_, err := pgx.Connect(ctx, p.url(clearUser, clearPassword))
	if pgCode(err) != "28000" || !strings.Contains(err.Error(), "cannot authenticate to PostgreSQL") {
		t.Fatalf("backend asking for a cleartext password: %v, want 28000", err)
	}
}

// A client that answers SCRAM with garbage gets a protocol error, and the
// proxy does not crash (xdg-go/scram indexes the GS2 header unchecked).
func TestSCRAMMalformedMessages(t *testing.T) {
	p, _ := scramProxy(t)
	for _, data := range []string{"", ",,,", "p=tls-server-end-point,,n=,r=abc"} {
		t.Run(fmt.Sprintf("%q", data), func(t *testing.T) {
			c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fe := pgproto3.NewFrontend(c, c)
			fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
				Parameters: map[string]string{"user": scramUser, "database": "postgres"}})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			msg, err := fe.Receive()
			if _, ok := msg.(*pgproto3.AuthenticationSASL); !ok || err != nil {
				t.Fatalf("got %T %v, want AuthenticationSASL", msg, err)
			}
			fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: scramMechanism, Data: []byte(data)})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			msg, err = fe.Receive()
			er, ok := msg.(*pgproto3.ErrorResponse)
			if !ok || err != nil || er.Code != "08P01" {
				t.Fatalf("got %#v %v, want ErrorResponse 08P01", msg, err)
			}
		})
	}
}

func TestParseSCRAMVerifier(t *testing.T) {
	good := "SCRAM-SHA-256$4096:c2FsdHNhbHQ=$c3RvcmVk:c2VydmVy"
	cred, err := ParseSCRAMVerifier(good)
	if err != nil || cred.Iters != 4096 || cred.Salt != "saltsalt" || string(cred.StoredKey) != "stored" || string(cred.ServerKey) != "server" {
		t.Fatalf("%+v %v", cred, err)
	}
	for _, bad := range []string{"", "md5abc", "SCRAM-SHA-256$x:c2FsdA==$a:b", "SCRAM-SHA-256$4096:c2FsdA==", "SCRAM-SHA-256$4096:!!$c3RvcmVk:c2VydmVy"} {
		if _, err := ParseSCRAMVerifier(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func psqlAs(t *testing.T, host, port, user, password, sql string) (string, error) {
	t.Helper()
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql is needed (apt-get install postgresql-client-15): %v", err)
	}
	cmd := exec.Command(psql, "-X", "-A", "-t", "-h", host, "-p", port, "-U", user, "-d", "postgres", "-c", sql)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+password, "PGCONNECT_TIMEOUT=10", "PGSSLMODE=disable")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
