package process

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A child's log gets a line saying who started it and how, then its
// output; LogTail shows only this run's part.
func TestStartLoggedAppendsThisRun(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sub", "x.log")
	first, err := StartLogged(exec.Command("/bin/sh", "-c", "echo first run"), log, "the test")
	if err != nil {
		t.Fatal(err)
	}
	<-first.Done()
	second, err := StartLogged(exec.Command("/bin/sh", "-c", "echo second run; exit 3"), log, "the test")
	if err != nil {
		t.Fatal(err)
	}
	<-second.Done()
	exited, werr := second.Exited()
	var exit *exec.ExitError
	if !exited || !errors.As(werr, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Exited() = %v, %v; want an exit with status 3", exited, werr)
	}
	got := second.LogTail(1000)
	if strings.Contains(got, "first run") || !strings.Contains(got, "the test starts: /bin/sh -c echo second run") || !strings.HasSuffix(got, "second run") {
		t.Fatalf("log tail of the second run:\n%s", got)
	}
	if err := second.Signal(syscall.SIGKILL); err == nil {
		t.Fatal("a reaped child was signalled")
	}
}

func TestWaitReady(t *testing.T) {
	log := filepath.Join(t.TempDir(), "x.log")
	quits, err := StartLogged(exec.Command("/bin/sh", "-c", "exit 4"), log, "the test")
	if err != nil {
		t.Fatal(err)
	}
	exited, werr := quits.WaitReady(context.Background(), func(context.Context) error { return errors.New("not yet") })
	if !exited || werr == nil {
		t.Fatalf("a child that exits: WaitReady = %v, %v; want exited with its exit status", exited, werr)
	}

	stays, err := StartLogged(exec.Command("sleep", "60"), log, "the test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stays.Signal(syscall.SIGKILL); <-stays.Done() }()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	exited, err = stays.WaitReady(ctx, func(context.Context) error { return errors.New("no answer") })
	if exited || err == nil || err.Error() != "no answer" {
		t.Fatalf("a child that never gets ready: WaitReady = %v, %v; want the last check's error", exited, err)
	}
	calls := 0
	exited, err = stays.WaitReady(context.Background(), func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if exited || err != nil || calls != 3 {
		t.Fatalf("a child that gets ready at the third check: WaitReady = %v, %v after %d checks", exited, err, calls)
	}
}

func TestOutputTail(t *testing.T) {
	if got := OutputTail("abcdef", 3); got != "...def" {
		t.Errorf("OutputTail cut = %q", got)
	}
	if got := OutputTail("abc", 3); got != "abc" {
		t.Errorf("OutputTail whole = %q", got)
	}
}
