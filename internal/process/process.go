// Package process has the helpers for the processes tashkent, its
// benchmarks and its tests start and stop by PID: starting a child with its
// output appended to a log and waiting until it is ready (Child), whether
// one is alive (from /proc, where a zombie counts as gone), waiting until
// one has exited, and the tail of a process's log or output for an error
// message.
package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stat is what /proc/PID/stat says about a process.
type Stat struct {
	Comm  string // the executable's name, as the kernel keeps it
	State byte   // R, S, D, T, Z (zombie), X (dead), ...
	PPID  int
	// CPU is the process's user and system time so far; ChildrenCPU that
	// of its children it has waited for.
	CPU, ChildrenCPU time.Duration
	// StartTime is the start time in clock ticks since boot, as text: it
	// tells a live process from a later one with a reused PID.
	StartTime string
}

// ClockTick is the unit of the times in /proc/PID/stat and /proc/stat:
// 1/USER_HZ, which is 100 on every Linux architecture Go supports
// (sysconf(_SC_CLK_TCK)).
const ClockTick = time.Second / 100

// ReadStat reads /proc/PID/stat; false if there is no such process (or no
// /proc).
func ReadStat(pid int) (Stat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, false
	}
	// pid (comm) state ppid ...; comm may contain spaces and parentheses.
	i := bytes.IndexByte(b, '(')
	j := bytes.LastIndexByte(b, ')')
	if i < 0 || j < i || j+2 >= len(b) {
		return Stat{}, false
	}
	fields := strings.Fields(string(b[j+2:]))
	if len(fields) < 2 {
		return Stat{}, false
	}
	// fields[k-3] is the field numbered k in proc(5).
	field := func(k int) int64 {
		if k-3 >= len(fields) {
			return 0
		}
		v, _ := strconv.ParseInt(fields[k-3], 10, 64)
		return v
	}
	st := Stat{Comm: string(b[i+1 : j]), State: fields[0][0], PPID: int(field(4)),
		CPU:         time.Duration(field(14)+field(15)) * ClockTick,
		ChildrenCPU: time.Duration(field(16)+field(17)) * ClockTick}
	if len(fields) > 22-3 {
		st.StartTime = fields[22-3]
	}
	return st, true
}

// Cmdline returns the arguments pid was started with (its argv, as
// /proc/PID/cmdline has it).
func Cmdline(pid int) ([]string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	return strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"), nil
}

// Children lists the PIDs whose parent is pid, from /proc.
func Children(pid int) []int {
	return Find(func(c int) bool {
		st, ok := ReadStat(c)
		return ok && st.PPID == pid
	})
}

// Find lists the PIDs in /proc for which match is true.
func Find(match func(pid int) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && match(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// Alive reports whether pid exists and is not a zombie.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return false
	}
	if st, ok := ReadStat(pid); ok {
		return st.State != 'Z' && st.State != 'X'
	}
	return err == nil || errors.Is(err, syscall.EPERM)
}

// pollInterval is how often WaitGone looks.
const pollInterval = 20 * time.Millisecond

// WaitGone waits until pid has exited (a zombie has), ctx is done or max
// has passed, and reports whether it has exited.
func WaitGone(ctx context.Context, pid int, max time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for Alive(pid) {
		select {
		case <-ctx.Done():
			return !Alive(pid)
		case <-t.C:
		}
	}
	return true
}

// LogTail returns up to n bytes from the end of the log at path, none
// from before offset from (where the current run's output starts),
// without trailing newlines. It is for error messages: a log it cannot
// read is described in the text.
func LogTail(path string, from int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	if _, err := f.Seek(max(from, st.Size()-int64(n)), io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimRight(string(b), "\n")
}
