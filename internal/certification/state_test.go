package certification

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// workload draws random requests over a small key space so that conflicts,
// whole-table writes, schema writes, retries and stale snapshots all happen.
type workload struct {
	rng       *rand.Rand
	tables    int
	rows      int
	nextSeq   uint64
	committed []TxnID
}

func (w *workload) key() Key {
	table := fmt.Sprintf("public.t%d", w.rng.IntN(w.tables))
	switch r := w.rng.IntN(1000); {
	case r < 3:
		return SchemaKey
	case r < 15:
		return TableKey(table)
	case r < 250: // a foreign-key reference to a parent row
		return ref(table, w.rng.IntN(w.rows))
	case r < 251: // not a row: invalid as a reference
		k := TableKey(table)
		k.Kind = Reference
		return k
	case r < 252: // not a row: invalid as a keeping write
		k := TableKey(table)
		k.Kind = KeepingWrite
		return k
	case r < 500: // a keeping update of a (parent) row
		return keep(table, w.rng.IntN(w.rows))
	case r < 600: // rows inserted into a table without a primary key
		return KeylessInsertKey(table)
	case r < 601: // a row: invalid as a keyless insert
		k := row(table, w.rng.IntN(w.rows))
		k.Kind = KeylessInsert
		return k
	default:
		return row(table, w.rng.IntN(w.rows))
	}
}

func ref(table string, pk int) Key { return ReferenceKey(table, []byte(fmt.Sprintf("[%d]", pk))) }

func keep(table string, pk int) Key { return KeepingRowKey(table, []byte(fmt.Sprintf("[%d]", pk))) }

func row(table string, pk int) Key { return RowKey(table, []byte(fmt.Sprintf("[%d]", pk))) }

func (w *workload) request(version, window uint64) Request {
	if len(w.committed) > 0 && w.rng.IntN(50) == 0 { // a retry of a committed transaction
		return Request{Txn: w.committed[w.rng.IntN(len(w.committed))], StartVersion: version, Keys: []Key{w.key()},
			Versions: w.versions()}
	}
	w.nextSeq++
	keys := make([]Key, 1+w.rng.IntN(4))
	for i := range keys {
		keys[i] = w.key()
	}
	lag := uint64(w.rng.IntN(int(window*3/2) + 3))
	start := uint64(0)
	if lag <= version {
		start = version - lag
	}
	if w.rng.IntN(200) == 0 {
		start = version + 1 // from the future: invalid
	}
	if w.rng.IntN(200) == 0 {
		keys = nil // invalid
	}
	return Request{Txn: TxnID{Origin: fmt.Sprintf("r%d", w.rng.IntN(3)), Seq: w.nextSeq}, StartVersion: start, Keys: keys,
		Versions: w.versions()}
}

// versions draws how many versions a request commits as: mostly one
// (0 or 1), sometimes a span (a streamed transaction) of up to a few
// windows' worth, rarely a negative count (invalid).
func (w *workload) versions() int {
	switch r := w.rng.IntN(100); {
	case r < 80:
		return r % 2
	case r < 99:
		return 2 + w.rng.IntN(6)
	default:
		return -1
	}
}

func TestStateMatchesReferenceModelOnRandomHistories(t *testing.T) {
	histories := 2000
	if testing.Short() {
		histories = 300
	}
	for seed := range uint64(histories) {
		rng := rand.New(rand.NewPCG(seed, 7))
		window := uint64(1 + rng.IntN(64))
		w := &workload{rng: rng, tables: 1 + rng.IntN(4), rows: 1 + rng.IntN(40)}
		state := New(Config{WindowVersions: window}, 0)
		model := &referenceModel{window: window}
		assigned := map[uint64]bool{}
		for step := range 300 {
			req := w.request(model.version, window)
			got, want := state.Certify(req), model.certify(req)
			sameReason := got.Reason == want.Reason || (isConflict(got.Reason) && isConflict(want.Reason))
			if got.Decision != want.Decision || got.CommitVersion != want.CommitVersion ||
				got.FirstVersion != want.FirstVersion || !sameReason || got.Duplicate != want.Duplicate {
				t.Fatalf("seed %d step %d: request %+v\nstate: %+v\nmodel: %+v", seed, step, req, got, want)
			}
			if isConflict(got.Reason) {
				checkReportedConflict(t, model, req, got, fmt.Sprintf("seed %d step %d", seed, step))
			}
			if got.Decision == Commit && !got.Duplicate {
				for v := got.FirstVersion; v <= got.CommitVersion; v++ {
					if assigned[v] {
						t.Fatalf("seed %d step %d: version %d assigned twice", seed, step, v)
					}
					assigned[v] = true
				}
				w.committed = append(w.committed, req.Txn)
			}
			if state.LowWaterMark() != model.lowWaterMark() {
				t.Fatalf("seed %d step %d: low-water mark %d, model %d", seed, step, state.LowWaterMark(), model.lowWaterMark())
			}
		}
	}
}

// checkReportedConflict: the version State names is after the snapshot and
// conflicts with the key it names, for the reason it gives.
func checkReportedConflict(t *testing.T, model *referenceModel, req Request, got Outcome, at string) {
	t.Helper()
	if got.ConflictVersion <= req.StartVersion || got.ConflictVersion > model.version {
		t.Fatalf("%s: reported conflict with version %d outside (%d, %d]", at, got.ConflictVersion, req.StartVersion, model.version)
	}
	writeWrite, reference := model.conflictKinds(got.ConflictVersion, req.Keys[got.ConflictIndex])
	if (got.Reason == ReasonConflict && !writeWrite) || (got.Reason == ReasonReferenceConflict && !reference) {
		t.Fatalf("%s: reported %v with version %d on key %d, which does not conflict that way with %+v",
			at, got.Reason, got.ConflictVersion, got.ConflictIndex, req)
	}
}

// Two transactions that wrote the same row from the same snapshot: exactly one
// commits, whichever is certified first (first-committer-wins).
func TestConflictingPairInsideWindowAbortsOneSide(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b Key
	}{
		{"same row", row("public.acct", 1), row("public.acct", 1)},
		{"keeping write then write of the row", keep("public.acct", 1), row("public.acct", 1)},
		{"write then keeping write of the row", row("public.acct", 1), keep("public.acct", 1)},
		{"two keeping writes of the row", keep("public.acct", 1), keep("public.acct", 1)},
		{"keeping write then its table", keep("public.acct", 1), TableKey("public.acct")},
		{"table then a keeping write in it", TableKey("public.acct"), keep("public.acct", 9)},
		{"keeping write then schema", keep("public.acct", 1), SchemaKey},
		{"schema then keeping write", SchemaKey, keep("public.other", 1)},
		{"row then its table", row("public.acct", 1), TableKey("public.acct")},
		{"table then a row in it", TableKey("public.acct"), row("public.acct", 9)},
		{"row then schema", row("public.acct", 1), SchemaKey},
		{"schema then row of another table", SchemaKey, row("public.other", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{WindowVersions: 100}, 0)
			s.Certify(Request{Txn: TxnID{"x", 1}, Keys: []Key{row("public.z", 0)}}) // version 1
			a := s.Certify(Request{Txn: TxnID{"r1", 1}, StartVersion: 1, Keys: []Key{tc.a}})
			b := s.Certify(Request{Txn: TxnID{"r2", 1}, StartVersion: 1, Keys: []Key{tc.b}})
			if a.Decision != Commit || a.CommitVersion != 2 {
				t.Fatalf("first: %+v, want commit at 2", a)
			}
			if b.Decision != Abort || b.Reason != ReasonConflict || b.ConflictVersion != 2 {
				t.Fatalf("second: %+v, want conflict with version 2", b)
			}
			// The same write from a snapshot that includes version 2 commits.
			c := s.Certify(Request{Txn: TxnID{"r2", 2}, StartVersion: 2, Keys: []Key{tc.b}})
			if c.Decision != Commit || c.CommitVersion != 3 {
				t.Fatalf("after refresh: %+v, want commit at 3", c)
			}
		})
	}
}

func TestDisjointRowsDoNotConflict(t *testing.T) {
	s := New(Config{WindowVersions: 100}, 0)
	a := s.Certify(Request{Txn: TxnID{"r1", 1}, Keys: []Key{row("public.t", 1), row("public.u", 1)}})
	b := s.Certify(Request{Txn: TxnID{"r2", 1}, Keys: []Key{row("public.t", 2), row("public.u", 2)}})
	if a.Decision != Commit || b.Decision != Commit || b.CommitVersion != 2 {
		t.Fatalf("got %+v and %+v, want both committed", a, b)
	}
}

func TestLowWaterMarkAbortsOldSnapshotsAndBoundsMemory(t *testing.T) {
	const window = 10
	s := New(Config{WindowVersions: window}, 0)
	for i := range uint64(1000) {
		o := s.Certify(Request{Txn: TxnID{"r", i}, StartVersion: s.Version(), Keys: []Key{row("public.t", int(i))}})
		if o.Decision != Commit {
			t.Fatalf("request %d: %+v", i, o)
		}
	}
	if s.LowWaterMark() != 1000-window {
		t.Fatalf("low-water mark %d, want %d", s.LowWaterMark(), 1000-window)
	}
	if s.IndexedRows() != window || len(s.txns) != window {
		t.Fatalf("index holds %d rows and %d txns, want %d each", s.IndexedRows(), len(s.txns), window)
	}
	if len(s.window)-s.windowOff != window {
		t.Fatalf("window holds %d versions, want %d", len(s.window)-s.windowOff, window)
	}
	// A key that was forgotten must not let an old snapshot through.
	old := s.Certify(Request{Txn: TxnID{"r", 5000}, StartVersion: s.LowWaterMark() - 1, Keys: []Key{RowKey("public.t", []byte("nothing-wrote-this"))}})
	if old.Decision != Abort || old.Reason != ReasonTooOld {
		t.Fatalf("snapshot below the low-water mark: %+v, want abort too old", old)
	}
	atMark := s.Certify(Request{Txn: TxnID{"r", 5001}, StartVersion: s.LowWaterMark(), Keys: []Key{row("public.t", 999)}})
	if atMark.Decision != Abort || atMark.Reason != ReasonConflict || atMark.ConflictVersion != 1000 {
		t.Fatalf("snapshot at the low-water mark writing version 1000's row: %+v, want conflict", atMark)
	}
}

func TestRetryOfCommittedTransactionReturnsOriginalVersion(t *testing.T) {
	s := New(Config{WindowVersions: 100}, 0)
	req := Request{Txn: TxnID{"r1", 42}, Keys: []Key{row("public.t", 1)}}
	first := s.Certify(req)
	req.StartVersion = 0 // the retry carries the same (now stale) snapshot
	again := s.Certify(req)
	if !again.Duplicate || again.CommitVersion != first.CommitVersion || s.Version() != 1 {
		t.Fatalf("retry: %+v (version now %d), want duplicate of %d", again, s.Version(), first.CommitVersion)
	}
}

func TestRestoreReplaysToTheSameState(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	w := &workload{rng: rng, tables: 3, rows: 20}
	live := New(Config{WindowVersions: 30}, 0)
	type entry struct {
		first, last uint64
		txn         TxnID
		keys        []Key
	}
	var log []entry
	for range 500 {
		req := w.request(live.Version(), 30)
		if o := live.Certify(req); o.Decision == Commit && !o.Duplicate {
			log = append(log, entry{o.FirstVersion, o.CommitVersion, req.Txn, req.Keys})
			w.committed = append(w.committed, req.Txn)
		}
	}
	// A restarted certifier restores the last window of the log, which
	// may start inside a span.
	base := live.Version() - 30
	restored := New(Config{WindowVersions: 30}, base)
	for _, e := range log {
		switch {
		case e.last <= base:
		case e.first == e.last:
			restored.Restore(e.last, e.txn, e.keys)
		default:
			restored.RestoreSpan(e.first, e.last, e.txn, e.keys)
		}
	}
	for range 300 {
		req := w.request(live.Version(), 30)
		a, b := live.Certify(req), restored.Certify(req)
		if a != b {
			t.Fatalf("live %+v, restored %+v for %+v", a, b, req)
		}
		if a.Decision == Commit && !a.Duplicate {
			w.committed = append(w.committed, req.Txn)
		}
	}
}

func TestRestoreOutOfOrderPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("restoring version 3 after 0 did not panic")
		}
	}()
	New(Config{}, 0).Restore(3, TxnID{}, nil)
}

func BenchmarkCertifyFourKeys(b *testing.B) {
	s := New(Config{}, 0)
	keys := make([][]Key, 1<<16)
	for i := range keys {
		keys[i] = []Key{row("public.a", i), row("public.b", i), row("public.c", i), row("public.d", i)}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Certify(Request{Txn: TxnID{"bench", uint64(i)}, StartVersion: s.Version(), Keys: keys[i%len(keys)]})
	}
}

// The certifier hashes keys read from encoded bytes; they must equal the
// keys of the same strings, or a group member restoring from decoded
// entries would disagree with the leader.
func TestKeyFromBytesEqualsKeyFromString(t *testing.T) {
	for _, c := range []struct{ table, pk string }{
		{"public.accounts", `[1]`}, {"", ""}, {`"Odd"."name"`, `["a\u0000b", 2]`}, {"t", "x"},
	} {
		if got, want := TableKeyBytes([]byte(c.table)), TableKey(c.table); got != want {
			t.Errorf("TableKeyBytes(%q) = %v, TableKey = %v", c.table, got, want)
		}
		if got, want := RowKeyBytes([]byte(c.table), []byte(c.pk)), RowKey(c.table, []byte(c.pk)); got != want {
			t.Errorf("RowKeyBytes(%q, %q) = %v, RowKey = %v", c.table, c.pk, got, want)
		}
	}
	// The definition must never change: the log and every member's state
	// depend on it.
	got := RowKey("public.bench", []byte("1"))
	if want := (Key{Table: xxhash.Sum64String("public.bench"), Row: xxhash.Sum64String("public.bench\x001")}); got != want {
		t.Fatalf("RowKey = %v, want %v", got, want)
	}
}

// BenchmarkCertifyUniqueKeysFullWindow is the certifier under the load
// generator: four new rows per transaction, the window full (every commit
// also forgets the oldest version), so the row index is at its full size
// and its lookups miss the caches as they do in production.
func BenchmarkCertifyUniqueKeysFullWindow(b *testing.B) {
	s := New(Config{}, 0)
	next := 0
	request := func(i int) Request {
		keys := make([]Key, 4)
		for k := range keys {
			keys[k] = row("public.bench", next)
			next++
		}
		return Request{Txn: TxnID{"bench-client-17-1234567890", uint64(i)}, StartVersion: s.Version(), Keys: keys}
	}
	for i := range int(DefaultWindowVersions) + 1000 {
		s.Certify(request(i))
	}
	reqs := make([]Request, 1<<16)
	for i := range reqs {
		reqs[i] = request(int(DefaultWindowVersions) + 1000 + i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		r := reqs[i%len(reqs)]
		if i >= len(reqs) { // new transaction ids and keys again
			r.Txn.Seq += uint64(i)
		}
		r.StartVersion = s.Version()
		if o := s.Certify(r); o.Decision != Commit {
			b.Fatalf("request %d: %+v", i, o)
		}
	}
}
