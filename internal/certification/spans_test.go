package certification

import "testing"

// A span commits as consecutive versions, is known by its last one, and
// conflicts there: a write certified on a snapshot before the span's last
// version conflicts with it, naming the last version.
func TestSpanCommitsConsecutiveVersionsAndConflictsAtItsLast(t *testing.T) {
	s := New(Config{WindowVersions: 100}, 0)
	s.Certify(Request{Txn: TxnID{"r1", 1}, Keys: []Key{row("public.other", 1)}})
	span := Request{Txn: TxnID{"r1", 2}, StartVersion: 1, Keys: []Key{TableKey("public.t")}, Versions: 3}
	o := s.Certify(span)
	if o.Decision != Commit || o.FirstVersion != 2 || o.CommitVersion != 4 || s.Version() != 4 {
		t.Fatalf("span: %+v (version %d), want versions 2..4", o, s.Version())
	}
	w := s.Certify(Request{Txn: TxnID{"r2", 1}, StartVersion: 1, Keys: []Key{row("public.t", 7)}})
	if w.Decision != Abort || w.Reason != ReasonConflict || w.ConflictVersion != 4 {
		t.Fatalf("row write from before the span: %+v, want a conflict with version 4", w)
	}
	if after := s.Certify(Request{Txn: TxnID{"r2", 2}, StartVersion: 4, Keys: []Key{row("public.t", 7)}}); after.Decision != Commit {
		t.Fatalf("row write after the span: %+v", after)
	}
	again := s.Certify(span)
	if !again.Duplicate || again.FirstVersion != 2 || again.CommitVersion != 4 {
		t.Fatalf("retry of the span: %+v, want its versions 2..4", again)
	}
}

// The window slides one version at a time through a span: the span's
// keys and transaction id stay until its last version leaves the window.
func TestSpanLeavesTheWindowWithItsLastVersion(t *testing.T) {
	s := New(Config{WindowVersions: 4}, 0)
	span := Request{Txn: TxnID{"r1", 1}, Keys: []Key{row("public.t", 1)}, Versions: 6}
	s.Certify(span)
	if s.LowWaterMark() != 2 {
		t.Fatalf("low-water mark %d after a 6-version span in a 4-version window, want 2", s.LowWaterMark())
	}
	if first, last, ok := s.CommittedSpan(span.Txn); !ok || first != 1 || last != 6 {
		t.Fatalf("span known as %d..%d (%v), want 1..6", first, last, ok)
	}
	for i := range 4 {
		s.Certify(Request{Txn: TxnID{"r2", uint64(i)}, StartVersion: s.Version(), Keys: []Key{row("public.u", i)}})
	}
	if _, _, ok := s.CommittedSpan(span.Txn); ok || s.IndexedRows() != 4 {
		t.Fatalf("span still known (%v) or its row indexed (%d rows) after its last version left the window", ok, s.IndexedRows())
	}
}

// A restart whose window starts inside a span restores the span from its
// last entry, with the keys it was certified on.
func TestRestoreSpanFromInsideIt(t *testing.T) {
	restored := New(Config{WindowVersions: 3}, 4) // the window is versions 5..7
	restored.RestoreSpan(3, 7, TxnID{"r1", 9}, []Key{TableKey("public.t")})
	if restored.Version() != 7 {
		t.Fatalf("version %d after restoring span 3..7, want 7", restored.Version())
	}
	o := restored.Certify(Request{Txn: TxnID{"r1", 9}, StartVersion: 7, Keys: []Key{row("public.t", 1)}, Versions: 5})
	if !o.Duplicate || o.FirstVersion != 3 || o.CommitVersion != 7 {
		t.Fatalf("retry after the restart: %+v, want the span 3..7", o)
	}
	w := restored.Certify(Request{Txn: TxnID{"r2", 1}, StartVersion: 4, Keys: []Key{row("public.t", 1)}})
	if w.Decision != Abort || w.ConflictVersion != 7 {
		t.Fatalf("row write from before the restored span: %+v, want a conflict with version 7", w)
	}
}

func TestRestoreSpanOutOfOrderPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("restoring span 5..6 after version 2 did not panic")
		}
	}()
	New(Config{}, 2).RestoreSpan(5, 6, TxnID{}, nil)
}

// A snapshot carries each span's first version: a state restored from it
// answers a retried streamed request with the whole span, also when the
// window starts inside the span, and forgets a span its smaller window
// left behind.
func TestSnapshotKeepsSpans(t *testing.T) {
	s := New(Config{WindowVersions: 6}, 0)
	s.Certify(Request{Txn: TxnID{"r1", 1}, Keys: []Key{row("public.u", 1)}})
	span := Request{Txn: TxnID{"r1", 2}, StartVersion: 1, Keys: []Key{TableKey("public.t")}, Versions: 5} // 2..6
	s.Certify(span)
	s.Certify(Request{Txn: TxnID{"r1", 3}, StartVersion: 6, Keys: []Key{row("public.u", 2)}}) // 7: the window is 2..7
	for _, tc := range []struct {
		window      uint64
		first, last uint64
		known       bool
	}{{window: 6, first: 2, last: 6, known: true}, {window: 3, first: 2, last: 6, known: true}, {window: 1, known: false}} {
		restored, err := Unmarshal(Config{WindowVersions: tc.window}, s.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		first, last, ok := restored.CommittedSpan(span.Txn)
		if ok != tc.known || first != tc.first || last != tc.last {
			t.Errorf("window %d: span known as %d..%d (%v), want %d..%d (%v)", tc.window, first, last, ok, tc.first, tc.last, tc.known)
		}
		if !tc.known {
			continue
		}
		if o := restored.Certify(span); !o.Duplicate || o.FirstVersion != 2 || o.CommitVersion != 6 {
			t.Errorf("window %d: retried span after the restore: %+v, want a duplicate of 2..6", tc.window, o)
		}
	}
}

// A snapshot of format 4 (before the spans section) still reads; its
// spans are known by their last version.
func TestSnapshotWithoutSpansSectionReads(t *testing.T) {
	s := New(Config{WindowVersions: 8}, 0)
	span := Request{Txn: TxnID{"r1", 1}, Keys: []Key{TableKey("public.t")}, Versions: 3}
	s.Certify(span)
	restored, err := Unmarshal(Config{WindowVersions: 8}, marshalWithoutSpans(s, snapshotFormatNoSpans))
	if err != nil {
		t.Fatal(err)
	}
	if first, last, ok := restored.CommittedSpan(span.Txn); !ok || first != 3 || last != 3 {
		t.Fatalf("span of a format-4 snapshot known as %d..%d (%v), want 3..3", first, last, ok)
	}
}

// marshalWithoutSpans is Marshal in the layout before the spans section
// (formats 2 to 4), numbered format.
func marshalWithoutSpans(s *State, format byte) []byte {
	b := s.Marshal()
	b = b[:len(b)-len(s.appendSpans(nil))]
	b[len(snapshotMagic)] = format
	return b
}
