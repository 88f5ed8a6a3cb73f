package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certs"
	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// TestCertifierTLSGroupEndToEnd: `tashkent up --certifier-tls --certifiers
// 3` runs a certifier group and a replica with its agent, with mutual TLS
// on every certifier channel. The members elect a leader over
// TLS (Raft among members), a write on the replica commits (agent to
// leader), a Fetch streams it back, and status sees the group. Clients
// without a client certificate, with a certificate of another CA, that
// dial a name the certifier's certificate does not carry, or that speak
// plaintext are refused with their cause named, on the client's side and
// in the member's log.
func TestCertifierTLSGroupEndToEnd(t *testing.T) {
	bin := testbin.Path(t)
	dir := newClusterDir(t, "tashkent-tls-test-")
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	st, err := cluster.Up(ctx, cluster.Options{Dir: dir, Replicas: 1, Certifiers: 3, Binary: bin, CertifierTLS: true})
	t.Cleanup(func() { cluster.Down(context.Background(), dir) }) // by recorded PID
	if err != nil {
		t.Fatal(err)
	}
	checkTLSFiles(t, dir)
	leader := waitTLSLeader(t, st)

	// Agent -> leader over TLS: a write commits, with a version.
	before := certifierVersion(t, st)
	setupTable(t, st)
	conn, err := pgx.Connect(ctx, st.Replicas[0].DSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO rows VALUES (1, 42)"); err != nil {
		t.Fatalf("a write on the replica did not commit: %v", err)
	}
	conn.Close(ctx)
	if after := certifierVersion(t, st); after <= before {
		t.Fatalf("the certifier's version did not move (%d then %d): the write was not certified", before, after)
	}

	// Fetch over TLS from a follower: every member serves its log.
	follower := ""
	for _, m := range st.CertifierMembers() {
		if a := tlsMemberAddr(m); a != leader {
			follower = a
			break
		}
	}
	if n := fetchEntries(t, follower, adminDial(t, st)); n == 0 {
		t.Fatal("Fetch over TLS streamed no entry")
	}

	out := mustRun(t, bin, "status", "--data-dir", dir)
	if !strings.Contains(out, "leader") || strings.Contains(out, "unreachable") {
		t.Fatalf("tashkent status does not see the group over TLS:\n%s", out)
	}
	admin := st.AdminTLSFiles()
	out = mustRun(t, bin, append([]string{"certifier", "members", "--certifier", leader}, admin.Args()...)...)
	if strings.Count(out, "follower") != 2 || strings.Count(out, "leader") < 1 {
		t.Fatalf("tashkent certifier members over TLS does not list the group:\n%s", out)
	}
	out, _ = run(t, bin, "certifier", "members", "--certifier", leader)
	if !strings.Contains(out, "unreachable") || !strings.Contains(out, "hint: a certifier with TLS") {
		t.Fatalf("tashkent certifier members without TLS flags reached a TLS member:\n%s", out)
	}

	refusals(t, st, leader)
	halfConfigured(t, bin)
	restartFollowerOverTLS(t, st, bin, leader)
}

// halfConfigured: a certifier or an agent given part of the TLS flags
// refuses to start, naming what is missing.
func halfConfigured(t *testing.T, bin string) {
	t.Helper()
	crt := filepath.Join(t.TempDir(), "x.crt")
	for _, args := range [][]string{
		{"certifier", "--data-dir", t.TempDir(), "--metrics-listen", "", "--certifier-tls-cert", crt},
		{"agent", "--name", "r", "--postgres", "host=127.0.0.1 port=1", "--certifier-tls-key", crt},
	} {
		out, err := run(t, bin, args...)
		if err == nil || !strings.Contains(out, "certifier TLS is half configured") || !strings.Contains(out, "--certifier-tls-ca") {
			t.Fatalf("tashkent %s with half the TLS flags: err %v\n%s", args[0], err, out)
		}
	}
}

// restartFollowerOverTLS: kill -9 of a follower and `up` again restarts
// it with its recorded certificate; it rejoins the group over TLS and
// catches up.
func restartFollowerOverTLS(t *testing.T, st *cluster.State, bin, leader string) {
	t.Helper()
	var follower *cluster.Certifier
	for _, m := range st.CertifierMembers() {
		if tlsMemberAddr(m) != leader {
			follower = m
			break
		}
	}
	if err := syscall.Kill(follower.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	process.WaitGone(context.Background(), follower.PID, 5*time.Second)
	if _, err := cluster.Up(context.Background(), cluster.Options{Dir: st.Dir, Binary: bin}); err != nil {
		t.Fatalf("up after kill -9 of a follower: %v", err)
	}
	want := certifierVersion(t, st)
	var rep *pb.StatusReply
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var err error
		rep, err = st.QueryCertifier(ctx, tlsMemberAddr(follower))
		cancel()
		if err == nil && rep.Role == "follower" && rep.DurableVersion >= want {
			return
		}
	}
	t.Fatalf("the restarted follower did not rejoin over TLS at version %d: %+v", want, rep)
}

// refusals: every kind of bad client is refused with its cause named.
func refusals(t *testing.T, st *cluster.State, addr string) {
	admin := st.AdminTLSFiles()
	pair, err := tls.LoadX509KeyPair(admin.Cert, admin.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := caPool(t, admin.CA)
	other := otherCAFiles(t)
	otherPair, err := tls.LoadX509KeyPair(other.Cert, other.Key)
	if err != nil {
		t.Fatal(err)
	}
	present := func(c tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	creds := func(cfg *tls.Config) grpc.DialOption {
		cfg.MinVersion = tls.VersionTLS13
		return grpc.WithTransportCredentials(grpctls.ClientCredentials(cfg))
	}
	for _, c := range []struct {
		name      string
		dial      []grpc.DialOption
		client    string // the client's error says
		memberLog string // the member's log says
	}{
		{"no client certificate", []grpc.DialOption{creds(&tls.Config{RootCAs: roots})},
			"missing client certificate", "missing client certificate"},
		{"client certificate of another CA", []grpc.DialOption{creds(&tls.Config{RootCAs: roots, GetClientCertificate: present(otherPair)})},
			"unknown CA", "unknown CA: the client's certificate is not signed"},
		{"certifier of another CA", []grpc.DialOption{mustDial(t, other)},
			"unknown CA: the certifier's certificate", "the client refused this certifier's certificate"},
		{"wrong SAN", []grpc.DialOption{creds(&tls.Config{RootCAs: roots, GetClientCertificate: present(pair)}), grpc.WithAuthority("certifier.example:1")},
			"bad SAN", "the client refused this certifier's certificate"},
		{"plaintext client", []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
			"", "the client speaks plaintext"},
	} {
		_, err := tlsStatus(addr, c.dial...)
		if err == nil {
			t.Fatalf("%s: served", c.name)
		}
		if !strings.Contains(err.Error(), c.client) {
			t.Fatalf("%s: the client's error does not say %q: %v", c.name, c.client, err)
		}
		t.Logf("%s: %v", c.name, err)
		waitMemberLog(t, st, addr, c.memberLog)
	}
}

func tlsStatus(addr string, dial ...grpc.DialOption) (*pb.StatusReply, error) {
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pb.NewCertifierClient(conn).Status(ctx, &pb.StatusRequest{})
}

func tlsMemberAddr(c *cluster.Certifier) string { return "127.0.0.1:" + strconv.Itoa(c.Port) }

func adminDial(t *testing.T, st *cluster.State) []grpc.DialOption {
	t.Helper()
	d, err := st.CertifierDialOptions()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustDial(t *testing.T, f grpctls.Files) grpc.DialOption {
	t.Helper()
	d, err := f.DialOption()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func caPool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no certificate", path)
	}
	return p
}

// otherCAFiles are a CA and a certificate for 127.0.0.1 that have nothing
// to do with the cluster's.
func otherCAFiles(t *testing.T) grpctls.Files {
	t.Helper()
	d := t.TempDir()
	f := grpctls.Files{CA: filepath.Join(d, "ca.crt"), Cert: filepath.Join(d, "x.crt"), Key: filepath.Join(d, "x.key")}
	if err := certs.WriteCA(f.CA, filepath.Join(d, "ca.key"), "another CA"); err != nil {
		t.Fatal(err)
	}
	if err := certs.Issue(f.CA, filepath.Join(d, "ca.key"), f.Cert, f.Key, "intruder", []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	return f
}

// checkTLSFiles: the CA and a certificate per process, keys for the owner
// only, recorded in cluster.json.
func checkTLSFiles(t *testing.T, dir string) {
	t.Helper()
	st, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.CertifierTLS == nil {
		t.Fatal("cluster.json does not record the certifier TLS")
	}
	for _, name := range []string{"ca", "admin", "certifier-1", "certifier-2", "certifier-3", "replica1"} {
		key := filepath.Join(st.CertifierTLS.Dir, name+".key")
		fi, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %o, not 600", key, fi.Mode().Perm())
		}
	}
}

// waitTLSLeader waits for the group to elect a leader (its members talk
// Raft over TLS) and returns the leader's address.
func waitTLSLeader(t *testing.T, st *cluster.State) string {
	t.Helper()
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, m := range st.CertifierMembers() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			rep, err := st.QueryCertifier(ctx, tlsMemberAddr(m))
			cancel()
			if err != nil {
				last = err
				continue
			}
			if rep.Role == "leader" {
				return tlsMemberAddr(m)
			}
		}
	}
	t.Fatalf("no leader elected over TLS within 20 s (last error: %v)", last)
	return ""
}

func certifierVersion(t *testing.T, st *cluster.State) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := st.QueryCertifier(ctx, st.CertifierAddr())
	if err != nil {
		t.Fatal(err)
	}
	return rep.DurableVersion
}

// fetchEntries counts the entries a Fetch from version 0 streams.
func fetchEntries(t *testing.T, addr string, dial []grpc.DialOption) int {
	t.Helper()
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := pb.NewCertifierClient(conn).Fetch(ctx, &pb.FetchRequest{AfterVersion: 0})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		r, err := s.Recv()
		if err != nil {
			if n == 0 {
				t.Fatalf("Fetch over TLS: %v", err)
			}
			return n
		}
		n += len(r.Entries)
	}
}

// waitMemberLog waits for a line in the log of the member at addr.
func waitMemberLog(t *testing.T, st *cluster.State, addr, want string) {
	t.Helper()
	var logPath string
	for _, m := range st.CertifierMembers() {
		if tlsMemberAddr(m) == addr {
			logPath = m.Log
		}
	}
	var b []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, _ = os.ReadFile(logPath)
		if strings.Contains(string(b), want) {
			return
		}
	}
	t.Fatalf("the member's log %s does not say %q:\n%s", logPath, want, tailLines(string(b), 20))
}
