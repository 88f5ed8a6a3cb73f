package agent

import (
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
		why  string
		q    wire.StateQuery
		want wire.TxnState
	}{
		{"the history's epoch at a durable version", given(20, 3), wire.StateDurable},
		{"the first version of a run", given(50, 5), wire.StateDurable},
		{"covered, above the durable version", given(115, 7), wire.StateCommitted},
		{"no epoch: the history's at the version", none(60), wire.StateDurable},
		{"no epoch, above the durable version", none(115), wire.StateCommitted},
		{"no epoch, beyond what the history covers", none(121), wire.StateUnknown},
		{"an older epoch than the one at the version: its run ended before it", given(60, 3), wire.StateFailed},
		{"an older epoch with no run, where a later epoch began", given(105, 4), wire.StateFailed},
		{"an older epoch, beyond what the history covers", given(130, 5), wire.StateFailed},
		{"the current epoch, beyond what the history covers: not decided yet", given(130, 7), wire.StateUnknown},
		{"a newer epoch than the one at a covered version", given(20, 5), wire.StateUnknown},
		{"an epoch the replica has not seen", given(130, 9), wire.StateUnknown},
		{"a newer epoch with no run, below where a later one began", given(20, 4), wire.StateUnknown},
	} {
		if got := stateOf(runs, through, durable, c.q); got != c.want {
			t.Errorf("%s: %+v is %v, want %v", c.why, c.q, got, c.want)
		}
	}
}

// A version below the history's first run, or any version of a replica
// without a history, has no record here: unknown, whatever the epoch.
func TestStateOfIsUnknownWithoutARecord(t *testing.T) {
	runs := []*pb.EpochRun{{Epoch: 7, FirstVersion: 100}}
	for _, q := range []wire.StateQuery{{Version: 50, HasEpoch: true, Epoch: 3}, {Version: 50}, {Version: 99, HasEpoch: true, Epoch: 7}} {
		if got := stateOf(runs, 120, 120, q); got != wire.StateUnknown {
			t.Errorf("%+v below the history's first run: %v, want unknown", q, got)
		}
		if got := stateOf(nil, 120, 120, q); got != wire.StateUnknown {
			t.Errorf("%+v without a history: %v, want unknown", q, got)
		}
	}
}

// The history answers only once it is read from the database, and a
// commit's epoch is the one its run holds.
func TestHistoryAnswersOnceLoaded(t *testing.T) {
	h := &history{}
	if a := h.stateOf(10, wire.StateQuery{Version: 1}); a.State != wire.StateUnavailable || a.Text == "" {
		t.Fatalf("a history not read yet answered %+v, want unavailable with why", a)
	}
	h.runs, h.loaded, h.through = []*pb.EpochRun{{Epoch: 3, FirstVersion: 1}, {Epoch: 5, FirstVersion: 8}}, true, 9
	if a := h.stateOf(10, wire.StateQuery{Version: 9}); a.State != wire.StateDurable || a.Durable != 10 {
		t.Fatalf("version 9 of a history covering it: %+v, want durable with durable version 10", a)
	}
	if e := h.epochOf(7); e != 3 {
		t.Fatalf("the epoch at version 7 is %d, want 3", e)
	}
}
