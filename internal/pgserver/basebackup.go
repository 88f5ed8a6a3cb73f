package pgserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tashkent-db/tashkent/internal/process"
)

// BaseBackup copies a running server's data directory with pg_basebackup
// (a physical copy over the replication protocol): the copy is what the
// server held at one point of its WAL, and the server's writes go on while
// it is taken. The copy is an ordinary data directory; Init and Start run
// it like any other.
type BaseBackup struct {
	// Host and Port reach the server copied; User must be allowed
	// replication connections (initdb's default pg_hba.conf allows them
	// locally).
	Host string
	Port int
	User string
	// DataDir receives the copy. It must not exist or be empty; it is
	// created mode 0700, owned by the postgres user when running as root.
	DataDir string
	// MaxRate is pg_basebackup's --max-rate (e.g. "20M"; empty: no limit):
	// a bound on what the copy reads from the server's disk.
	MaxRate string
	// Label names the backup in the server's pg_stat_progress_basebackup.
	Label string
	// BinDir holds pg_basebackup; empty means FindBinDir.
	BinDir string
	// Started is called with pg_basebackup's PID once it runs.
	Started func(pid int)
	// Progress is called as pg_basebackup reports its progress (about once
	// a second): bytes copied and the estimated total.
	Progress func(done, total int64)
}

// backupTailBytes bounds the pg_basebackup output an error carries.
const backupTailBytes = 3000

// progressLine is pg_basebackup's --progress report: "1234/5678 kB (21%),
// 0/1 tablespace". The total is an estimate made at the start; pg_basebackup
// raises it when the copy passes it.
var progressLine = regexp.MustCompile(`^\s*(\d+)/(\d+) kB \(\d+%\)`)

// Run takes the copy. pg_basebackup streams the WAL written meanwhile
// (-X stream), so the copy recovers to a consistent state on its first
// start, and asks for an immediate checkpoint (-c fast) rather than
// waiting for the next one. On success the files that belong to the
// copied server's running instance (its socket lock files and its log)
// are removed from the copy.
//
// pg_basebackup forks a child that streams the WAL. Both run in a process
// group of their own, and ending ctx kills the whole group: a signal to
// the main process alone leaves the child streaming into the directory,
// holding the output pipe open. The main process also gets the parent
// death signal, but a forked child does not inherit it: when the caller
// is killed, the child outlives it, and Copiers finds it.
func (b BaseBackup) Run(ctx context.Context) error {
	binDir := b.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return err
		}
	}
	cred, err := childCredential()
	if err != nil {
		return err
	}
	if err := makeOwnedDir(b.DataDir, cred); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_basebackup"), b.args()...)
	cmd.Dir = "/"
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = backupWaitDelay
	outR, outW := io.Pipe()
	cmd.Stderr = outW
	if err := cmd.Start(); err != nil {
		outW.Close()
		return fmt.Errorf("pgserver: start pg_basebackup: %w", err)
	}
	if b.Started != nil {
		b.Started(cmd.Process.Pid)
	}
	output := make(chan string, 1)
	go func() { output <- b.readOutput(outR) }()
	err = cmd.Wait()
	outW.Close()
	out := <-output
	if err != nil {
		// A WAL streamer whose main process failed would keep the group.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if ctx.Err() != nil {
			return fmt.Errorf("pgserver: pg_basebackup interrupted: %w", ctx.Err())
		}
		return fmt.Errorf("pgserver: pg_basebackup from %s:%d: %w\n%s", b.Host, b.Port, err, out)
	}
	return removeInstanceFiles(b.DataDir)
}

// backupWaitDelay bounds how long Run waits for pg_basebackup's output to
// end once the main process has exited: a WAL streamer left behind would
// hold it open.
const backupWaitDelay = 5 * time.Second

// args is pg_basebackup's command line.
func (b BaseBackup) args() []string {
	args := []string{"-h", b.Host, "-p", strconv.Itoa(b.Port), "-U", b.User, "-D", b.DataDir,
		"-X", "stream", "-c", "fast", "--progress", "--no-password"}
	if b.MaxRate != "" {
		args = append(args, "--max-rate", b.MaxRate)
	}
	if b.Label != "" {
		args = append(args, "--label", b.Label)
	}
	return args
}

// readOutput reports pg_basebackup's progress lines and returns the tail
// of its other output (warnings, the error).
func (b BaseBackup) readOutput(r io.Reader) string {
	var rest bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Split(scanLinesOrReturns)
	for sc.Scan() {
		line := sc.Text()
		if m := progressLine.FindStringSubmatch(line); m != nil {
			done, _ := strconv.ParseInt(m[1], 10, 64)
			total, _ := strconv.ParseInt(m[2], 10, 64)
			if b.Progress != nil {
				b.Progress(done*1024, max(done, total)*1024)
			}
			continue
		}
		if strings.TrimSpace(line) == "" || routineBackupLine(line) {
			continue
		}
		rest.WriteString(line)
		rest.WriteByte('\n')
		if rest.Len() > 2*backupTailBytes {
			rest.Next(rest.Len() - backupTailBytes)
		}
	}
	return process.OutputTail(string(bytes.TrimRight(rest.Bytes(), "\n")), backupTailBytes)
}

// routineBackupLine reports whether a line of pg_basebackup's output says
// nothing worth an error message: the checkpoint it waits for, and the
// sockets of a data directory, which it does not copy.
func routineBackupLine(line string) bool {
	return strings.HasPrefix(line, "waiting for checkpoint") || strings.Contains(line, "skipping special file")
}

// scanLinesOrReturns splits at '\n' or '\r': on a terminal pg_basebackup
// rewrites its progress line with '\r'.
func scanLinesOrReturns(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// childCredential is the postgres user's when running as root (PostgreSQL's
// programs refuse root or must write files the server can read), nil
// otherwise.
func childCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	return postgresCredential()
}

// makeOwnedDir creates dir (absent or empty) mode 0700, owned by cred's
// user when not nil.
func makeOwnedDir(dir string, cred *syscall.Credential) error {
	if err := os.Mkdir(dir, 0o700); errors.Is(err, os.ErrExist) {
		ents, rerr := os.ReadDir(dir)
		if rerr != nil {
			return fmt.Errorf("pgserver: %w", rerr)
		}
		if len(ents) > 0 {
			return fmt.Errorf("pgserver: %s is not empty", dir)
		}
	} else if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("pgserver: chown %s to postgres: %w", dir, err)
	}
	return checkTraversable(dir, cred)
}

// removeInstanceFiles removes from a copied data directory what belonged
// to the copied server's running instance: the lock files of its Unix
// sockets (pg_basebackup skips the sockets but copies their locks) and its
// log, so that the copy's log starts with its own first start.
func removeInstanceFiles(dir string) error {
	locks, err := filepath.Glob(filepath.Join(dir, ".s.PGSQL.*.lock"))
	if err != nil {
		return err
	}
	for _, p := range append(locks, filepath.Join(dir, LogFile)) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	return nil
}

// Copiers lists the live pg_basebackup processes that copy into dir: the
// one started and the child it forks to stream the WAL, which has the
// same command line. It goes by PID and command line, so that it names
// no other program and no copy into another directory.
func Copiers(dir string) []int {
	return process.Find(func(pid int) bool { return copiesInto(pid, dir) })
}

// copiesInto reports whether pid is a live pg_basebackup writing into dir.
func copiesInto(pid int, dir string) bool {
	if !process.Alive(pid) {
		return false
	}
	args, err := process.Cmdline(pid)
	if err != nil || len(args) == 0 || filepath.Base(args[0]) != "pg_basebackup" {
		return false
	}
	for i, a := range args {
		if (a == "-D" && i+1 < len(args) && args[i+1] == dir) || a == "-D"+dir || a == "--pgdata="+dir {
			return true
		}
	}
	return false
}
