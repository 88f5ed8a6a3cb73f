package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAliveAndWaitGone(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	if Alive(0) || Alive(-1) {
		t.Fatal("pid 0 or -1 is alive")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Fatalf("the child %d is not alive", pid)
	}
	if WaitGone(context.Background(), pid, 50*time.Millisecond) {
		t.Fatal("WaitGone reported a sleeping child gone")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: a zombie, which counts as gone.
	if !WaitGone(context.Background(), pid, 10*time.Second) {
		t.Fatalf("the killed child %d (a zombie until reaped) is still alive", pid)
	}
	st, ok := ReadStat(pid)
	if !ok || st.State != 'Z' || st.PPID != os.Getpid() || st.Comm != "sleep" {
		t.Errorf("stat of the unreaped child: %+v %v; want a zombie sleep whose parent is this process", st, ok)
	}
	_ = cmd.Wait()
	if Alive(pid) {
		t.Fatalf("the reaped child %d is alive", pid)
	}
}

func TestReadStatStartTimeTellsProcessesApart(t *testing.T) {
	self, ok := ReadStat(os.Getpid())
	if !ok || self.StartTime == "" {
		t.Fatalf("stat of this process: %+v %v", self, ok)
	}
	if again, _ := ReadStat(os.Getpid()); again.StartTime != self.StartTime {
		t.Fatalf("start time changed: %s then %s", self.StartTime, again.StartTime)
	}
}

func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("earlier run\nthis run: line 1\nline 2\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	from := int64(len("earlier run\n"))
	if got := LogTail(path, from, 1000); got != "this run: line 1\nline 2" {
		t.Errorf("tail from the run's offset: %q", got)
	}
	if got := LogTail(path, 0, 8); got != "line 2" {
		t.Errorf("last 8 bytes: %q", got)
	}
	if got := LogTail(filepath.Join(t.TempDir(), "none"), 0, 10); !strings.Contains(got, "cannot read") {
		t.Errorf("tail of a missing log: %q", got)
	}
}

// A process that burns CPU shows it in its stat, and a child it waited
// for shows in its parent's ChildrenCPU.
func TestReadStatCPU(t *testing.T) {
	before, _ := ReadStat(os.Getpid())
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	after, ok := ReadStat(os.Getpid())
	if !ok || after.CPU <= before.CPU {
		t.Errorf("this process's CPU %v then %v after 200 ms of spinning", before.CPU, after.CPU)
	}
	if after.ChildrenCPU <= before.ChildrenCPU {
		t.Errorf("children's CPU %v then %v after a child that spun", before.ChildrenCPU, after.ChildrenCPU)
	}
}

func TestCmdline(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 60; :", "a b") // not exec'd away: sh waits for sleep
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Go starts a child with vfork: the parent runs again once the child's
	// exec has replaced its memory, a moment before the kernel records the
	// new arguments there.
	args, err := Cmdline(cmd.Process.Pid)
	for deadline := time.Now().Add(time.Second); err == nil && args[0] == "" && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		args, err = Cmdline(cmd.Process.Pid)
	}
	if want := []string{"sh", "-c", "sleep 60; :", "a b"}; err != nil || !slices.Equal(args, want) {
		t.Fatalf("cmdline: %q %v, want %q", args, err, want)
	}
	if _, err := Cmdline(1 << 30); err == nil {
		t.Fatal("the cmdline of a pid that cannot exist")
	}
}

func TestChildren(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if kids := Children(os.Getpid()); !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("children of this process %v lack the child %d", kids, cmd.Process.Pid)
	}
	if kids := Children(cmd.Process.Pid); len(kids) != 0 {
		t.Fatalf("sleep has children %v", kids)
	}
}
