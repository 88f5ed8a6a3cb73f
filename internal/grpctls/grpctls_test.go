package grpctls_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tashkent-db/tashkent/internal/certs"
	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// pki is a CA and certificates it issued, in a temporary directory.
type pki struct {
	t   *testing.T
	dir string
	ca  string // CA certificate
	key string // CA key
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, dir: dir, ca: filepath.Join(dir, "ca.crt"), key: filepath.Join(dir, "ca.key")}
	if err := certs.WriteCA(p.ca, p.key, name+" CA"); err != nil {
		t.Fatal(err)
	}
	return p
}

// files issues a certificate for hosts and returns the Files of it.
func (p *pki) files(name string, hosts ...string) grpctls.Files {
	p.t.Helper()
	f := grpctls.Files{CA: p.ca, Cert: filepath.Join(p.dir, name+".crt"), Key: filepath.Join(p.dir, name+".key")}
	if err := certs.Issue(p.ca, p.key, f.Cert, f.Key, name, hosts); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// serve starts a gRPC server (the health service stands in for the
// certifier's) with f's server options and returns its address and log.
func serve(t *testing.T, f grpctls.Files) (string, *testbin.Output) {
	t.Helper()
	logs := &testbin.Output{}
	opts, err := f.ServerOptions(slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String(), logs
}

// check makes one call to addr with dial.
func check(t *testing.T, addr string, dial grpc.DialOption) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func dialOf(t *testing.T, f grpctls.Files) grpc.DialOption {
	t.Helper()
	d, err := f.DialOption()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustContain(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Fatalf("%s does not say %q:\n%s", what, w, s)
		}
	}
}

// waitLog waits for the server's log line: it is written by the server's
// handshake goroutine, possibly after the client has its error.
func waitLog(t *testing.T, logs *testbin.Output, wants ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := logs.String()
		ok := true
		for _, w := range wants {
			ok = ok && strings.Contains(s, w)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			mustContain(t, "the server's log", s, wants...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMutualTLSWorks(t *testing.T) {
	p := newPKI(t, "cluster")
	addr, logs := serve(t, p.files("certifier", "127.0.0.1", "localhost"))
	if err := check(t, addr, dialOf(t, p.files("agent", "127.0.0.1"))); err != nil {
		t.Fatalf("mutual TLS call failed: %v", err)
	}
	// The DNS SAN is checked as well as the IP SAN.
	_, port, _ := net.SplitHostPort(addr)
	if err := check(t, "localhost:"+port, dialOf(t, p.files("agent2"))); err != nil {
		t.Fatalf("mutual TLS call by name failed: %v", err)
	}
	if strings.Contains(logs.String(), "refused") {
		t.Fatalf("the server refused a good client:\n%s", logs)
	}
}

func TestNoFlagsIsPlaintext(t *testing.T) {
	addr, _ := serve(t, grpctls.Files{})
	if err := check(t, addr, dialOf(t, grpctls.Files{})); err != nil {
		t.Fatalf("plaintext call failed: %v", err)
	}
}

func TestClientWithoutCertificateIsRefused(t *testing.T) {
	p := newPKI(t, "cluster")
	addr, logs := serve(t, p.files("certifier", "127.0.0.1"))
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(p.ca)
	pool.AppendCertsFromPEM(pem)
	noCert := grpc.WithTransportCredentials(grpctls.ClientCredentials(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))
	err := check(t, addr, noCert)
	if err == nil {
		t.Fatal("a client without a certificate was served")
	}
	mustContain(t, "the client's error", err.Error(), "missing client certificate", "--certifier-tls-cert")
	waitLog(t, logs, "refused a connection", "missing client certificate")
}

func TestClientCertificateOfAnotherCAIsRefused(t *testing.T) {
	p, other := newPKI(t, "cluster"), newPKI(t, "other")
	addr, logs := serve(t, p.files("certifier", "127.0.0.1"))
	// The intruder trusts the cluster's CA but has a certificate of its
	// own CA.
	f := other.files("intruder", "127.0.0.1")
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(p.ca)
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
	err = check(t, addr, grpc.WithTransportCredentials(grpctls.ClientCredentials(cfg)))
	if err == nil {
		t.Fatal("a client with another CA's certificate was served")
	}
	mustContain(t, "the client's error", err.Error(), "unknown CA", "refused this client's certificate")
	waitLog(t, logs, "refused a connection", "unknown CA")
}

func TestServerOfAnotherCAIsRefused(t *testing.T) {
	p, other := newPKI(t, "cluster"), newPKI(t, "other")
	addr, logs := serve(t, other.files("certifier", "127.0.0.1"))
	err := check(t, addr, dialOf(t, p.files("agent", "127.0.0.1")))
	if err == nil {
		t.Fatal("a certifier of another CA was trusted")
	}
	mustContain(t, "the client's error", err.Error(), "unknown CA", "certifier's certificate is not signed")
	waitLog(t, logs, "refused a connection", "the client refused this certifier's certificate")
}

func TestWrongSANIsRefused(t *testing.T) {
	p := newPKI(t, "cluster")
	addr, _ := serve(t, p.files("certifier", "10.9.9.9", "certifier.example"))
	err := check(t, addr, dialOf(t, p.files("agent", "127.0.0.1")))
	if err == nil {
		t.Fatal("a certifier certificate for another address was accepted")
	}
	mustContain(t, "the client's error", err.Error(), "bad SAN", "127.0.0.1")
}

func TestPlaintextClientIsLogged(t *testing.T) {
	p := newPKI(t, "cluster")
	addr, logs := serve(t, p.files("certifier", "127.0.0.1"))
	err := check(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		t.Fatal("a plaintext client was served by a TLS certifier")
	}
	mustContain(t, "the hinted client's error", grpctls.HintPlaintext(err).Error(), "hint: a certifier with TLS", "--certifier-tls-ca")
	waitLog(t, logs, "refused a connection", "the client speaks plaintext")
}

func TestTLSClientOfPlaintextServerIsExplained(t *testing.T) {
	p := newPKI(t, "cluster")
	addr, _ := serve(t, grpctls.Files{})
	err := check(t, addr, dialOf(t, p.files("agent", "127.0.0.1")))
	if err == nil {
		t.Fatal("a TLS client talked to a plaintext server")
	}
	mustContain(t, "the client's error", err.Error(), "certifier TLS handshake", "the certifier does not speak TLS")
}

func TestHalfConfiguredIsRefused(t *testing.T) {
	p := newPKI(t, "cluster")
	full := p.files("agent", "127.0.0.1")
	for _, f := range []grpctls.Files{
		{Cert: full.Cert},                // a certificate without a key
		{Key: full.Key, Cert: full.Cert}, // a key without a CA
		{CA: full.CA},                    // a CA alone
		{CA: full.CA, Cert: full.Cert},   // no key
	} {
		err := f.Check()
		if err == nil {
			t.Fatalf("%+v: accepted", f)
		}
		mustContain(t, "the error", err.Error(), "half configured", "--certifier-tls-")
		if _, err := f.DialOption(); err == nil {
			t.Fatalf("%+v: DialOption accepted it", f)
		}
		if _, err := f.ServerOptions(nil); err == nil {
			t.Fatalf("%+v: ServerOptions accepted it", f)
		}
	}
	if err := full.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestCertificateOfAnotherCAIsRefusedAtStartUp(t *testing.T) {
	p, other := newPKI(t, "cluster"), newPKI(t, "other")
	f := other.files("agent", "127.0.0.1")
	f.CA = p.ca
	_, err := f.DialOption()
	if err == nil {
		t.Fatal("a certificate of another CA was loaded")
	}
	mustContain(t, "the error", err.Error(), "is not signed by the CA")
}

func TestKeysAreOwnerOnly(t *testing.T) {
	p := newPKI(t, "cluster")
	f := p.files("agent", "127.0.0.1")
	for _, k := range []string{p.key, f.Key} {
		st, err := os.Stat(k)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %o, want 600", k, st.Mode().Perm())
		}
	}
}

func TestArgsRoundTrip(t *testing.T) {
	f := grpctls.Files{CA: "a", Cert: "b", Key: "c"}
	got := strings.Join(f.Args(), " ")
	if got != "--certifier-tls-ca a --certifier-tls-cert b --certifier-tls-key c" {
		t.Fatal(got)
	}
	if len(grpctls.Files{}.Args()) != 0 {
		t.Fatal("plaintext has flags")
	}
}
