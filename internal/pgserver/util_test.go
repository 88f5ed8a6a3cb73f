package pgserver

import (
	"strconv"
	"syscall"
)

func itoa(i int) string { return strconv.Itoa(i) }

func getsid(pid int) (int, error) {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(sid), nil
}
