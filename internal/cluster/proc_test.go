package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// The test binary doubles as a fake tashkent process: run as
// `cluster.test agent --socket PATH [--ignore-term]`, it has the command
// line of an agent and sleeps until SIGTERM (or forever with --ignore-term).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "agent" || os.Args[1] == "certifier") {
		ignore := false
		for _, a := range os.Args {
			ignore = ignore || a == "--ignore-term"
		}
		if ignore {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("fake", os.Args[1], "ready")
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	testbin.Main(m)
}

// startFake starts the test binary as a detached fake process and
// registers a cleanup that kills it by PID.
func startFake(t *testing.T, args ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := spawnDetached(exe, args, filepath.Join(t.TempDir(), "fake.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := cmdline(c.PID); err == nil {
			c.kill()
		}
	})
	// Wait until the child has exec'd (its cmdline is the fake's).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(process.LogTail(c.LogPath, 0, 1000), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("fake process did not start: %s", c.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}

func TestIdentityCheck(t *testing.T) {
	c := startFake(t, "agent", "--name", "replica1", "--socket", "/c/replica1/pgdata/tashkent_agent.sock")
	a := &Agent{Socket: "/c/replica1/pgdata/tashkent_agent.sock"}
	if err := agentIdentity(a).check(c.PID); err != nil {
		t.Fatalf("the fake agent does not match its identity: %v", err)
	}
	for _, other := range []procIdentity{
		agentIdentity(&Agent{Socket: "/other/replica1/pgdata/tashkent_agent.sock"}),
		certifierIdentity(&Certifier{DataDir: "/c/replica1/pgdata/tashkent_agent.sock"}),
		{sub: "agent", names: []flagValue{{"--name", "replica2"}}},
	} {
		if err := other.check(c.PID); err == nil {
			t.Errorf("pid %d matched %s", c.PID, other)
		}
	}
	if err := agentIdentity(a).check(os.Getpid()); err == nil {
		t.Error("the test process matched an agent identity")
	}
	// An agent recorded with its config file is still recognized when it
	// was started with the flags themselves.
	if err := agentIdentity(&Agent{Socket: a.Socket, Config: "/c/replica1/agent.toml"}).check(c.PID); err != nil {
		t.Errorf("the agent started with --socket does not match its identity with a config file: %v", err)
	}
	c.kill()
	if err := agentIdentity(a).check(c.PID); err == nil {
		t.Error("a dead process matched")
	}
}

// TestIdentityByConfigFile checks the processes up starts: named by the
// config file they start from.
func TestIdentityByConfigFile(t *testing.T) {
	c := startFake(t, "certifier", "--config", "/c/certifier-2/certifier.toml")
	member := &Certifier{ID: 2, DataDir: "/c/certifier-2", Config: "/c/certifier-2/certifier.toml"}
	if err := certifierIdentity(member).check(c.PID); err != nil {
		t.Fatalf("the fake member does not match its identity: %v", err)
	}
	for _, other := range []procIdentity{
		certifierIdentity(&Certifier{ID: 3, DataDir: "/c/certifier-3", Config: "/c/certifier-3/certifier.toml"}),
		certifierIdentity(&Certifier{ID: 2, DataDir: "/c/certifier-2"}), // no config recorded
		agentIdentity(&Agent{Socket: "/c/certifier-2/certifier.toml", Config: "/c/certifier-2/certifier.toml"}),
	} {
		if err := other.check(c.PID); err == nil {
			t.Errorf("pid %d matched %s", c.PID, other)
		}
	}
	a := startFake(t, "agent", "--config=/c/replica1/agent.toml")
	if err := agentIdentity(&Agent{Socket: "/c/replica1/pgdata/tashkent_agent.sock", Config: "/c/replica1/agent.toml"}).check(a.PID); err != nil {
		t.Errorf("an agent started with --config=FILE does not match: %v", err)
	}
}

func TestStopProcess(t *testing.T) {
	ctx := context.Background()
	t.Run("sigterm", func(t *testing.T) {
		c := startFake(t, "certifier", "--data-dir", "/nonexistent/c")
		id := certifierIdentity(&Certifier{DataDir: "/nonexistent/c"})
		killed, err := stopProcess(ctx, id, c.PID, 10*time.Second)
		if err != nil || killed {
			t.Fatalf("stop: killed=%v err=%v", killed, err)
		}
		if process.Alive(c.PID) {
			t.Fatal("process still alive after stop")
		}
		if _, err := stopProcess(ctx, id, c.PID, time.Second); !errors.Is(err, errNotRunning) {
			t.Fatalf("second stop: %v, want errNotRunning", err)
		}
	})
	t.Run("sigkill after grace", func(t *testing.T) {
		c := startFake(t, "agent", "--socket", "/c/r2.sock", "--ignore-term")
		killed, err := stopProcess(ctx, agentIdentity(&Agent{Socket: "/c/r2.sock"}), c.PID, 300*time.Millisecond)
		if err != nil || !killed {
			t.Fatalf("stop: killed=%v err=%v", killed, err)
		}
		if process.Alive(c.PID) {
			t.Fatal("process still alive after SIGKILL")
		}
	})
	t.Run("not ours", func(t *testing.T) {
		c := startFake(t, "agent", "--socket", "/c/r3.sock")
		_, err := stopProcess(ctx, agentIdentity(&Agent{Socket: "/c/r4.sock"}), c.PID, time.Second)
		if !errors.Is(err, errNotOurs) {
			t.Fatalf("stop of a foreign process: %v, want errNotOurs", err)
		}
		time.Sleep(100 * time.Millisecond)
		if !process.Alive(c.PID) {
			t.Fatal("a process that is not ours was signalled")
		}
	})
}

func TestWaitReadyReportsLogTail(t *testing.T) {
	ctx := context.Background()
	log := filepath.Join(t.TempDir(), "x.log")
	c, err := spawnDetached("/bin/sh", []string{"-c", "echo listen: address already in use >&2; exit 3"}, log)
	if err != nil {
		t.Fatal(err)
	}
	err = waitReady(ctx, c, "thing", 10*time.Second, func(context.Context) error { return errors.New("not yet") })
	var se *errStartup
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "exited during startup") ||
		!strings.Contains(err.Error(), "address already in use") || !se.portInUse() {
		t.Fatalf("exit during startup: %v", err)
	}

	c, err = spawnDetached("/bin/sh", []string{"-c", "echo still warming up; exec sleep 60"}, log)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = waitReady(ctx, c, "thing", 500*time.Millisecond, func(context.Context) error { return errors.New("no answer") })
	if err == nil || !strings.Contains(err.Error(), "not ready after") || !strings.Contains(err.Error(), "still warming up") ||
		!strings.Contains(err.Error(), "no answer") || strings.Contains(err.Error(), "already in use") {
		t.Fatalf("timeout: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("timeout took %s", time.Since(start))
	}
	if process.Alive(c.PID) {
		t.Fatal("the process that timed out was not killed")
	}
}

// TestDownLeavesForeignProcessesAlone records PIDs that belong to other
// processes (as after a reboot or PID reuse) and checks that Down signals
// none of them and forgets them.
func TestDownLeavesForeignProcessesAlone(t *testing.T) {
	dir := t.TempDir()
	st, err := newState(dir, Options{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	foreign := startFake(t, "agent", "--socket", "/elsewhere/tashkent_agent.sock")
	st.Replicas[0].Agent.PID = foreign.PID
	st.Replicas[0].Postgres.PID = foreign.PID // not a postgres at all
	st.Certifier.PID = foreign.PID
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	report, err := Down(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(report) != 3 {
		t.Fatalf("report %v", report)
	}
	for _, s := range report {
		if s.Outcome != "left alone" {
			t.Errorf("%s: outcome %q, want left alone", s.Component, s.Outcome)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if !process.Alive(foreign.PID) {
		t.Fatal("Down signalled a process that was not its own")
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Certifier.PID != 0 || got.Replicas[0].Agent.PID != 0 || got.Replicas[0].Postgres.PID != 0 {
		t.Fatalf("stale PIDs kept: %+v", got)
	}
	// Idempotent: nothing left to stop.
	report, err = Down(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range report {
		if s.Outcome != "not running" {
			t.Errorf("second down: %s: %q", s.Component, s.Outcome)
		}
	}
	// Status of a stopped cluster reports it, without failing.
	status, err := GetStatus(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if status.Healthy || status.Certifier.Process.Running || status.Replicas[0].Agent.Running {
		t.Fatalf("status of a stopped cluster: %+v", status)
	}
}

func TestPortInUse(t *testing.T) {
	e := &errStartup{tail: "starting\nmetrics listen on 127.0.0.1:16500: listen tcp 127.0.0.1:16500: bind: address already in use"}
	if !e.portInUse() || !e.portInUse("127.0.0.1:7") {
		t.Error("a bind failure on a port picked as free should be retried")
	}
	if e.portInUse("127.0.0.1:16500") {
		t.Error("a bind failure on a fixed port must not be retried")
	}
	if (&errStartup{tail: "panic: boom"}).portInUse() {
		t.Error("a failure that is not about a port was taken for one")
	}
}
