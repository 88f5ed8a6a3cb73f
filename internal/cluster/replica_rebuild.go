package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// RebuildReplica replaces replica k's data directory with a copy of a
// donor's and catches it up (the same state transfer as AddReplica); the
// replica keeps its index, name and port. Its old data directory keeps
// running (a halted replica keeps refusing clients) until the copy is
// complete; then its agent and PostgreSQL are stopped, the directories
// exchanged, and the replica started on the copy.
func RebuildReplica(ctx context.Context, o ReplicaOptions, k int) (*State, error) {
	u, unlock, err := openCluster(o)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r := u.st.ReplicaByIndex(k)
	if r == nil {
		return u.st, u.st.errNoReplica(k)
	}
	reason := "asked for with tashkent replica rebuild"
	if why, halted := haltedHealth(AgentHealth(ctx, r.Agent.MetricsPort)); halted {
		reason += "; the agent had halted: " + why
	}
	return u.st, u.rebuildReplica(ctx, r, rebuildRequest{donor: o.Donor, copy: o.copyOptions(), reason: reason})
}

// rebuildRequest says where a rebuild copies from and why.
type rebuildRequest struct {
	donor     int
	copy      copyOptions
	reason    string
	automatic bool
}

func (u *upper) rebuildReplica(ctx context.Context, r *Replica, req rebuildRequest) error {
	donor, err := u.chooseDonor(ctx, req.donor, r.Index)
	if err != nil {
		return err
	}
	if err := u.finishDataDirSwap(r); err != nil {
		return err
	}
	if err := checkCopy(ctx, donor, r, req.copy); err != nil {
		return err
	}
	if _, err := u.pgBinDir(ctx); err != nil { // before the copy, not after it
		return err
	}
	how := "rebuilding it"
	if req.automatic {
		how = "rebuilding it automatically"
	}
	note := fmt.Sprintf("%s: %s from %s (%s)", r.Name, how, donor.Name, req.reason)
	u.progress("%s", note)
	appendLogNote(r.Agent.Log, note)
	hold, err := u.holdLogForCopy(ctx, r, donor)
	if err != nil {
		return err
	}
	defer hold.release()
	t := u.newTransfer("rebuild", r, donor, req.reason, req.automatic)
	if err := t.copyFromDonor(ctx, req.copy.maxRate); err != nil {
		return fmt.Errorf("%w\n(%s still runs on its old data; run `tashkent replica rebuild --data-dir %s %d` again to start over)",
			err, r.Name, u.st.Dir, r.Index)
	}
	exchange := canExchange(r.Dir)
	if !exchange {
		u.progress("%s: the file system of %s cannot exchange two directories atomically; the copy is put in place by two renames",
			r.Name, r.Dir)
	}
	if err := u.stopReplica(ctx, r); err != nil {
		return err
	}
	old, err := installCopy(t.staging, r.Postgres.DataDir, exchange)
	if err != nil {
		return fmt.Errorf("%s: put the copy in place: %w", r.Name, err)
	}
	u.keepRebuiltData(r, old)
	u.mu.Lock()
	r.Rebuilt = &Rebuilt{At: time.Now().UTC().Truncate(time.Second), Donor: donor.Name, Reason: req.reason, Automatic: req.automatic}
	u.mu.Unlock()
	if err := u.save(); err != nil {
		return err
	}
	if err := t.startReplica(ctx); err != nil {
		return fmt.Errorf("%w\n(%s holds the copy; `tashkent up --data-dir %s` starts it again)", err, r.Name, u.st.Dir)
	}
	t.finish()
	appendLogNote(r.Agent.Log, fmt.Sprintf("%s: rebuilt from %s; it serves", r.Name, donor.Name))
	return nil
}

// rebuiltDirInfix names, in DIR/removed/, the directory that keeps a
// replica's data directory from before its last rebuild:
// replicaK-rebuilt-<UTC time>/pgdata.
const rebuiltDirInfix = "-rebuilt-"

// keepRebuiltData moves the data directory a rebuild replaced (at old) to
// DIR/removed/replicaK-rebuilt-<time>/pgdata, removing the one kept from
// the replica's rebuild before: only the last is kept, so that a replica
// rebuilt again and again does not fill the disk. Should the move fail,
// the old data is deleted.
func (u *upper) keepRebuiltData(r *Replica, old string) {
	parent := filepath.Join(u.st.Dir, removedDirName)
	earlier, _ := filepath.Glob(filepath.Join(parent, r.Name+rebuiltDirInfix+"*"))
	for _, d := range earlier {
		os.RemoveAll(d)
	}
	kept := filepath.Join(parent, r.Name+rebuiltDirInfix+time.Now().UTC().Format("20060102T150405Z"))
	err := os.MkdirAll(kept, 0o755)
	if err == nil {
		err = os.Rename(old, filepath.Join(kept, "pgdata"))
	}
	if err != nil {
		u.progress("%s: the data directory from before the rebuild cannot be kept (%v); it is deleted", r.Name, err)
		os.RemoveAll(old)
		os.Remove(kept)
		return
	}
	u.progress("%s: the data directory from before the rebuild is kept in %s (until the replica's next rebuild)",
		r.Name, filepath.Join(kept, "pgdata"))
}

// stopReplica stops r's agent (which closes the gate first), then its
// PostgreSQL, and records both stopped.
func (u *upper) stopReplica(ctx context.Context, r *Replica) error {
	u.mu.Lock()
	pid := r.Agent.PID
	u.mu.Unlock()
	s, err := stopTashkent(ctx, "agent", r.Name, agentIdentity(&r.Agent), &pid, agentStopGrace)
	u.progress("%s", s)
	if err != nil {
		return err
	}
	u.mu.Lock()
	r.Agent.PID = 0
	u.mu.Unlock()
	if err := u.save(); err != nil {
		return err
	}
	s, err = stopPostgres(ctx, r)
	u.progress("%s", s)
	if err != nil {
		return err
	}
	return u.save()
}

// appendLogNote writes a line of tashkent's own into a process's log, in
// the form of the lines that mark each start.
func appendLogNote(path, note string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "--- %s: %s\n", time.Now().Format(time.RFC3339), note)
}
