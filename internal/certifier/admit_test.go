package certifier

import (
	"math/rand"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// modelEntry is one version of a history in the model: the epoch that
// certified it, and an id unique to the entry (the transaction).
type modelEntry struct{ epoch, id uint64 }

// raftLikeHistories builds the logs of a run of leaders (or single
// certifier generations), one per epoch, as Raft makes them: each new
// leader starts from a prefix of some earlier leader's log that holds
// everything committed, and appends entries of its own epoch; a stale
// leader may go on appending in its old epoch after a newer one exists.
// Each log is recorded at every length it reached (a replica may hold any
// prefix of one).
func raftLikeHistories(rng *rand.Rand) (leaders map[uint64][]modelEntry, epochs []uint64) {
	leaders = map[uint64][]modelEntry{}
	var committed []modelEntry
	nextID := uint64(1)
	appendTo := func(epoch uint64, n int) {
		for range n {
			leaders[epoch] = append(leaders[epoch], modelEntry{epoch: epoch, id: nextID})
			nextID++
		}
	}
	last := uint64(2 + rng.Intn(6))
	for epoch := uint64(1); epoch <= last; epoch++ {
		if rng.Intn(4) == 0 {
			epoch++ // epochs (Raft terms) in which nobody led
		}
		var bases []uint64
		for _, e := range epochs {
			if hasPrefix(leaders[e], committed) {
				bases = append(bases, e)
			}
		}
		base := committed
		if len(bases) > 0 {
			from := leaders[bases[rng.Intn(len(bases))]]
			base = from[:len(committed)+rng.Intn(len(from)-len(committed)+1)] // an uncommitted tail may be cut
		}
		leaders[epoch] = append([]modelEntry(nil), base...)
		epochs = append(epochs, epoch)
		appendTo(epoch, rng.Intn(6))
		if len(epochs) > 1 && rng.Intn(3) == 0 { // a stale leader goes on for a while
			stale := epochs[rng.Intn(len(epochs)-1)]
			appendTo(stale, 1+rng.Intn(3))
		}
		log := leaders[epoch]
		committed = log[:len(committed)+rng.Intn(len(log)-len(committed)+1)]
	}
	return leaders, epochs
}

func hasPrefix(log, prefix []modelEntry) bool {
	if len(log) < len(prefix) {
		return false
	}
	for i := range prefix {
		if log[i] != prefix[i] {
			return false
		}
	}
	return true
}

// runsOf is a history's runs as its holder records them.
func runsOf(history []modelEntry) []*pb.EpochRun {
	r := &logRuns{}
	for i, e := range history {
		r.note(e.epoch, uint64(i+1))
	}
	return r.view(1, uint64(len(history)))
}

// Admit against the model: a replica whose history is a prefix of the
// certifier's log is admitted, any other is refused: told to rewind to
// where the two part, or as needing a state transfer where they may part
// at or below the log's start (checkRefusal); one below the log's start
// is refused, as the behind-the-log rule says. The log no longer holds the versions at or below its start,
// but it knows the epoch of the entry at its start, which tells a replica
// exactly there apart. Where it does not (a log trimmed before it kept
// that epoch), a replica exactly at the start is admitted.
func TestAdmitAdmitsExactlyTheReplicasWhoseHistoryIsAPrefixOfTheLog(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	admitted, refused, refusedAtStart := 0, 0, 0
	for round := range 6000 {
		leaders, epochs := raftLikeHistories(rng)
		owner := leaders[epochs[rng.Intn(len(epochs))]]
		certLog := owner[:rng.Intn(len(owner)+1)]
		startsAfter := uint64(0)
		if len(certLog) > 0 && rng.Intn(3) == 0 {
			startsAfter = uint64(rng.Intn(len(certLog) + 1))
		}
		r := &logRuns{}
		for i, e := range certLog {
			r.note(e.epoch, uint64(i+1))
		}
		durable := uint64(len(certLog))
		log := LogHistory{Runs: r.view(startsAfter+1, durable), Durable: durable, StartsAfter: startsAfter}
		startKnown := startsAfter > 0 && rng.Intn(4) != 0
		if startKnown {
			log.StartEpoch = certLog[startsAfter-1].epoch
		}

		held := leaders[epochs[rng.Intn(len(epochs))]]
		replica := held[:rng.Intn(len(held)+1)]
		if startsAfter > 0 && len(held) >= int(startsAfter) && rng.Intn(3) == 0 {
			replica = held[:startsAfter] // exactly at the log's start
		}
		v := uint64(len(replica))
		open := &pb.OpenSession{Replica: "r", ReplicaVersion: v, History: runsOf(replica)}
		if v > 0 && len(open.History) == 0 {
			t.Fatalf("round %d: a history of %d versions has no runs", round, v)
		}

		want := v >= startsAfter && (hasPrefix(certLog, replica) || v == startsAfter && !startKnown)
		err := Admit(open, log)
		if got := err == nil; got != want {
			t.Fatalf("round %d: replica %v (runs %v) against log %v (runs %v, starts after %d in epoch %d): admitted %v, want %v (%v)",
				round, replica, open.History, certLog, log.Runs, startsAfter, log.StartEpoch, got, want, err)
		}
		if err != nil {
			refused++
			if v == startsAfter {
				refusedAtStart++
			}
			checkRefusal(t, round, err, replica, certLog, log)
		} else {
			admitted++
		}
	}
	if admitted < 300 || refused < 300 || refusedAtStart < 40 {
		t.Fatalf("the histories exercised too little: %d admitted, %d refused (%d exactly at the log's start)", admitted, refused, refusedAtStart)
	}
}

// checkRefusal checks a refusal against the model. The replica and the
// log agree on their first lcp versions. A replica below the log's start
// needs a state transfer. One that agrees with the log above the log's
// start (or a log that starts at version 1) is told to rewind to exactly
// lcp. Otherwise they may part at or
// below the start: a state transfer, or a rewind to the start if the log
// knows the epoch there and it agrees.
func checkRefusal(t *testing.T, round int, err error, replica, certLog []modelEntry, log LogHistory) {
	t.Helper()
	v, startsAfter := uint64(len(replica)), log.StartsAfter
	lcp := uint64(0)
	for lcp < v && lcp < uint64(len(certLog)) && replica[lcp] == certLog[lcp] {
		lcp++
	}
	msg := status.Convert(err).Message()
	rw, rewind := pb.RewindOf(err)
	switch {
	case status.Code(err) != codes.FailedPrecondition:
		t.Fatalf("round %d: refused with %v, want FailedPrecondition", round, err)
	case rewind && !strings.HasPrefix(msg, pb.NeedsRewind), !rewind && !strings.HasPrefix(msg, pb.NeedsStateTransfer):
		t.Fatalf("round %d: the refusal %q does not start with its verdict", round, msg)
	case v < startsAfter && rewind:
		t.Fatalf("round %d: a replica below the log's start told to rewind: %v", round, rw)
	case v >= startsAfter && (lcp > startsAfter || startsAfter == 0) && (!rewind || rw.CommonVersion != lcp):
		t.Fatalf("round %d: a replica agreeing with the log up to %d, above its start %d, refused with %q (detail %v): want a rewind to %d",
			round, lcp, startsAfter, msg, rw, lcp)
	case rewind && startsAfter > 0 && lcp <= startsAfter && (rw.CommonVersion != startsAfter || lcp != startsAfter || log.StartEpoch == 0):
		t.Fatalf("round %d: rewind to %v, but the replica and the log agree only on %d versions, the log starting after %d (epoch there %d)",
			round, rw, lcp, startsAfter, log.StartEpoch)
	case rewind && (rw.ReplicaVersion != v || rw.LogStartsAfter != startsAfter):
		t.Fatalf("round %d: rewind detail %v for a replica at %d, log starting after %d", round, rw, v, startsAfter)
	}
}

// The same version numbers with another history (a certifier re-created,
// or a data directory from elsewhere): the version alone would admit the
// replica; its epochs refuse it, and the refusal names where the histories
// part.
func TestAdmitRefusesAnotherHistoryAtTheSameVersions(t *testing.T) {
	log := LogHistory{Runs: []*pb.EpochRun{{Epoch: 1, FirstVersion: 1}, {Epoch: 2, FirstVersion: 41}}, Durable: 90}
	open := &pb.OpenSession{Replica: "r3", ReplicaVersion: 60,
		History: []*pb.EpochRun{{Epoch: 1, FirstVersion: 1}, {Epoch: 3, FirstVersion: 31}}}
	err := Admit(open, log)
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("Admit = %v, want FailedPrecondition", err)
	}
	msg := status.Convert(err).Message()
	if rw, ok := pb.RewindOf(err); !ok || rw.CommonVersion != 30 {
		t.Errorf("the refusal's detail is %v, want a rewind to version 30", rw)
	}
	for _, want := range []string{pb.NeedsRewind, `"r3"`, "version 60", "only up to version 30", "1@1..30 3@31..60", "1@1..40 2@41..90"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal %q does not say %q", msg, want)
		}
	}
	open.History = []*pb.EpochRun{{Epoch: 1, FirstVersion: 1}, {Epoch: 2, FirstVersion: 41}}
	if err := Admit(open, log); err != nil {
		t.Fatalf("the same history is refused: %v", err)
	}
}

// A replica that sends no history is judged by its version: admitted up to
// the durable version, refused above it and below the log's start.
func TestAdmitWithoutHistoryComparesVersionsOnly(t *testing.T) {
	log := LogHistory{Runs: []*pb.EpochRun{{Epoch: 4, FirstVersion: 11}}, Durable: 50, StartsAfter: 10}
	for v, admitted := range map[uint64]bool{9: false, 10: true, 50: true, 51: false} {
		err := Admit(&pb.OpenSession{Replica: "r", ReplicaVersion: v}, log)
		if (err == nil) != admitted {
			t.Errorf("version %d: Admit = %v, want admitted %v", v, err, admitted)
		}
	}
	if err := Admit(&pb.OpenSession{ReplicaVersion: 1}, log); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a session without a name: %v, want InvalidArgument", err)
	}
	bad := &pb.OpenSession{Replica: "r", ReplicaVersion: 5, History: []*pb.EpochRun{{Epoch: 2, FirstVersion: 3}, {Epoch: 1, FirstVersion: 4}}}
	if err := Admit(bad, log); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a history out of order: %v, want InvalidArgument", err)
	}
}

// A replica exactly at the log's start, or whose history meets the log
// only there, is compared at the start: the log keeps the epoch of the
// entry retention removed last. Where it does not know it, the start is
// taken as common, as the version alone would say.
func TestAdmitComparesAReplicaAtTheLogStartByTheEpochThere(t *testing.T) {
	log := LogHistory{Runs: []*pb.EpochRun{{Epoch: 5, FirstVersion: 11}}, Durable: 50, StartsAfter: 10, StartEpoch: 4}
	cases := []struct {
		name    string
		version uint64
		history []*pb.EpochRun
		common  uint64
	}{
		{"at the start, in its epoch", 10, []*pb.EpochRun{{Epoch: 4, FirstVersion: 1}}, 10},
		{"at the start, in another epoch", 10, []*pb.EpochRun{{Epoch: 3, FirstVersion: 1}}, 9},
		{"at the start, its last run beginning there", 10, []*pb.EpochRun{{Epoch: 1, FirstVersion: 1}, {Epoch: 4, FirstVersion: 10}}, 10},
		{"past the start, parted right after it", 20, []*pb.EpochRun{{Epoch: 4, FirstVersion: 1}, {Epoch: 6, FirstVersion: 11}}, 10},
		{"past the start, parted at it", 20, []*pb.EpochRun{{Epoch: 2, FirstVersion: 1}, {Epoch: 6, FirstVersion: 11}}, 9},
		{"past the start, in the log's epoch after it", 20, []*pb.EpochRun{{Epoch: 4, FirstVersion: 1}, {Epoch: 5, FirstVersion: 11}}, 20},
		{"a history recorded only after the start", 20, []*pb.EpochRun{{Epoch: 6, FirstVersion: 15}}, 10},
	}
	for _, c := range cases {
		if got := CommonVersion(c.history, c.version, log); got != c.common {
			t.Errorf("%s: common version %d, want %d", c.name, got, c.common)
		}
		err := Admit(&pb.OpenSession{Replica: "r", ReplicaVersion: c.version, History: c.history}, log)
		if (err == nil) != (c.common >= c.version) {
			t.Errorf("%s: Admit = %v, want admitted %v", c.name, err, c.common >= c.version)
		}
	}
	err := Admit(&pb.OpenSession{Replica: "r", ReplicaVersion: 10, History: []*pb.EpochRun{{Epoch: 3, FirstVersion: 1}}}, log)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "at most up to version 9") || !strings.Contains(msg, "starting after version 10, of epoch 4") {
		t.Errorf("the refusal %q does not say where the histories part and where the log starts", msg)
	}
	unknown := log
	unknown.StartEpoch = 0
	if err := Admit(&pb.OpenSession{Replica: "r", ReplicaVersion: 10, History: []*pb.EpochRun{{Epoch: 3, FirstVersion: 1}}}, unknown); err != nil {
		t.Errorf("a log that does not know the epoch at its start refuses a replica exactly there: %v", err)
	}
}
