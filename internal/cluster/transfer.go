package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"

	"github.com/tashkent-db/tashkent/internal/fsutil"
)

// State transfer: a replica's data directory copied from a donor replica
// while the donor keeps serving (Postgres-R(SI) §4.3), then caught up from
// the certifier's log by the replica's agent, which admits clients only
// once it has caught up. It serves `replica add` (a new replica) and
// `replica rebuild` (an existing one, in place, keeping its index and
// port).
//
// The copy is physical: pg_basebackup -X stream -c fast from the donor's
// PostgreSQL (internal/pgserver BaseBackup). The replica's version is the
// progress of the extension's replication origin, which every commit of a
// version carries in its commit record, so the copy's version is exactly
// the last version its WAL holds; the agent reads it, aligns sequences for
// its own index and replays the rest. docs/ARCHITECTURE.md says why not a
// logical copy.
//
// Never a half-built replica: the copy goes to DIR/replicaK/pgdata.transfer
// and is moved to DIR/replicaK/pgdata only once pg_basebackup has finished
// (a rename for a new replica, recorded in cluster.json only after it; an
// atomic exchange with the old data directory for a rebuild, which keeps
// serving, or stays halted, until then). `up` only ever starts pgdata. A
// transfer that is interrupted leaves the staging directory and its record
// (transfer.json, which `status` shows as interrupted); running the
// command again removes them and copies again from the start
// (pg_basebackup cannot resume a copy).

const (
	// stagingSuffix names the directory a copy is taken into, beside the
	// data directory it will replace.
	stagingSuffix = ".transfer"
	// swapSuffix names the old data directory during a swap on a file
	// system without an atomic exchange of two directories.
	swapSuffix = ".old"
	// transferFile, in the replica's directory, records a transfer in
	// progress or interrupted.
	transferFile = "transfer.json"
	// progressPrintEvery spaces the progress lines of a transfer.
	progressPrintEvery = time.Second
	// catchUpPrintEvery spaces the lines that show a new copy catching up.
	catchUpPrintEvery = 2 * time.Second
	// copierGoneWait bounds the wait for a killed pg_basebackup to exit.
	copierGoneWait = 10 * time.Second
)

// Transfer is the record of a state transfer (DIR/replicaK/transfer.json),
// rewritten as it goes; `status` shows it.
type Transfer struct {
	// Kind is "add" or "rebuild".
	Kind    string `json:"kind"`
	Replica string `json:"replica"`
	Index   int    `json:"index"`
	Donor   string `json:"donor"`
	// Reason says why (a rebuild); Automatic: the supervisor started it.
	Reason    string `json:"reason,omitempty"`
	Automatic bool   `json:"automatic,omitempty"`
	// PID is the tashkent process doing the transfer, CopierPID its
	// pg_basebackup while it copies.
	PID       int `json:"pid"`
	CopierPID int `json:"copier_pid,omitempty"`
	// Phase is "copying", "starting" or "catching up".
	Phase   string    `json:"phase"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	// BytesDone of BytesTotal (pg_basebackup's estimate) copied, at
	// BytesPerSecond over the last seconds; ETASeconds left at that rate.
	BytesDone      int64   `json:"bytes_done"`
	BytesTotal     int64   `json:"bytes_total"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	ETASeconds     float64 `json:"eta_seconds"`
	// CopySeconds is how long the copy took, once done.
	CopySeconds float64 `json:"copy_seconds,omitempty"`
	// Version is the copy's version while it catches up to TargetVersion
	// (the certifier's durable version).
	Version       uint64 `json:"version,omitempty"`
	TargetVersion uint64 `json:"target_version,omitempty"`
}

// transfer is one transfer run by this process.
type transfer struct {
	u       *upper
	target  *Replica
	donor   *Replica
	staging string
	path    string // the record

	mu        sync.Mutex
	rec       Transfer
	meter     rateMeter
	lastPrint time.Time
}

func (u *upper) newTransfer(kind string, target, donor *Replica, reason string, automatic bool) *transfer {
	now := time.Now().UTC()
	return &transfer{
		u: u, target: target, donor: donor,
		staging: target.Postgres.DataDir + stagingSuffix,
		path:    filepath.Join(target.Dir, transferFile),
		rec: Transfer{Kind: kind, Replica: target.Name, Index: target.Index, Donor: donor.Name, Reason: reason,
			Automatic: automatic, PID: os.Getpid(), Phase: "copying", Started: now},
		meter: rateMeter{window: rateWindow},
	}
}

// copyFromDonor takes the copy into the staging directory, after removing
// what an interrupted transfer left there.
func (t *transfer) copyFromDonor(ctx context.Context, maxRate string) error {
	if err := clearStaging(t.staging); err != nil {
		return err
	}
	if err := t.save(); err != nil {
		return err
	}
	t.u.progress("%s: copying the data directory of %s (port %d) with pg_basebackup; %s keeps serving",
		t.target.Name, t.donor.Name, t.donor.Postgres.Port, t.donor.Name)
	start := time.Now()
	t.mu.Lock()
	t.meter.add(start, 0) // so that the first report has a rate
	t.mu.Unlock()
	err := pgserver.BaseBackup{
		Host: "127.0.0.1", Port: t.donor.Postgres.Port, User: "postgres",
		DataDir: t.staging, MaxRate: maxRate,
		Label:    fmt.Sprintf("tashkent %s %s", t.rec.Kind, t.target.Name),
		Started:  t.copierStarted,
		Progress: t.copied,
	}.Run(ctx)
	if err != nil {
		if ctx.Err() == nil {
			os.RemoveAll(t.staging)
		}
		return fmt.Errorf("%s: copy from %s: %w", t.target.Name, t.donor.Name, err)
	}
	// A donor that halted or closed its gate while it was copied may have
	// been copied with changes of its own, or in the middle of recovering.
	if _, err := donorVersion(ctx, t.donor); err != nil {
		os.RemoveAll(t.staging)
		return fmt.Errorf("%s: %s stopped serving while it was copied (%v); the copy is discarded", t.target.Name, t.donor.Name, err)
	}
	t.mu.Lock()
	t.rec.CopierPID, t.rec.CopySeconds, t.rec.Phase = 0, time.Since(start).Seconds(), "starting"
	done, secs := t.rec.BytesDone, t.rec.CopySeconds
	t.mu.Unlock()
	t.u.progress("%s: copied %s in %s (%s/s)", t.target.Name, formatBytes(done),
		time.Duration(secs*float64(time.Second)).Round(100*time.Millisecond), formatBytes(int64(float64(done)/max(secs, 1e-3))))
	return t.save()
}

func (t *transfer) copierStarted(pid int) {
	t.mu.Lock()
	t.rec.CopierPID = pid
	t.mu.Unlock()
	_ = t.save()
}

// copied takes one progress report of pg_basebackup: it updates the
// record and prints a line at most every progressPrintEvery.
func (t *transfer) copied(done, total int64) {
	now := time.Now()
	t.mu.Lock()
	t.meter.add(now, done)
	rate := t.meter.rate()
	t.rec.BytesDone, t.rec.BytesTotal, t.rec.BytesPerSecond = done, total, rate
	t.rec.ETASeconds = eta(done, total, rate).Seconds()
	print := now.Sub(t.lastPrint) >= progressPrintEvery
	if print {
		t.lastPrint = now
	}
	line := t.rec.progressLine()
	t.mu.Unlock()
	_ = t.save()
	if print {
		t.u.progress("%s: %s", t.target.Name, line)
	}
}

// progressLine is a copy's progress for people.
func (r *Transfer) progressLine() string {
	pct := 0.0
	if r.BytesTotal > 0 {
		pct = 100 * float64(r.BytesDone) / float64(r.BytesTotal)
	}
	rate, left := "-", "-"
	if r.BytesPerSecond > 0 {
		rate = formatBytes(int64(r.BytesPerSecond)) + "/s"
		left = (time.Duration(r.ETASeconds) * time.Second).String()
	}
	return fmt.Sprintf("copy from %s: %s of %s (%.0f%%), %s, ETA %s",
		r.Donor, formatBytes(r.BytesDone), formatBytes(r.BytesTotal), pct, rate, left)
}

// setPhase records the transfer's phase.
func (t *transfer) setPhase(phase string) {
	t.mu.Lock()
	t.rec.Phase = phase
	t.mu.Unlock()
	_ = t.save()
}

// save writes the record (temporary file, rename).
func (t *transfer) save() error {
	t.mu.Lock()
	t.rec.Updated = time.Now().UTC()
	b, err := json.MarshalIndent(t.rec, "", "  ")
	t.mu.Unlock()
	if err != nil {
		return err
	}
	tmp := t.path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("record the transfer: %w", err)
	}
	return os.Rename(tmp, t.path)
}

// finish removes the record: the replica serves.
func (t *transfer) finish() { clearTransfer(t.target) }

// clearTransfer removes what a transfer onto r left, once r serves
// (under the cluster lock, so no transfer runs): a transfer interrupted
// once its copy was in place is complete when the replica serves, whoever
// started it; one interrupted while copying left a staging directory that
// nothing will use.
func clearTransfer(r *Replica) {
	os.Remove(filepath.Join(r.Dir, transferFile))
	clearStaging(r.Postgres.DataDir + stagingSuffix)
}

// readTransfer reads the record in a replica's directory; nil when none.
func readTransfer(replicaDir string) *Transfer {
	b, err := os.ReadFile(filepath.Join(replicaDir, transferFile))
	if err != nil {
		return nil
	}
	var rec Transfer
	if json.Unmarshal(b, &rec) != nil {
		return nil
	}
	return &rec
}

// clearStaging removes what an interrupted transfer left: its
// pg_basebackup processes, found by the staging directory on their command
// line (the WAL streamer that pg_basebackup forks outlives a killed
// tashkent process), and the staging directory. The cluster lock, held,
// says that no other transfer runs.
func clearStaging(staging string) error {
	for _, pid := range pgserver.Copiers(staging) {
		syscall.Kill(pid, syscall.SIGKILL)
		process.WaitGone(context.Background(), pid, copierGoneWait)
	}
	if err := os.RemoveAll(staging); err != nil {
		return fmt.Errorf("remove the copy an interrupted transfer left in %s: %w", staging, err)
	}
	return nil
}

// installCopy puts the complete copy in staging in place of dataDir: a
// rename when dataDir does not exist (a replica being added); otherwise,
// when exchange (canExchange said the file system can), an atomic
// exchange of the two directories, after which staging holds the old
// data; else the old directory is first renamed aside (dataDir.old), and
// should the process die between the two renames, finishDataDirSwap puts
// it back. It returns where the old data directory is now ("" when there
// was none).
func installCopy(staging, dataDir string, exchange bool) (string, error) {
	if _, err := os.Stat(dataDir); errors.Is(err, os.ErrNotExist) {
		if err := os.Rename(staging, dataDir); err != nil {
			return "", err
		}
		return "", fsutil.SyncDir(filepath.Dir(dataDir))
	}
	old := staging
	if exchange {
		if err := renameExchange(staging, dataDir); err != nil {
			return "", fmt.Errorf("exchange %s and %s: %w", staging, dataDir, err)
		}
	} else {
		old = dataDir + swapSuffix
		if err := os.RemoveAll(old); err != nil {
			return "", err
		}
		if err := os.Rename(dataDir, old); err != nil {
			return "", err
		}
		if err := os.Rename(staging, dataDir); err != nil {
			return "", err
		}
	}
	return old, fsutil.SyncDir(filepath.Dir(dataDir))
}

// renameExchange swaps two directories atomically (renameat2 with
// RENAME_EXCHANGE). A variable: a test makes it fail as a file system
// without the exchange does.
var renameExchange = func(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

// canExchange reports whether the file system holding dir exchanges two
// directories atomically, by exchanging two scratch directories in dir.
// A rebuild asks before it stops the replica: file systems refuse the
// exchange with several errnos (EINVAL, ENOSYS, EOPNOTSUPP, EXDEV on some
// stacked ones), and a refusal met only once the replica is stopped would
// leave it stopped.
func canExchange(dir string) bool {
	scratch, err := os.MkdirTemp(dir, ".exchange-probe-")
	if err != nil {
		return false
	}
	defer os.RemoveAll(scratch)
	a, b := filepath.Join(scratch, "a"), filepath.Join(scratch, "b")
	if os.Mkdir(a, 0o700) != nil || os.Mkdir(b, 0o700) != nil {
		return false
	}
	return renameExchange(a, b) == nil
}

// finishDataDirSwap puts back r's data directory renamed aside by a swap
// that did not finish (installCopy without an atomic exchange), so that
// no one initializes an empty one in its place, and says so.
func (u *upper) finishDataDirSwap(r *Replica) error {
	dataDir := r.Postgres.DataDir
	old := dataDir + swapSuffix
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat(old); err != nil {
		return nil
	}
	if err := os.Rename(old, dataDir); err != nil {
		return fmt.Errorf("%s: put back the data directory a rebuild left in %s: %w", r.Name, old, err)
	}
	u.progress("%s: a rebuild was interrupted while it swapped the data directories; the old data directory is put back from %s",
		r.Name, old)
	return nil
}

// formatBytes writes n bytes in binary units.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, prefix := float64(n)/unit, "KMGTPE"
	i := 0
	for v >= unit && i < len(prefix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, prefix[i])
}

// quoteReason keeps a reason on one line.
func quoteReason(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
