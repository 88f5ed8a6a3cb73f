package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicksPerSecond is USER_HZ, the unit of /proc/PID/stat's times: 100
// on every Linux architecture Go supports (sysconf(_SC_CLK_TCK)).
const clockTicksPerSecond = 100

// procTimes reads utime+stime and cutime+cstime (children it has waited
// for) of pid, and its parent, from /proc/PID/stat.
func procTimes(pid int) (own, children time.Duration, ppid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	s := string(b)
	// The command (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	tick := time.Second / clockTicksPerSecond
	own = time.Duration(num(14)+num(15)) * tick
	children = time.Duration(num(16)+num(17)) * tick
	return own, children, int(num(4)), nil
}

// postgresCPU is the CPU time used so far by one PostgreSQL server: its
// postmaster, every live child (backends, walwriter, checkpointer, ...)
// and the children that already exited (the postmaster's cutime+cstime:
// a backend's CPU is counted there once its connection ends).
func postgresCPU(postmaster int) (time.Duration, error) {
	own, exited, _, err := procTimes(postmaster)
	if err != nil {
		return 0, err
	}
	total := own + exited
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		o, _, ppid, err := procTimes(pid)
		if err != nil || ppid != postmaster {
			continue // gone meanwhile, or not a child of this server
		}
		total += o
	}
	return total, nil
}
