package bench

import (
	"fmt"
	"maps"
	"path/filepath"
	"time"

	"github.com/tashkent-db/tashkent/internal/bench/slowdisk"
)

// The slow-disk regime (--fsync-delay D): every durable flush of every
// system in the run takes D longer, after the real flush, the way the
// Tashkent paper's 8 ms disks did (§9, Fig. 4–6). PostgreSQL gets the
// LD_PRELOAD shim of internal/bench/slowdisk (every server of every system:
// standalone, tashkent replicas, streaming primary and standbys, pgpool's
// backends) with wal_sync_method pinned to fdatasync; the certifier, which
// is Go and makes raw system calls, sleeps after each log sync itself
// (--unsafe-fault-fsync-delay). pgbench, pgpool and the agents write
// nothing durable.

// checkFsyncDelay validates --fsync-delay.
func checkFsyncDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("fsync delay %s: must not be negative", d)
	}
	if d > time.Second {
		return fmt.Errorf("fsync delay %s: more than 1s would only measure the delay; the paper's disks took 8ms", d)
	}
	return nil
}

// buildSlowDisk compiles the shim into the work directory when the run
// has an fsync delay.
func (r *runner) buildSlowDisk() error {
	if r.cfg.FsyncDelay <= 0 {
		return nil
	}
	shim, err := slowdisk.Build(filepath.Join(r.dir, "slowdisk"), r.cfg.FsyncDelay)
	if err != nil {
		return err
	}
	r.slowDisk = shim
	r.progress("slow-disk regime: every fsync/fdatasync of PostgreSQL (LD_PRELOAD %s) and every certifier log sync takes %s longer",
		shim.Path, shim.Delay)
	return nil
}

// pgEnv is the extra environment of every PostgreSQL the bench starts.
func (r *runner) pgEnv() []string {
	if r.slowDisk == nil {
		return nil
	}
	return r.slowDisk.Env()
}

// pgSettings adds the regime's settings to a server's.
func (r *runner) pgSettings(settings map[string]string) map[string]string {
	if r.slowDisk != nil {
		maps.Copy(settings, slowdisk.PostgresSettings())
	}
	return settings
}

// certifierSyncArgs are the certifier's flags for the regime. On the real
// disk the certifier shares the host with the replicas, as `tashkent up`
// runs it (--shares-host: one Go thread here). Not with the slow disk: a
// one-thread certifier reads no request and writes no reply while a flush
// holds its thread, which there lasts the emulated delay
// (internal/cli/sysmon.go, pollUnlessAlone).
func (r *runner) certifierSyncArgs() []string {
	if r.cfg.FsyncDelay <= 0 {
		return []string{"--shares-host"}
	}
	return r.certifierFsyncDelayArgs()
}

// certifierFsyncDelayArgs is the regime's flag alone, for a member of a
// certifier group (which never shares the host: certifiergroup.go).
func (r *runner) certifierFsyncDelayArgs() []string {
	if r.cfg.FsyncDelay <= 0 {
		return nil
	}
	return []string{"--unsafe-fault-fsync-delay", r.cfg.FsyncDelay.String()}
}

// fsyncDelayNote is the regime's part of a table's header.
func fsyncDelayNote(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(", fsync delay %s (emulated slow disk)", d)
}
