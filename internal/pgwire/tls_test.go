package pgwire

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// testCert writes a self-signed certificate for 127.0.0.1 and localhost:
// the test's CA and the proxy's certificate at once.
func testCert(t *testing.T, hosts ...string) (cert, key string) {
	t.Helper()
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	if err := WriteSelfSignedCert(cert, key, hosts); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func tlsProxy(t *testing.T, hosts ...string) (p *testProxy, caFile string) {
	t.Helper()
	cert, key := testCert(t, hosts...)
	tlsCfg, err := LoadTLSConfig(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pg := postgresForTest(t)
	return startProxy(t, Config{BackendAddr: pg.addr, TLS: tlsCfg}), cert
}

func tlsURL(p *testProxy, params string) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?%s", p.addr, params)
}

// pgxSSL connects with pgx, checks that the client's connection is (or is
// not) encrypted and runs a query.
func pgxSSL(t *testing.T, url string, wantTLS bool) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, encrypted := conn.PgConn().Conn().(*tls.Conn); encrypted != wantTLS {
		return fmt.Errorf("connection encrypted: %v, want %v", encrypted, wantTLS)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		return fmt.Errorf("query over TLS: %d, %v", one, err)
	}
	return nil
}

func TestTLSWithPgx(t *testing.T) {
	p, ca := tlsProxy(t)
	for _, params := range []string{
		"sslmode=require",
		"sslmode=verify-ca&sslrootcert=" + ca,
		"sslmode=verify-full&sslrootcert=" + ca,
	} {
		if err := pgxSSL(t, tlsURL(p, params), true); err != nil {
			t.Fatalf("%s: %v", params, err)
		}
	}
	// A certificate signed by someone else fails verification.
	other, _ := testCert(t)
	if err := pgxSSL(t, tlsURL(p, "sslmode=verify-full&sslrootcert="+other), true); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("verify-full with the wrong CA: %v, want a certificate error", err)
	}
	// verify-full checks the host name too: this certificate names another
	// host; verify-ca, which does not check names, accepts it.
	p2, ca2 := tlsProxy(t, "db.example")
	if err := pgxSSL(t, tlsURL(p2, "sslmode=verify-full&sslrootcert="+ca2), true); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("verify-full with a certificate for another host: %v, want a certificate error", err)
	}
	if err := pgxSSL(t, tlsURL(p2, "sslmode=verify-ca&sslrootcert="+ca2), true); err != nil {
		t.Fatalf("verify-ca: %v", err)
	}
}

func TestTLSWithPsql(t *testing.T) {
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql is needed (apt-get install postgresql-client-15): %v", err)
	}
	p, ca := tlsProxy(t)
	host, port, _ := strings.Cut(p.addr, ":")
	for _, mode := range []string{"require", "verify-full"} {
		cmd := exec.Command(psql, "-X", "-A", "-t", "-h", host, "-p", port, "-U", "postgres", "-d", "postgres",
			"-c", `\conninfo`, "-c", "SELECT 42")
		cmd.Env = append(os.Environ(), "PGSSLMODE="+mode, "PGSSLROOTCERT="+ca, "PGCONNECT_TIMEOUT=10")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("psql sslmode=%s: %v\n%s", mode, err, out)
		}
		if !strings.Contains(string(out), "SSL connection (protocol: TLSv1.3") || !strings.Contains(string(out), "42") {
			t.Fatalf("psql sslmode=%s did not run over TLS:\n%s", mode, out)
		}
	}
}

// Without a certificate the proxy answers an SSLRequest with 'N', as a
// PostgreSQL with ssl=off: sslmode=prefer goes on in clear text,
// sslmode=require gives up.
func TestTLSOffDeclinesSSLRequest(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr})
	if err := pgxSSL(t, tlsURL(p, "sslmode=prefer"), false); err != nil {
		t.Fatalf("sslmode=prefer without TLS: %v", err)
	}
	err := pgxSSL(t, tlsURL(p, "sslmode=require"), true)
	if err == nil || !strings.Contains(err.Error(), "server refused TLS connection") {
		t.Fatalf("sslmode=require without TLS: %v, want pgx's 'server refused TLS connection'", err)
	}
}
