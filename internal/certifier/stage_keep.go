package certifier

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/fsutil"
)

// Spools that survive a restart (a certifier group). A member's stage of
// a committed span may be the copy its versioned log needs after a crash:
// a majority held the stage, synced, when the decision was proposed. So a
// group member syncs a spool when its stage completes and writes a
// completion record beside it (the spool's name plus completionSuffix:
// its fragments, bytes, last fragment's size, file size and checksum,
// StagedWriteset.Checksum), synced too.
// At Open a spool whose record matches it is a complete stage again;
// anything else was cut short by a crash and is removed.

const (
	spoolSuffix      = ".spool"
	completionSuffix = ".done"
)

func completionPath(spool string) string { return spool + completionSuffix }

// completion is a complete stage's record.
type completion struct {
	fragments    uint32
	bytes        uint64
	lastFragment int
	fileBytes    int64
	checksum     uint32
}

func (c completion) String() string {
	return fmt.Sprintf("%d %d %d %d %d\n", c.fragments, c.bytes, c.lastFragment, c.fileBytes, c.checksum)
}

// seal makes txn's spool durable in an area that keeps its spools: the
// file synced, then its completion record written and synced, then the
// directory. Elsewhere it does nothing.
func (a *stagingArea) seal(txn certification.TxnID, f *os.File) error {
	if !a.keep {
		return nil
	}
	a.mu.Lock()
	t := a.txns[txn]
	c := completion{fragments: t.staged.Fragments, bytes: t.staged.Bytes, lastFragment: t.staged.LastFragmentBytes, fileBytes: t.fileBytes,
		checksum: t.staged.Checksum}
	a.mu.Unlock()
	if err := f.Sync(); err != nil {
		return status.Errorf(codes.Internal, "sync the spool file: %v", err)
	}
	if err := writeSynced(completionPath(t.path), []byte(c.String())); err != nil {
		return status.Errorf(codes.Internal, "write the spool's completion record: %v", err)
	}
	if err := fsutil.SyncDir(a.dir); err != nil {
		return status.Errorf(codes.Internal, "sync the stage directory: %v", err)
	}
	return nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// openKeptStagingArea opens a group member's stage directory: the
// complete stages of the last run are kept, each to wait 2×stageIdleMax
// from now (not from when it completed: a member down longer than that
// may still learn of a commit that needs its copy; a stage that ends
// without a commit is removed at its leader's word, StageDiscard); every
// other file is removed.
func openKeptStagingArea(dataDir string, bytesMax int64, logger *slog.Logger) (*stagingArea, error) {
	dir := filepath.Join(dataDir, stageDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the stage directory: %w", err)
	}
	a := newStagingArea(dir, bytesMax)
	a.keep = true
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the stage directory: %w", err)
	}
	removed := 0
	for _, e := range names {
		name := e.Name()
		if strings.HasSuffix(name, completionSuffix) {
			if _, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(name, completionSuffix))); err == nil {
				continue // read with its spool
			}
		} else if a.keepSpool(name) {
			continue
		}
		switch err := os.Remove(filepath.Join(dir, name)); {
		case err == nil:
			removed++
		case !errors.Is(err, fs.ErrNotExist): // a record removed with its spool
			return nil, fmt.Errorf("remove %s, left by a stage the last run did not complete: %w", name, err)
		}
	}
	if len(a.txns) > 0 || removed > 0 {
		logger.Info("certifier group: stage directory recovered", "complete_stages_kept", len(a.txns), "files_removed", removed, "bytes_held", a.held)
	}
	return a, nil
}

// keepSpool registers the spool file name as a complete stage if its
// completion record matches it; false (the caller removes the spool and
// its record) if not.
func (a *stagingArea) keepSpool(name string) bool {
	txn, ok := parseSpoolName(name)
	if !ok {
		return false
	}
	path := filepath.Join(a.dir, name)
	c, err := readCompletion(completionPath(path))
	if err != nil {
		_ = os.Remove(completionPath(path))
		return false
	}
	if info, err := os.Stat(path); err != nil || info.Size() != c.fileBytes {
		_ = os.Remove(completionPath(path))
		return false
	}
	a.txns[txn] = &stagedTxn{path: path, fileBytes: c.fileBytes, complete: true, completed: time.Now(), idleMax: 2 * stageIdleMax,
		staged: StagedWriteset{Fragments: c.fragments, Bytes: c.bytes, LastFragmentBytes: c.lastFragment, Checksum: c.checksum, Spool: path}}
	a.held += c.fileBytes
	return true
}

// parseSpoolName reads the transaction back from a spool file's name
// (spoolPath).
func parseSpoolName(name string) (certification.TxnID, bool) {
	base, ok := strings.CutSuffix(name, spoolSuffix)
	if !ok {
		return certification.TxnID{}, false
	}
	originHex, seqText, ok := strings.Cut(base, "-")
	if !ok {
		return certification.TxnID{}, false
	}
	origin, err := hex.DecodeString(originHex)
	if err != nil {
		return certification.TxnID{}, false
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return certification.TxnID{}, false
	}
	return certification.TxnID{Origin: string(origin), Seq: seq}, true
}

// readCompletion reads a completion record; a torn or foreign one is an
// error.
func readCompletion(path string) (completion, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return completion{}, err
	}
	var c completion
	if _, err := fmt.Sscanf(string(b), "%d %d %d %d %d\n", &c.fragments, &c.bytes, &c.lastFragment, &c.fileBytes, &c.checksum); err != nil || c.String() != string(b) {
		return completion{}, fmt.Errorf("spool completion record %s does not read back", path)
	}
	return c, nil
}
