package cluster

import (
	"fmt"
	"io"
	"path/filepath"
	"time"
)

// TransferStatus is a state transfer in progress (Running) or interrupted.
type TransferStatus struct {
	Transfer
	Running bool `json:"running"`
}

// membershipStatus adds to s what concerns replicas joining, being
// rebuilt or rebuilt: the transfer records in the replicas' directories
// (and in directories of replicas being added, not recorded yet), each
// replica's last rebuild, and the supervisor.
func membershipStatus(st *State, s *Status) {
	for i, r := range st.Replicas {
		s.Replicas[i].Index = r.Index
		s.Replicas[i].Rebuilt = r.Rebuilt
		if rec := readTransfer(r.Dir); rec != nil {
			s.Replicas[i].Transfer = &TransferStatus{Transfer: *rec, Running: transferRuns(st, rec)}
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(st.Dir, "replica*"))
	for _, d := range dirs {
		rec := readTransfer(d)
		if rec == nil || rec.Kind != "add" || st.ReplicaByIndex(rec.Index) != nil {
			continue
		}
		s.Joining = append(s.Joining, TransferStatus{Transfer: *rec, Running: transferRuns(st, rec)})
	}
	s.AutoRebuild = st.AutoRebuild
	if sup := st.Supervisor; sup != nil || st.AutoRebuild {
		p := ProcStatus{}
		if sup != nil {
			p = ProcStatus{PID: sup.PID, Log: sup.Log}
			p.Running, p.Detail = tashkentRunning(supervisorIdentity(st.Dir), sup.PID)
		}
		s.Supervisor = &p
		s.Healthy = s.Healthy && (p.Running || !st.AutoRebuild)
	}
}

// transferRuns reports whether the process that recorded a transfer still
// runs it: it is alive and runs the cluster's tashkent binary.
func transferRuns(st *State, rec *Transfer) bool {
	args, err := cmdline(rec.PID)
	return err == nil && len(args) > 0 && (args[0] == st.Binary || filepath.Base(args[0]) == filepath.Base(st.Binary))
}

// line is a transfer onto a replica of the cluster in dir for people;
// joining: the replica is being added and cluster.json does not record it
// (yet).
func (t *TransferStatus) line(dir string, joining bool) string {
	what := t.Kind
	if t.Automatic {
		what = "automatic " + what
	}
	started := t.Started.Format(time.RFC3339)
	again := fmt.Sprintf("tashkent replica rebuild --data-dir %s %d", dir, t.Index)
	if joining {
		again = "tashkent replica add --data-dir " + dir
	}
	switch {
	case !t.Running && t.Phase == "copying":
		return fmt.Sprintf("%s from %s INTERRUPTED while copying (started %s); run `%s` again to start over", what, t.Donor, started, again)
	case !t.Running && joining:
		return fmt.Sprintf("%s from %s INTERRUPTED after the copy, before the replica was recorded (started %s); "+
			"run `%s` again to start over", what, t.Donor, started, again)
	case !t.Running:
		return fmt.Sprintf("%s from %s INTERRUPTED after the copy (started %s); `tashkent up --data-dir %s` starts the replica "+
			"(on the copy once it is in place, else on its old data)", what, t.Donor, started, dir)
	}
	switch t.Phase {
	case "copying":
		return fmt.Sprintf("%s in progress: %s", what, t.progressLine())
	case "catching up":
		return fmt.Sprintf("%s in progress: copied from %s, catching up: version %d of %d", what, t.Donor, t.Version, t.TargetVersion)
	}
	return fmt.Sprintf("%s in progress: copied from %s, %s", what, t.Donor, t.Phase)
}

// writeSupervisor prints the supervisor's line of the table.
func (s *Status) writeSupervisor(w io.Writer) {
	if s.Supervisor == nil {
		return
	}
	state := procWord(*s.Supervisor)
	if s.Supervisor.Running {
		state = fmt.Sprintf("pid %d up", s.Supervisor.PID)
	}
	auto := "on"
	if !s.AutoRebuild {
		auto = "off"
	}
	fmt.Fprintf(w, "supervisor %s  (automatic rebuild of a halted replica: %s)\n", state, auto)
}

// membershipNotes are the table's notes on transfers and rebuilds.
func (s *Status) membershipNotes() []string {
	var notes []string
	for _, r := range s.Replicas {
		if r.Transfer != nil {
			notes = append(notes, fmt.Sprintf("%s: %s", r.Name, r.Transfer.line(s.Dir, false)))
		}
		if b := r.Rebuilt; b != nil {
			how := "rebuilt"
			if b.Automatic {
				how = "rebuilt automatically"
			}
			notes = append(notes, fmt.Sprintf("%s: %s at %s from %s (%s)", r.Name, how, b.At.Format(time.RFC3339), b.Donor, b.Reason))
		}
	}
	for _, j := range s.Joining {
		notes = append(notes, fmt.Sprintf("%s (joining): %s", j.Replica, j.line(s.Dir, true)))
	}
	return notes
}
