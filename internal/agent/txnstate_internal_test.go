package agent

import (
	"strings"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
)

// The states of Kashi §2.2.1 (property 2) as stateOf judges them, on a
// history of three epochs: 3 from version 1, 5 from 50, 7 from 100,
// covered up to 120, durable up to 110.
func TestStateOfJudgesByTheHistoryAndTheDurableVersion(t *testing.T) {
	runs := []*pb.EpochRun{{Epoch: 3, FirstVersion: 1}, {Epoch: 5, FirstVersion: 50}, {Epoch: 7, FirstVersion: 100}}
	const through, durable = 120, 110
	given := func(v, e uint64) wire.StateQuery { return wire.StateQuery{Version: v, HasEpoch: true, Epoch: e} }
	none := func(v uint64) wire.StateQuery { return wire.StateQuery{Version: v} }
	for _, c := range []struct {
		why     string
		q       wire.StateQuery
		want    wire.TxnState
		forGood bool
	}{
		{"the history's epoch at a durable version", given(20, 3), wire.StateDurable, false},
		{"the first version of a run", given(50, 5), wire.StateDurable, false},
		{"covered, above the durable version", given(115, 7), wire.StateCommitted, false},
		{"no epoch: the history's at the version", none(60), wire.StateDurable, false},
		{"no epoch, above the durable version", none(115), wire.StateCommitted, false},
		{"no epoch, beyond what the history covers", none(121), wire.StateUnknown, false},
		{"an older epoch than the one at the version: its run ended before it", given(60, 3), wire.StateFailed, false},
		{"an older epoch with no run, where a later epoch began", given(105, 4), wire.StateFailed, false},
		{"an older epoch, beyond what the history covers", given(130, 5), wire.StateFailed, false},
		{"the current epoch, beyond what the history covers: not decided yet", given(130, 7), wire.StateUnknown, false},
		{"a newer epoch than the one at a covered durable version", given(20, 5), wire.StateUnknown, true},
		{"a newer epoch than the one at a covered version above the durable one", given(115, 9), wire.StateUnknown, false},
		{"an epoch the replica has not seen", given(130, 9), wire.StateUnknown, false},
		{"a newer epoch with no run, below where a later one began", given(20, 4), wire.StateUnknown, true},
	} {
		got, forGood := stateOf(runs, through, durable, c.q)
		if got != c.want || (forGood != "") != c.forGood {
			t.Errorf("%s: %+v is %v (for good: %q), want %v (for good: %v)", c.why, c.q, got, forGood, c.want, c.forGood)
		}
	}
}

// A version below the history's first run has no record here: unknown
// for good, whatever the epoch. Any version of a replica without a run
// yet is unknown until one comes.
func TestStateOfIsUnknownWithoutARecord(t *testing.T) {
	runs := []*pb.EpochRun{{Epoch: 7, FirstVersion: 100}}
	for _, q := range []wire.StateQuery{{Version: 50, HasEpoch: true, Epoch: 3}, {Version: 50}, {Version: 99, HasEpoch: true, Epoch: 7}} {
		if got, forGood := stateOf(runs, 120, 120, q); got != wire.StateUnknown || !strings.Contains(forGood, "begins at version 100") {
			t.Errorf("%+v below the history's first run: %v (%q), want unknown for good, saying where the history begins", q, got, forGood)
		}
		if got, forGood := stateOf(nil, 120, 120, q); got != wire.StateUnknown || forGood != "" {
			t.Errorf("%+v without a run: %v (%q), want unknown, not for good", q, got, forGood)
		}
	}
}

// The history answers only once it is read from the database, and a
// commit's epoch is the one its run holds.
func TestHistoryAnswersOnceLoaded(t *testing.T) {
	h := &history{}
	if a := h.stateOf(10, certifierEpoch{}, wire.StateQuery{Version: 1}); a.State != wire.StateUnavailable || a.Text == "" {
		t.Fatalf("a history not read yet answered %+v, want unavailable with why", a)
	}
	h.runs, h.loaded, h.through = []*pb.EpochRun{{Epoch: 3, FirstVersion: 1}, {Epoch: 5, FirstVersion: 8}}, true, 9
	if a := h.stateOf(10, certifierEpoch{}, wire.StateQuery{Version: 9}); a.State != wire.StateDurable || !a.Final || a.Durable != 10 {
		t.Fatalf("version 9 of a history covering it: %+v, want durable (final) with durable version 10", a)
	}
	if a := h.stateOf(8, certifierEpoch{}, wire.StateQuery{Version: 9}); a.State != wire.StateCommitted || a.Final {
		t.Fatalf("version 9 above the durable version: %+v, want committed, not final", a)
	}
	if a := h.stateOf(10, certifierEpoch{}, wire.StateQuery{Version: 9, HasEpoch: true, Epoch: 6}); a.State != wire.StateUnknown || !a.Final || a.Text == "" {
		t.Fatalf("version 9 in an epoch newer than its durable one: %+v, want unknown, final, with why", a)
	}
	if e := h.epochOf(7); e != 3 {
		t.Fatalf("the epoch at version 7 is %d, want 3", e)
	}
}

// txn_state is judged only on a history the certifier admitted, by the
// durable version of the admitted streams: not before the first message
// of a stream, nor after a refusal (a replica that must be rewound or
// rebuilt may hold failed versions that another epoch's durable version
// passed), until a stream admits it again.
func TestTxnStateAnswersOnlyOnAnAdmittedHistory(t *testing.T) {
	a := &Agent{durable: newDurableWatch(), state: StateCatchingUp}
	r := &run{a: a, history: &history{runs: []*pb.EpochRun{{Epoch: 3, FirstVersion: 1}}, loaded: true, through: 9}}
	a.run = r
	q := wire.StateQuery{Version: 9, HasEpoch: true, Epoch: 3}
	if got := a.judgeState(q); got.State != wire.StateUnavailable || !strings.Contains(got.Text, "not admitted") {
		t.Fatalf("before the stream's first message: %+v, want unavailable, not admitted yet", got)
	}
	r.admission.heard(10)
	if got := a.judgeState(q); got.State != wire.StateDurable || got.Durable != 10 {
		t.Fatalf("once admitted at durable version 10: %+v, want durable", got)
	}
	r.admission.refuse("needs state transfer: another history")
	if got := a.judgeState(q); got.State != wire.StateUnavailable || !strings.Contains(got.Text, "another history") || got.Durable != 0 {
		t.Fatalf("after a refusal: %+v, want unavailable naming the refusal, no durable version", got)
	}
	r.admission.heard(8)
	if got := a.judgeState(q); got.State != wire.StateDurable || got.Durable != 10 {
		t.Fatalf("admitted again: %+v, want durable by the highest durable version heard (10)", got)
	}
}

// A transaction of an earlier epoch at or above the version the
// certifier's epoch begins at has failed, even before an entry of the new
// epoch reached the replica: the history alone says unknown.
func TestAnEarlierEpochAboveTheCertifiersFirstVersionHasFailed(t *testing.T) {
	h := &history{loaded: true, runs: []*pb.EpochRun{{Epoch: 7, FirstVersion: 100}}, through: 120}
	certifying := certifierEpoch{epoch: 9, firstVersion: 121}
	failed := wire.StateQuery{Version: 125, HasEpoch: true, Epoch: 7}
	if a := h.stateOf(120, certifierEpoch{}, failed); a.State != wire.StateUnknown || a.Final {
		t.Fatalf("without the certifier's epoch: %v (final %v), want unknown, not final", a.State, a.Final)
	}
	if a := h.stateOf(120, certifying, failed); a.State != wire.StateFailed || !a.Final {
		t.Fatalf("version 125 of epoch 7 under a certifier of epoch 9 from version 121: %v, want failed", a.State)
	}
	for _, q := range []wire.StateQuery{
		{Version: 120, HasEpoch: true, Epoch: 7}, // below 121: the history's, durable
		{Version: 125, HasEpoch: true, Epoch: 9}, // the certifier's own epoch: not decided yet
		{Version: 125},                           // no epoch named
	} {
		if a := h.stateOf(120, certifying, q); a.State == wire.StateFailed {
			t.Errorf("%+v is failed under a certifier of epoch 9 from version 121", q)
		}
	}
}
