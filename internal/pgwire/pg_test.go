package pgwire

// A tiny private helper that runs a real PostgreSQL 15 for this package's tests:
// initdb into a temporary directory owned by the postgres user (initdb refuses to
// run as root), start the postmaster on a free port, stop it by its PID.

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const pgBinDir = "/usr/lib/postgresql/15/bin"

// Roles and passwords the auth tests use; pg_hba.conf below assigns methods.
const (
	md5User        = "md5user"
	md5Password    = "md5 secret"
	scramUser      = "scramuser"
	scramPassword  = "scram secret ✓"
	clearUser      = "clearuser"
	clearPassword  = "clear secret"
	pgHBAConfLines = `local all all trust
host all ` + md5User + ` 127.0.0.1/32 md5
host all ` + scramUser + ` 127.0.0.1/32 scram-sha-256
host all ` + clearUser + ` 127.0.0.1/32 password
host all all 127.0.0.1/32 trust
`
)

type testPG struct {
	dir  string // data directory (also the socket directory)
	port int
	addr string // 127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{}
}

var (
	sharedPGOnce sync.Once
	sharedPG     *testPG
	sharedPGErr  error
)

// postgresForTest returns the package's PostgreSQL server, starting it on first
// use. TestMain stops it.
func postgresForTest(t testing.TB) *testPG {
	t.Helper()
	sharedPGOnce.Do(func() { sharedPG, sharedPGErr = startPG() })
	if sharedPGErr != nil {
		t.Fatalf("starting PostgreSQL 15 for the test: %v", sharedPGErr)
	}
	return sharedPG
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedPG != nil {
		sharedPG.stop()
	}
	os.Exit(code)
}

// asPostgresUser makes cmd run as the postgres OS user when we are root.
func asPostgresUser(cmd *exec.Cmd) (uid, gid int, err error) {
	if os.Geteuid() != 0 {
		return os.Getuid(), os.Getgid(), nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, fmt.Errorf("running as root needs a postgres user: %w", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return uid, gid, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startPG() (*testPG, error) {
	if _, err := os.Stat(filepath.Join(pgBinDir, "postgres")); err != nil {
		return nil, fmt.Errorf("PostgreSQL 15 binaries not found in %s (apt-get install postgresql-15): %w", pgBinDir, err)
	}
	base, err := os.MkdirTemp("", "pgwire-test-pg-")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, "data")
	initdb := exec.Command(filepath.Join(pgBinDir, "initdb"), "-D", dir, "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	uid, gid, err := asPostgresUser(initdb)
	if err != nil {
		return nil, err
	}
	if err := os.Chown(base, uid, gid); err != nil {
		return nil, err
	}
	initdb.Dir = base
	initdb.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "pg_hba.conf"), []byte(pgHBAConfLines), 0o600); err != nil {
		return nil, err
	}
	_ = os.Chown(filepath.Join(dir, "pg_hba.conf"), uid, gid)

	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(base, "postgres.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(pgBinDir, "postgres"), "-D", dir, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=60", "-c", "shared_buffers=64MB")
	if _, _, err := asPostgresUser(cmd); err != nil {
		return nil, err
	}
	cmd.Dir = base
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pg := &testPG{dir: dir, port: port, addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(pg.done) }()

	// Wait until it accepts connections, then create the roles.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, pg.directURL("postgres", ""))
		cancel()
		if err == nil {
			err = setupRoles(conn)
			conn.Close(context.Background())
			if err != nil {
				pg.stop()
				return nil, err
			}
			return pg, nil
		}
		select {
		case <-pg.done:
			log, _ := os.ReadFile(filepath.Join(base, "postgres.log"))
			return nil, fmt.Errorf("postgres exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			pg.stop()
			return nil, fmt.Errorf("postgres not ready after 60 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func setupRoles(conn *pgx.Conn) error {
	ctx := context.Background()
	for _, q := range []string{
		"SET password_encryption = 'md5'",
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", md5User, md5Password),
		"SET password_encryption = 'scram-sha-256'",
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", scramUser, scramPassword),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", clearUser, clearPassword),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

func (pg *testPG) directURL(usr, password string) string {
	return connURL(pg.addr, usr, password)
}

func connURL(addr, usr, password string) string {
	u := url.URL{Scheme: "postgres", User: url.User(usr), Host: addr, Path: "/postgres", RawQuery: "sslmode=disable"}
	if password != "" {
		u.User = url.UserPassword(usr, password)
	}
	return u.String()
}

// stop shuts the postmaster down by its PID (fast shutdown, then SIGKILL).
func (pg *testPG) stop() {
	if pg.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(pg.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-pg.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(pg.cmd.Process.Pid, syscall.SIGKILL)
		<-pg.done
	}
	_ = os.RemoveAll(filepath.Dir(pg.dir))
}
