package pgwire

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/certs"
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
	if err := certs.WriteSelfSigned(cert, key, "tashkent proxy", hosts); err != nil {
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

// writeCAAndLeaf writes a test CA and a server certificate it signed for
// 127.0.0.1 (the server file holds the leaf then the CA, a chain).
func writeCAAndLeaf(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tashkent test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(leafKey)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	pemOf := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	for file, data := range map[string][]byte{
		caFile:   pemOf("CERTIFICATE", caDER),
		certFile: append(pemOf("CERTIFICATE", leafDER), pemOf("CERTIFICATE", caDER)...),
		keyFile:  pemOf("PRIVATE KEY", keyDER),
	} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// A certificate signed by a CA (not self-signed): pgx and psql verify it
// against the CA alone.
func TestTLSWithATestCA(t *testing.T) {
	caFile, certFile, keyFile := writeCAAndLeaf(t)
	tlsCfg, err := LoadTLSConfig(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{BackendAddr: postgresForTest(t).addr, TLS: tlsCfg})
	if err := pgxSSL(t, tlsURL(p, "sslmode=verify-full&sslrootcert="+caFile), true); err != nil {
		t.Fatalf("pgx verify-full: %v", err)
	}
	host, port, _ := strings.Cut(p.addr, ":")
	cmd := exec.Command("psql", "-X", "-A", "-t", "-h", host, "-p", port, "-U", "postgres", "-d", "postgres", "-c", `\conninfo`)
	cmd.Env = append(os.Environ(), "PGSSLMODE=verify-full", "PGSSLROOTCERT="+caFile, "PGCONNECT_TIMEOUT=10")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "SSL connection") {
		t.Fatalf("psql verify-full: %v\n%s", err, out)
	}
}
