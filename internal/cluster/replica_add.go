package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// ReplicaOptions configures the commands that change a cluster's
// replicas: AddReplica, RebuildReplica, RemoveReplica.
type ReplicaOptions struct {
	// Dir is the cluster directory.
	Dir string
	// Donor is the index of the replica to copy from; 0 picks the serving
	// replica with the highest version.
	Donor int
	// MaxRate bounds how fast the copy reads the donor's disk
	// (pg_basebackup --max-rate: "20M", "500k"; empty: no limit).
	MaxRate string
	// EmptyUnlogged copies although the donor's unlogged tables hold rows:
	// the copy holds them empty (checkCopy).
	EmptyUnlogged bool
	// DeleteData (remove) deletes the removed replica's directory instead
	// of moving it to DIR/removed/.
	DeleteData bool
	// Progress receives one line per step and the copy's progress; nil
	// discards.
	Progress io.Writer
	// ReadyTimeout bounds the wait for each process to be ready; for the
	// agent of a copy, until it has caught up (0: catchUpTimeout).
	ReadyTimeout time.Duration
}

func (o ReplicaOptions) copyOptions() copyOptions {
	return copyOptions{maxRate: o.MaxRate, emptyUnlogged: o.EmptyUnlogged}
}

// catchUpTimeout is how long a copy's agent may take to catch up from the
// certifier's log and admit clients: the log holds whatever the cluster
// committed during the copy.
const catchUpTimeout = 10 * time.Minute

// openCluster takes the cluster directory's lock and loads the cluster,
// for a command that changes its replicas.
func openCluster(o ReplicaOptions) (*upper, func(), error) {
	if o.Dir == "" {
		return nil, nil, errors.New("the cluster directory (--data-dir) is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, nil, err
	}
	if _, err := Load(dir); err != nil {
		return nil, nil, err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	st, err := Load(dir) // again, under the lock
	if err != nil {
		unlock()
		return nil, nil, err
	}
	st.Dir = dir
	st.setConfigPaths()
	timeout := o.ReadyTimeout
	if timeout <= 0 {
		timeout = catchUpTimeout
	}
	u := &upper{st: st, o: Options{Dir: dir, Binary: st.Binary, Progress: o.Progress, ReadyTimeout: timeout}, portsUsed: map[int]bool{}}
	for _, r := range st.Replicas {
		u.portsUsed[r.Postgres.Port] = true
	}
	return u, unlock, nil
}

// AddReplica adds a replica to the running cluster in o.Dir: the next free
// index, a copy of a donor's data directory taken while the donor serves,
// then its PostgreSQL and agent, which catches up from the certifier's log
// before it admits clients. The replica is recorded in cluster.json once
// its data directory is complete, before any of its processes starts.
func AddReplica(ctx context.Context, o ReplicaOptions) (*State, *Replica, error) {
	u, unlock, err := openCluster(o)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	r, err := u.addReplica(ctx, o.Donor, o.copyOptions())
	return u.st, r, err
}

func (u *upper) addReplica(ctx context.Context, donorIndex int, co copyOptions) (*Replica, error) {
	k, err := u.st.nextFreeIndex()
	if err != nil {
		return nil, err
	}
	r, err := newReplica(u.st.Dir, k, u.st.BasePort)
	if err != nil {
		return nil, err
	}
	if err := clearInterruptedAdd(r); err != nil {
		return nil, err
	}
	donor, err := u.chooseDonor(ctx, donorIndex, k)
	if err != nil {
		return nil, err
	}
	if err := checkCopy(ctx, donor, r, co); err != nil {
		return nil, err
	}
	if _, err := u.pgBinDir(ctx); err != nil { // before the copy, not after it
		return nil, err
	}
	if err := makeReplicaDir(r.Dir); err != nil {
		return nil, err
	}
	hold, err := u.holdLogForCopy(ctx, r, donor)
	if err != nil {
		return nil, err
	}
	defer hold.release()
	u.progress("%s: joining the cluster as replica index %d, copied from %s", r.Name, k, donor.Name)
	t := u.newTransfer("add", r, donor, "", false)
	if err := t.copyFromDonor(ctx, co.maxRate); err != nil {
		return nil, fmt.Errorf("%w\n(nothing was recorded; run `tashkent replica add --data-dir %s` again to start over)", err, u.st.Dir)
	}
	if _, err := installCopy(t.staging, r.Postgres.DataDir, false); err != nil {
		return nil, fmt.Errorf("%s: put the copy in place: %w", r.Name, err)
	}
	u.mu.Lock()
	u.st.addReplica(r)
	u.mu.Unlock()
	if err := ensureCertifierTLS(u.st); err != nil {
		return r, err
	}
	if err := u.save(); err != nil {
		return r, err
	}
	if err := t.startReplica(ctx); err != nil {
		return r, fmt.Errorf("%w\n(%s is recorded in the cluster: `tashkent up --data-dir %s` starts it again, "+
			"`tashkent replica remove --data-dir %s %d` takes it out)", err, r.Name, u.st.Dir, u.st.Dir, r.Index)
	}
	t.finish()
	return r, nil
}

// clearInterruptedAdd makes way for a new replica's directory: nothing
// there, or what an interrupted add of the same index left (its transfer
// record says so), which is removed. Anything else is not ours.
func clearInterruptedAdd(r *Replica) error {
	if _, err := os.Stat(r.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	rec := readTransfer(r.Dir)
	if rec == nil || rec.Kind != "add" {
		return fmt.Errorf("%s exists but is not a replica of the cluster: move it away, then add the replica again", r.Dir)
	}
	if err := clearStaging(r.Postgres.DataDir + stagingSuffix); err != nil {
		return err
	}
	if err := os.RemoveAll(r.Dir); err != nil {
		return fmt.Errorf("remove what an interrupted add left in %s: %w", r.Dir, err)
	}
	return nil
}

// makeReplicaDir creates a replica's directory, world-traversable: the
// postgres user must reach the data directory inside.
func makeReplicaDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Chmod(dir, 0o755)
}

// chooseDonor picks the replica to copy from: index want, which must
// serve, or (want 0) the serving replica with the highest version. A
// donor serves when its agent runs and serves and its gate is open: its
// data directory then holds a prefix of the cluster's versions, with
// nothing of its own.
func (u *upper) chooseDonor(ctx context.Context, want, target int) (*Replica, error) {
	if want != 0 {
		if want == target {
			return nil, fmt.Errorf("replica %d cannot be its own donor", want)
		}
		d := u.st.ReplicaByIndex(want)
		if d == nil {
			return nil, u.st.errNoReplica(want)
		}
		if _, err := donorVersion(ctx, d); err != nil {
			return nil, fmt.Errorf("%s cannot be the donor: %w", d.Name, err)
		}
		return d, nil
	}
	var (
		best  *Replica
		bestV uint64
		why   []error
	)
	for _, r := range u.st.Replicas {
		if r.Index == target {
			continue
		}
		v, err := donorVersion(ctx, r)
		if err != nil {
			why = append(why, fmt.Errorf("%s: %w", r.Name, err))
			continue
		}
		if best == nil || v > bestV {
			best, bestV = r, v
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no replica can be the donor (a donor's agent must serve and its gate be open; see `tashkent status --data-dir %s`): %w",
			u.st.Dir, errors.Join(why...))
	}
	return best, nil
}

// donorVersion checks that r serves and returns its version.
func donorVersion(ctx context.Context, r *Replica) (uint64, error) {
	if err := agentIdentity(&r.Agent).check(r.Agent.PID); err != nil {
		return 0, fmt.Errorf("its agent does not run: %w", err)
	}
	if err := agentServes(ctx, r, r.Agent.PID); err != nil {
		return 0, err
	}
	g, err := ReadGate(ctx, r.DSN())
	if err != nil {
		return 0, err
	}
	return g.Version, nil
}

// startReplica starts the copy's PostgreSQL and agent; the agent is ready
// once it has caught up and opened the gate. Meanwhile a line every
// catchUpPrintEvery shows the copy's version and the certifier's.
func (t *transfer) startReplica(ctx context.Context) error {
	r := t.target
	if err := t.u.startPostgres(ctx, r); err != nil {
		return err
	}
	t.setPhase("catching up")
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.watchCatchUp(wctx)
	}()
	err := t.u.startAgent(ctx, r)
	stop()
	<-done
	return err
}

// watchCatchUp shows the copy catching up until ctx ends.
func (t *transfer) watchCatchUp(ctx context.Context) {
	tick := time.NewTicker(catchUpPrintEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		g, err := ReadGate(ctx, t.target.DSN())
		if err != nil {
			continue
		}
		var target uint64
		if rep, err := t.u.st.QueryCertifier(ctx, t.u.st.CertifierAddr()); err == nil {
			target = rep.DurableVersion
		}
		t.mu.Lock()
		t.rec.Version, t.rec.TargetVersion = g.Version, target
		t.mu.Unlock()
		_ = t.save()
		if ctx.Err() == nil {
			t.u.progress("%s: catching up from the certifier's log: version %d of %d", t.target.Name, g.Version, target)
		}
	}
}
