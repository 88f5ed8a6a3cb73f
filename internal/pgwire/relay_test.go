package pgwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// testProxy is a Serve + Relay proxy in front of a backend.
type testProxy struct {
	addr     string
	srv      *Server
	mu       sync.Mutex
	sessions []*Session
	relayErr chan error // one per finished Relay
}

func (p *testProxy) url(usr, password string) string { return connURL(p.addr, usr, password) }

func (p *testProxy) lastSession(t *testing.T) *Session {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sessions) == 0 {
		t.Fatal("no session was accepted")
	}
	return p.sessions[len(p.sessions)-1]
}

// sessionFor returns the session whose proxy key the client conn got.
func (p *testProxy) sessionFor(t *testing.T, c *pgconn.PgConn) *Session {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.sessions {
		if s.ProxyPID == c.PID() {
			return s
		}
	}
	t.Fatalf("no session with proxy PID %d", c.PID())
	return nil
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startProxy is serveProxy allowing passwordless logins: the tests'
// PostgreSQL trusts most of the proxy's connections (pg_test.go).
func startProxy(t *testing.T, cfg Config) *testProxy {
	t.Helper()
	cfg.AllowPasswordlessLogins = true
	return serveProxy(t, cfg)
}

// serveProxy runs a relaying proxy for cfg on a free loopback port until the
// test ends; the cleanup checks that Serve returned.
func serveProxy(t *testing.T, cfg Config) *testProxy {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &testProxy{addr: ln.Addr().String(), relayErr: make(chan error, 1000)}
	p.srv = &Server{Config: cfg, Registry: NewRegistry(), Handler: func(s *Session) {
		p.mu.Lock()
		p.sessions = append(p.sessions, s)
		p.mu.Unlock()
		p.relayErr <- s.Relay(ctx)
	}}
	served := make(chan error, 1)
	go func() { served <- p.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after its context was cancelled")
		}
	})
	return p
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestRelayQueries(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr})
	conn := connect(t, p.url("postgres", ""))
	ctx := context.Background()

	t.Run("extended query", func(t *testing.T) {
		// pgx uses the extended protocol (Parse/Bind/Describe/Execute/Sync).
		var sum int64
		var txt string
		if err := conn.QueryRow(ctx, "SELECT $1::int8 + $2::int8, $3::text", 40, 2, "héllo").Scan(&sum, &txt); err != nil {
			t.Fatal(err)
		}
		if sum != 42 || txt != "héllo" {
			t.Fatalf("got %d %q", sum, txt)
		}
	})

	t.Run("simple query multi-statement", func(t *testing.T) {
		results, err := conn.PgConn().Exec(ctx, "CREATE TEMP TABLE m (v int); INSERT INTO m VALUES (1), (2); SELECT sum(v) FROM m; DROP TABLE m").ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != 4 {
			t.Fatalf("got %d results, want 4", len(results))
		}
		if tag := results[1].CommandTag.String(); tag != "INSERT 0 2" {
			t.Errorf("INSERT tag = %q", tag)
		}
		if got := string(results[2].Rows[0][0]); got != "3" {
			t.Errorf("sum = %q, want 3", got)
		}
	})

	t.Run("error relay keeps the session usable", func(t *testing.T) {
		_, err := conn.Exec(ctx, "SELECT 1/0")
		if pgCode(err) != "22012" {
			t.Fatalf("SELECT 1/0: %v (code %q), want SQLSTATE 22012", err, pgCode(err))
		}
		_, err = conn.PgConn().Exec(ctx, "SELECT no_such_column FROM pg_class").ReadAll()
		if pgCode(err) != "42703" {
			t.Fatalf("simple query error: %v, want 42703", err)
		}
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
			t.Fatalf("after errors: %v %d", err, one)
		}
	})

	t.Run("transaction status", func(t *testing.T) {
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if st := conn.PgConn().TxStatus(); st != 'T' {
			t.Errorf("TxStatus after BEGIN = %c", st)
		}
		_, _ = conn.Exec(ctx, "SELECT 1/0")
		if st := conn.PgConn().TxStatus(); st != 'E' {
			t.Errorf("TxStatus after error = %c", st)
		}
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("notice relay", func(t *testing.T) {
		var notices []string
		var mu sync.Mutex
		cfg, err := pgconn.ParseConfig(p.url("postgres", ""))
		if err != nil {
			t.Fatal(err)
		}
		cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			notices = append(notices, n.Severity+" "+n.Code+" "+n.Message)
			mu.Unlock()
		}
		c, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DO $$ BEGIN RAISE NOTICE 'hello %', 42; RAISE WARNING 'careful'; END $$").ReadAll(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []string{"NOTICE 00000 hello 42", "WARNING 01000 careful"}
		if fmt.Sprint(notices) != fmt.Sprint(want) {
			t.Fatalf("notices = %q, want %q", notices, want)
		}
	})

	t.Run("copy from stdin and to stdout", func(t *testing.T) {
		if _, err := conn.Exec(ctx, "CREATE TABLE copy_t (id int PRIMARY KEY, v text)"); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec(ctx, "DROP TABLE copy_t")
		var in bytes.Buffer
		const rows = 20000
		for i := 0; i < rows; i++ {
			fmt.Fprintf(&in, "%d\tvalue %d with tab\\tand newline\\n\n", i, i)
		}
		tag, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(in.Bytes()), "COPY copy_t FROM STDIN")
		if err != nil {
			t.Fatal(err)
		}
		if tag.RowsAffected() != rows {
			t.Fatalf("COPY FROM: %d rows", tag.RowsAffected())
		}
		var out bytes.Buffer
		tag, err = conn.PgConn().CopyTo(ctx, &out, "COPY (SELECT * FROM copy_t ORDER BY id) TO STDOUT")
		if err != nil {
			t.Fatal(err)
		}
		if tag.RowsAffected() != rows || !bytes.Equal(out.Bytes(), in.Bytes()) {
			t.Fatalf("COPY TO: %d rows, %d bytes; want %d rows, %d identical bytes", tag.RowsAffected(), out.Len(), rows, in.Len())
		}
		// A failing COPY FROM (bad data) reports the server's error and the
		// session goes on.
		_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader("notanumber\tx\n"), "COPY copy_t FROM STDIN")
		if pgCode(err) != "22P02" {
			t.Fatalf("bad COPY: %v, want 22P02", err)
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM copy_t").Scan(&n); err != nil || n != rows {
			t.Fatalf("count after failed COPY: %d, %v", n, err)
		}
	})

	t.Run("large result", func(t *testing.T) {
		rows, err := conn.Query(ctx, "SELECT g, repeat('x', 100) FROM generate_series(1, 100000) g")
		if err != nil {
			t.Fatal(err)
		}
		var n, sum int64
		for rows.Next() {
			var g int64
			var s string
			if err := rows.Scan(&g, &s); err != nil {
				t.Fatal(err)
			}
			if len(s) != 100 {
				t.Fatalf("row %d: %d bytes", g, len(s))
			}
			n++
			sum += g
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if n != 100000 || sum != 100000*100001/2 {
			t.Fatalf("got %d rows, sum %d", n, sum)
		}
	})

	t.Run("large message", func(t *testing.T) {
		// A 20 MB parameter and result: one message each way.
		big := strings.Repeat("y", 20<<20)
		var l int
		if err := conn.QueryRow(ctx, "SELECT length($1::text)", big).Scan(&l); err != nil || l != len(big) {
			t.Fatalf("length = %d, %v", l, err)
		}
		var back string
		if err := conn.QueryRow(ctx, "SELECT repeat('z', 20 << 20)").Scan(&back); err != nil || len(back) != 20<<20 {
			t.Fatalf("got %d bytes, %v", len(back), err)
		}
	})

	t.Run("keys are the proxy's", func(t *testing.T) {
		var realPID uint32
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&realPID); err != nil {
			t.Fatal(err)
		}
		s := p.sessionFor(t, conn.PgConn())
		if s.BackendPID != realPID {
			t.Errorf("Session.BackendPID = %d, backend says %d", s.BackendPID, realPID)
		}
		if got := conn.PgConn().PID(); got == realPID {
			t.Errorf("client got PID %d, want the proxy's %d (backend %d)", got, s.ProxyPID, realPID)
		}
		if got := conn.PgConn().SecretKey(); len(got) != 4 {
			t.Errorf("client got a %d-byte secret", len(got))
		}
		if be, ok := p.srv.Registry.Lookup(s.Key()); !ok || be.ProcessID != realPID || be.Addr != pg.addr {
			t.Errorf("registry: %+v %v", be, ok)
		}
		if s.ServerParams["server_version"] == "" || !strings.HasPrefix(s.ServerParams["server_version"], "15") {
			t.Errorf("ServerParams[server_version] = %q", s.ServerParams["server_version"])
		}
		if s.Params["user"] != "postgres" || s.Params["database"] != "postgres" {
			t.Errorf("Params = %v", s.Params)
		}
	})
}

func TestRelayEndsAndUnregisters(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr})
	base := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		c, err := pgx.Connect(context.Background(), p.url("postgres", ""))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(context.Background()); err != nil { // sends Terminate
			t.Fatal(err)
		}
		select {
		case err := <-p.relayErr:
			if err != nil {
				t.Fatalf("Relay after client Terminate = %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Relay did not end after the client terminated")
		}
	}
	waitFor(t, "cancel keys unregistered", func() bool { return p.srv.Registry.Len() == 0 })
	waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })

	// The backend ends the session: pg_terminate_backend from another connection.
	c := connect(t, p.url("postgres", ""))
	var pid int
	if err := c.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	admin := connect(t, pg.directURL("postgres", ""))
	if _, err := admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.relayErr:
		if !errors.Is(err, ErrBackendClosed) {
			t.Fatalf("Relay after pg_terminate_backend = %v, want ErrBackendClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Relay did not end after the backend was terminated")
	}
	_, err := c.Exec(context.Background(), "SELECT 1")
	if err == nil {
		t.Fatal("query on a terminated session succeeded")
	}
	if code := pgCode(err); code != "" && code != "57P01" {
		t.Fatalf("error after termination: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("timed out waiting for %s; goroutines:\n%s", what, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartupParamsOverride(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr, StartupParams: map[string]string{
		"default_transaction_isolation": "repeatable read",
	}})
	ctx := context.Background()

	cfg, err := pgx.ParseConfig(p.url("postgres", ""))
	if err != nil {
		t.Fatal(err)
	}
	// The client asks for serializable and an application_name: the proxy's
	// parameter wins, the client's other parameters pass through.
	cfg.RuntimeParams["default_transaction_isolation"] = "serializable"
	cfg.RuntimeParams["application_name"] = "relay-test"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var iso, app string
	if err := conn.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&iso); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SHOW application_name").Scan(&app); err != nil {
		t.Fatal(err)
	}
	if iso != "repeatable read" || app != "relay-test" {
		t.Fatalf("default_transaction_isolation = %q, application_name = %q", iso, app)
	}
	if got := p.lastSession(t).Params["default_transaction_isolation"]; got != "serializable" {
		t.Errorf("Session.Params keeps the client's own value; got %q", got)
	}

	// psql too (simple protocol, sslmode=prefer so it first sends SSLRequest).
	out := runPsql(t, p.addr, "postgres", "", "SHOW default_transaction_isolation")
	if strings.TrimSpace(out) != "repeatable read" {
		t.Fatalf("psql: %q", out)
	}
}

func TestCancelThroughProxy(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr})
	conn := connect(t, p.url("postgres", ""))
	ctx := context.Background()

	t.Run("CancelRequest", func(t *testing.T) {
		errc := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := conn.PgConn().Exec(ctx, "SELECT pg_sleep(10)").ReadAll()
			errc <- err
		}()
		time.Sleep(300 * time.Millisecond) // let the query start
		if err := conn.PgConn().CancelRequest(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if pgCode(err) != "57014" {
				t.Fatalf("cancelled query: %v, want SQLSTATE 57014", err)
			}
			if d := time.Since(start); d > 1300*time.Millisecond {
				t.Fatalf("cancel took %v", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("query was not cancelled")
		}
		var one int
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatalf("session after cancel: %v", err)
		}
	})

	t.Run("context cancellation", func(t *testing.T) {
		qctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := conn.Exec(qctx, "SELECT pg_sleep(10)")
		if err == nil {
			t.Fatal("pg_sleep(10) was not interrupted")
		}
		if d := time.Since(start); d > 1300*time.Millisecond {
			t.Fatalf("cancellation took %v", d)
		}
	})

	t.Run("unknown key is ignored", func(t *testing.T) {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// CancelRequest: length 16, code 80877102, pid, secret.
		msg := []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := io.Copy(io.Discard, c)
		if err != nil || n != 0 {
			t.Fatalf("unknown cancel key: read %d bytes, %v; want a silent close", n, err)
		}
	})
}

// runPsql runs psql against addr and returns its stdout; it fails the test on a
// non-zero exit.
func runPsql(t *testing.T, addr, usr, password string, args ...string) string {
	t.Helper()
	out, errOut, err := psql(addr, usr, password, args...)
	if err != nil {
		t.Fatalf("psql %v: %v\n%s", args, err, errOut)
	}
	return out
}

// psql runs /usr/bin/psql; a single argument without a leading '-' is a -c command.
func psql(addr, usr, password string, args ...string) (stdout, stderr string, err error) {
	return psqlEnv(addr, usr, password, nil, args...)
}

func psqlEnv(addr, usr, password string, env []string, args ...string) (stdout, stderr string, err error) {
	host, port, _ := net.SplitHostPort(addr)
	if len(args) == 1 && !strings.HasPrefix(args[0], "-") {
		args = []string{"-c", args[0]}
	}
	full := append([]string{"-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", port, "-U", usr, "-d", "postgres"}, args...)
	cmd := exec.Command("/usr/bin/psql", full...)
	cmd.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10", "PGSSLMODE=prefer")
	if password != "" {
		cmd.Env = append(cmd.Env, "PGPASSWORD="+password)
	} else {
		cmd.Env = append(cmd.Env, "PGPASSWORD=")
	}
	cmd.Env = append(cmd.Env, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Stdin = strings.NewReader("")
	err = cmd.Run()
	return o.String(), e.String(), err
}

func TestPsqlThroughProxy(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr})
	out := runPsql(t, p.addr, "postgres", "", "SELECT 6 * 7; SELECT 'two'")
	if out != "42\ntwo\n" {
		t.Fatalf("psql multi-statement output %q", out)
	}
	// COPY through psql: \copy uses COPY FROM STDIN / TO STDOUT.
	runPsql(t, p.addr, "postgres", "", "CREATE TABLE psql_copy (a int, b text)")
	defer runPsql(t, p.addr, "postgres", "", "DROP TABLE psql_copy")
	host, port, _ := net.SplitHostPort(p.addr)
	cmd := exec.Command("/usr/bin/psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", host, "-p", port, "-U", "postgres", "-d", "postgres",
		"-c", "COPY psql_copy FROM STDIN WITH (FORMAT csv)")
	cmd.Stdin = strings.NewReader("1,one\n2,two\n3,\"th,ree\"\n")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "COPY 3") {
		t.Fatalf("psql COPY FROM STDIN: %v %s", err, out)
	}
	out = runPsql(t, p.addr, "postgres", "", "COPY (SELECT * FROM psql_copy ORDER BY a) TO STDOUT WITH (FORMAT csv)")
	if out != "1,one\n2,two\n3,\"th,ree\"\n" {
		t.Fatalf("psql COPY TO STDOUT: %q", out)
	}
	_, errOut, err := psql(p.addr, "postgres", "", "SELECT 1/0")
	if err == nil || !strings.Contains(errOut, "division by zero") {
		t.Fatalf("psql SELECT 1/0: %v %q", err, errOut)
	}
	// NOTICE arrives on psql's stderr.
	_, errOut, err = psql(p.addr, "postgres", "", "DO $$ BEGIN RAISE NOTICE 'from plpgsql'; END $$")
	if err != nil || !strings.Contains(errOut, "NOTICE:  from plpgsql") {
		t.Fatalf("psql NOTICE: %v %q", err, errOut)
	}
}

func TestProtocol32ClientNegotiatedDown(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr})
	ctx := context.Background()
	conn := connect(t, p.url("postgres", "")+"&max_protocol_version=3.2")
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil || !strings.HasPrefix(v, "15") {
		t.Fatalf("server_version %q, %v", v, err)
	}
	// Cancel still works with the 3.0-sized key the proxy hands out.
	errc := make(chan error, 1)
	go func() { _, err := conn.Exec(ctx, "SELECT pg_sleep(10)"); errc <- err }()
	time.Sleep(300 * time.Millisecond)
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if pgCode(err) != "57014" {
			t.Fatalf("got %v, want 57014", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("not cancelled")
	}
}

func TestEncryptionRequestsDeclined(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr})

	// GSSENCRequest then SSLRequest (what libpq with gssencmode=prefer and
	// sslmode=prefer sends), both answered 'N', then a normal startup.
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, code := range []uint32{80877104, 80877103} {
		if _, err := c.Write(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 8), code)); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'N' {
			t.Fatalf("answer to request %d: %q %v, want 'N'", code, b, err)
		}
	}
	startup, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": "postgres"}}).Encode(nil)
	if _, err := c.Write(startup); err != nil {
		t.Fatal(err)
	}
	fe := pgproto3.NewFrontend(c, c)
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}

	// A client that requires TLS gets its driver's clear error.
	_, errOut, err := psqlEnv(p.addr, "postgres", "", []string{"PGSSLMODE=require"}, "SELECT 1")
	if err == nil || !strings.Contains(errOut, "server does not support SSL, but SSL was required") {
		t.Fatalf("psql sslmode=require: %v %q", err, errOut)
	}
}
