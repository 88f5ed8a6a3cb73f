package certbench

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdTicker is a periodic timerfd read through the runtime's poller: a
// read returns the expirations since the last read, and the goroutine
// waiting for it is parked like one waiting for a socket.
type timerfdTicker struct {
	f       *os.File
	start   time.Time
	expired int64
	buf     [8]byte
}

func newPreciseTicker(start time.Time, interval time.Duration) (ticker, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	first := max(time.Until(start), time.Nanosecond) // 0 would disarm it
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(first)), Interval: unix.NsecToTimespec(int64(interval))}
	if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("timerfd_settime: %w", err)
	}
	return &timerfdTicker{f: os.NewFile(uintptr(fd), "timerfd"), start: start}, nil
}

func (t *timerfdTicker) wait(ctx context.Context) (int64, error) {
	stop := context.AfterFunc(ctx, func() { t.f.SetReadDeadline(time.Now()) })
	defer stop()
	if _, err := t.f.Read(t.buf[:]); err != nil {
		return 0, err
	}
	// The first expiry is ticket 0's due time.
	t.expired += int64(binary.NativeEndian.Uint64(t.buf[:]))
	return t.expired, nil
}

func (t *timerfdTicker) close() { t.f.Close() }
