package certifier

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// LogHistory is what admission compares a replica's history with: the
// runs of the certifier's log over the versions (StartsAfter, Durable]
// (logRuns.view), and the epoch of its entry at StartsAfter, the last
// version log retention removed.
type LogHistory struct {
	Runs        []*pb.EpochRun
	Durable     uint64
	StartsAfter uint64
	// StartEpoch is the epoch of the entry at StartsAfter; 0 when the log
	// does not know it (StartsAfter is 0, the log was trimmed before the
	// certifier kept it, or the entry predates epochs: epoch 0 names no
	// history).
	StartEpoch uint64
}

// Admit judges a session: nil admits it; otherwise it is the status the
// stream ends with. FailedPrecondition with a message that starts with
// pb.NeedsRewind (and a pb.RewindRequired detail) tells the agent that its
// replica holds versions the log does not (its history is not a prefix of
// the log): it must go back to the common version, or be rebuilt. One
// that starts with pb.NeedsStateTransfer tells it that its replica must be
// rebuilt from a peer: it needs versions the log no longer holds.
//
// A replica that sends its history (OpenSession.history) is compared by
// log matching (CommonVersion). One that sends none is judged by its
// version alone: it may not be ahead of the durable version.
func Admit(open *pb.OpenSession, log LogHistory) error {
	if open == nil || open.Replica == "" {
		return status.Error(codes.InvalidArgument, "the first message of a Certify stream must open a session with the replica's name")
	}
	v := open.ReplicaVersion
	if len(open.History) == 0 && v > log.Durable {
		return status.Errorf(codes.FailedPrecondition,
			"%s: replica %q is at version %d but the certifier's durable version is %d: the replica holds versions this certifier never made durable (failed versions); rebuild it from a peer",
			pb.NeedsStateTransfer, open.Replica, v, log.Durable)
	}
	if len(open.History) > 0 {
		if err := checkRuns(open.History); err != nil {
			return status.Errorf(codes.InvalidArgument, "replica %q sent a history that is not in version order: %v", open.Replica, err)
		}
		if c := CommonVersion(open.History, v, log); c < v {
			return errHistoryParts(open, c, log)
		}
	}
	if v < log.StartsAfter {
		return errBehindLog(open.Replica, v, log.StartsAfter)
	}
	return nil
}

// errHistoryParts refuses a replica whose history agrees with the log only
// up to version c, below its own. Above the log's start, it must go back
// to c or below (pb.NeedsRewind, with a pb.RewindRequired detail). Where
// the two may part at or below the log's start (c below it, or at it with
// the epoch there unknown), nothing in the log can bring the replica back
// to a common version: it needs a state transfer.
func errHistoryParts(open *pb.OpenSession, c uint64, log LogHistory) error {
	v := open.ReplicaVersion
	verdict, remedy := pb.NeedsRewind, "it must undo them, or be rebuilt from a peer (the supervisor does it by itself)"
	unverified := c == log.StartsAfter && c > 0 && log.StartEpoch == 0
	if c < log.StartsAfter || unverified {
		verdict, remedy = pb.NeedsStateTransfer, "rebuild it from a peer (the supervisor does it by itself)"
	}
	st := status.Newf(codes.FailedPrecondition,
		"%s: replica %q is at version %d, but its history agrees with the certifier's log %s up to version %d "+
			"(replica's epochs %s; the log's epochs %s, durable up to %d%s): the replica holds versions this certifier's log does not "+
			"(failed versions, or another history at the same version numbers); %s",
		verdict, open.Replica, v, agreesHowFar(c, log), c, formatRuns(open.History, v), formatRuns(log.Runs, log.Durable), log.Durable,
		describeLogStart(log), remedy)
	if verdict != pb.NeedsRewind {
		return st.Err()
	}
	detailed, err := st.WithDetails(&pb.RewindRequired{CommonVersion: c, ReplicaVersion: v, LogStartsAfter: log.StartsAfter})
	if err != nil {
		return st.Err() // the detail is an addition: the message says it all
	}
	return detailed.Err()
}

// CommonVersion is the highest version up to which a replica's history
// (runs over versions 1..version) and the log agree. Within one epoch one
// process assigns versions append-only and never reassigns one, so two
// histories that hold version x with the same epoch hold the same entries
// up to x (log matching, as in Raft). Epochs grow along both histories,
// so the first of the replica's runs, from the top, that shares a version
// with the log's run of its epoch gives the answer: the highest version
// they share. If none does, the log's start decides (commonAtLogStart).
//
// A result below log.StartsAfter is only an upper bound (the log holds
// nothing there to compare): such a replica needs a state transfer, never
// a rewind to it.
func CommonVersion(replica []*pb.EpochRun, version uint64, log LogHistory) uint64 {
	for i := len(replica) - 1; i >= 0; i-- {
		first, last, ok := runSpan(replica, i, version)
		if !ok {
			continue
		}
		j := runOfEpoch(log.Runs, replica[i].GetEpoch())
		if j < 0 {
			continue
		}
		logFirst, logLast, ok := runSpan(log.Runs, j, log.Durable)
		if !ok {
			continue
		}
		if lo, hi := max(first, logFirst), min(last, logLast); lo <= hi {
			return hi
		}
	}
	return commonAtLogStart(replica, version, log)
}

// commonAtLogStart is CommonVersion when no run of the replica shares a
// version with the log after its start. Below the start nothing can be
// compared, but the log keeps the epoch of its entry at StartsAfter: a
// replica that holds that version in the same epoch agrees with the log
// up to it; one that holds it in another epoch agrees at most up to the
// version before. Where the log does not know that epoch (StartEpoch 0),
// or the replica's history does not reach back to StartsAfter (its runs
// were first recorded later), the start is taken as common, as the
// version alone would say: such a replica exactly at the start is
// admitted without a comparison.
func commonAtLogStart(replica []*pb.EpochRun, version uint64, log LogHistory) uint64 {
	start := log.StartsAfter
	if start == 0 || log.StartEpoch == 0 || version < start {
		return start
	}
	i := runHolding(replica, start, version)
	if i < 0 || replica[i].GetEpoch() == log.StartEpoch {
		return start
	}
	return start - 1
}

// agreesHowFar qualifies a refusal's common version c: exact when the log
// holds the versions it was found by, an upper bound below its start.
func agreesHowFar(c uint64, log LogHistory) string {
	if c < log.StartsAfter {
		return "at most"
	}
	return "only"
}

// runHolding is the index of the run of runs (a history that ends at
// top) that holds version, -1 if none does.
func runHolding(runs []*pb.EpochRun, version, top uint64) int {
	for i := len(runs) - 1; i >= 0; i-- {
		if first, last, ok := runSpan(runs, i, top); ok && first <= version && version <= last {
			return i
		}
	}
	return -1
}

// runSpan is the versions run i of runs holds in a history that ends at
// top; ok is false if it holds none.
func runSpan(runs []*pb.EpochRun, i int, top uint64) (first, last uint64, ok bool) {
	first, last = runs[i].GetFirstVersion(), top
	if i+1 < len(runs) {
		last = min(last, runs[i+1].GetFirstVersion()-1)
	}
	return first, last, first >= 1 && first <= last
}

// runOfEpoch is the index of the run of epoch in runs, -1 if none.
func runOfEpoch(runs []*pb.EpochRun, epoch uint64) int {
	for j := len(runs) - 1; j >= 0; j-- {
		if runs[j].GetEpoch() == epoch {
			return j
		}
	}
	return -1
}

// checkRuns: first versions and epochs increase from run to run.
func checkRuns(runs []*pb.EpochRun) error {
	for i := 1; i < len(runs); i++ {
		if runs[i].GetFirstVersion() <= runs[i-1].GetFirstVersion() || runs[i].GetEpoch() <= runs[i-1].GetEpoch() {
			return fmt.Errorf("run %d (epoch %d from version %d) follows epoch %d from version %d",
				i, runs[i].GetEpoch(), runs[i].GetFirstVersion(), runs[i-1].GetEpoch(), runs[i-1].GetFirstVersion())
		}
	}
	return nil
}

// formatRuns shows a history ending at top as epoch@first..last, at most
// the last historyShownMax runs.
func formatRuns(runs []*pb.EpochRun, top uint64) string {
	var b strings.Builder
	b.WriteByte('[')
	from := max(0, len(runs)-historyShownMax)
	if from > 0 {
		b.WriteString("... ")
	}
	for i := from; i < len(runs); i++ {
		if i > from {
			b.WriteByte(' ')
		}
		first, last, _ := runSpan(runs, i, top)
		fmt.Fprintf(&b, "%d@%d..%d", runs[i].GetEpoch(), first, last)
	}
	b.WriteByte(']')
	return b.String()
}

// describeLogStart says where the log starts, for a refusal.
func describeLogStart(log LogHistory) string {
	switch {
	case log.StartsAfter == 0:
		return ""
	case log.StartEpoch == 0:
		return fmt.Sprintf(", starting after version %d, whose epoch it does not know", log.StartsAfter)
	}
	return fmt.Sprintf(", starting after version %d, of epoch %d", log.StartsAfter, log.StartEpoch)
}

// historyShownMax bounds the runs a refusal names: the recent ones are
// where histories part.
const historyShownMax = 4
