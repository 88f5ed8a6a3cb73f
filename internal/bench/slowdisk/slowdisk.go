// Package slowdisk emulates a slow disk for benchmarks: every durable flush
// of a process takes a fixed delay longer, after the real flush.
//
// Why: the Tashkent paper's result (EuroSys 2006, §9, Fig. 4–6) comes from
// disks whose fsync took 8 ms. Mode base then pays one slow fsync per
// version per replica, serially (commits follow the global order, so a
// replica cannot group them), while mode mw's only durable write is the
// certifier's group-committed log. This machine's fsync takes 0.1–1 ms and
// its kernel has no dm-delay, so the regime has to be emulated, explicitly:
//
//   - PostgreSQL (every server of every system of a bench run) gets the
//     LD_PRELOAD shim csrc/slowdisk.c, compiled at run time with the machine's C
//     compiler (cc -shared -fPIC -O2): fsync, fdatasync and syncfs call the
//     real function and then sleep the delay. The bench pins
//     wal_sync_method=fdatasync (Linux's default) in this regime so that WAL
//     flushes go through fdatasync rather than O_DSYNC writes.
//   - The certifier is Go and makes raw system calls, which LD_PRELOAD does
//     not reach: it sleeps after each log sync itself (hidden flag
//     `tashkent certifier --unsafe-fault-fsync-delay D`, wal.Options.SyncDelay,
//     certgroup.DiskLog.SyncDelay).
//
// Durability stays real in both: the delay comes after the flush.
package slowdisk

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

//go:embed csrc/slowdisk.c
var source []byte

// DelayEnv is the environment variable the shim reads its delay from, in
// nanoseconds.
const DelayEnv = "TASHKENT_SLOWDISK_DELAY_NS"

// Shim is the compiled shared object.
type Shim struct {
	// Path of slowdisk.so.
	Path  string
	Delay time.Duration
}

// Build compiles the shim into dir (created if missing; dir and the .so are
// made readable by everyone, since PostgreSQL runs as the postgres user
// when the bench runs as root).
func Build(dir string, delay time.Duration) (*Shim, error) {
	if delay <= 0 {
		return nil, fmt.Errorf("slowdisk: delay %s: must be positive", delay)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return nil, errors.New("slowdisk: no C compiler (cc) to build the fsync-delay shim: install gcc (apt-get install gcc)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("slowdisk: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("slowdisk: %w", err)
	}
	src := filepath.Join(dir, "slowdisk.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		return nil, fmt.Errorf("slowdisk: %w", err)
	}
	so := filepath.Join(dir, "slowdisk.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", so, src, "-ldl").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("slowdisk: compile %s: %w\n%s", src, err, out)
	}
	if err := os.Chmod(so, 0o755); err != nil {
		return nil, fmt.Errorf("slowdisk: %w", err)
	}
	return &Shim{Path: so, Delay: delay}, nil
}

// Env is the environment that loads the shim into a process (and its
// children): LD_PRELOAD and the delay.
func (s *Shim) Env() []string {
	return []string{"LD_PRELOAD=" + s.Path, DelayEnv + "=" + strconv.FormatInt(s.Delay.Nanoseconds(), 10)}
}

// PostgresSettings are the postgresql.conf settings the regime needs: WAL
// flushed with fdatasync (Linux's default, pinned so that no flush goes
// through an O_DSYNC write, which the shim does not slow down).
func PostgresSettings() map[string]string {
	return map[string]string{"wal_sync_method": "fdatasync"}
}
