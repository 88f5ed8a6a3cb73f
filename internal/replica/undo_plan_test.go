package replica

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

func upsert(table, key, row string) *certifierpb.Change {
	return &certifierpb.Change{Table: table, Op: certifierpb.Op_OP_UPSERT, Key: []byte(key), Row: []byte(row)}
}

func deleteKey(table, key string) *certifierpb.Change {
	return &certifierpb.Change{Table: table, Op: certifierpb.Op_OP_DELETE, Key: []byte(key)}
}

// Undoing versions plans, per table with a primary key, every key they
// wrote, once, in the order first written; per table without one, the
// inverse of their changes in reverse order, collapsed: the rows to delete
// are those the versions inserted and did not delete again, the rows to
// insert those they deleted that were there before them.
func TestUndoPlan(t *testing.T) {
	plan, err := buildUndoPlan([]*certifierpb.LogEntry{
		keylessEntry(5, upsert("public.a", "[1]", "(1,x)"), ins("(1)"), ins("(1)"),
			&certifierpb.Change{Table: "public.a#a_u_key", Op: certifierpb.Op_OP_UNIQUE_KEY, Key: []byte("[7]")}),
		keylessEntry(6, deleteKey("public.a", "[2]"), upsert("public.a", "[1]", "(1,y)"), del("(1)"), del("(9)"),
			&certifierpb.Change{Table: "public.p", Op: certifierpb.Op_OP_REFERENCE, Key: []byte("[3]")}),
		keylessEntry(7, ins("(2)"), del("(2)"), ins("(9)"), upsert("public.a", "[3]", "(3,z)")),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.tableNames(); !slices.Equal(got, []string{"public.a", "public.h"}) {
		t.Fatalf("tables %q, want public.a and public.h (unique values and references are not undone)", got)
	}
	if got := plan.byName["public.a"].keyArray(); got != "[[1],[2],[3]]" {
		t.Errorf("keys %s, want [[1],[2],[3]]", got)
	}
	k := plan.byName["public.h"].keyless
	// Forward, h went: +(1) +(1) | -(1) -(9) | +(2) -(2) +(9). Undone,
	// newest first: -(9) +(2) -(2) +(9) +(1) -(1) -(1), where each -(1)
	// and the -(2) take back an insert of the undo: delete a (9) and a
	// (1) that are there now, insert a (9).
	if !slices.Equal(k.deleted, []string{"(9)", "(1)"}) || !slices.Equal(k.inserts(), []string{"(9)"}) {
		t.Errorf("h: delete %q, insert %q; want (9) and (1) deleted, (9) inserted", k.deleted, k.inserts())
	}
}

// A version that writes a whole table or the schema, or is part of a
// span, cannot be undone row by row: the plan is refused, naming it.
func TestUndoPlanRefusesBarriers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry *certifierpb.LogEntry
		want  string
	}{
		{"truncate", keylessEntry(8, &certifierpb.Change{Table: "public.a", Op: certifierpb.Op_OP_TRUNCATE}), "truncates table public.a"},
		{"ddl", keylessEntry(8, &certifierpb.Change{Op: certifierpb.Op_OP_DDL, Row: []byte("ALTER TABLE a ADD c int")}), "runs DDL (ALTER TABLE a ADD c int)"},
		{"span", &certifierpb.LogEntry{Version: 8, SpanFirst: 8, SpanLast: 9}, "streamed transaction of versions 8..9"},
		{"table write", keylessEntry(8, &certifierpb.Change{Table: "public.a", Op: certifierpb.Op_OP_TABLE_WRITE}), "not a row change"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildUndoPlan([]*certifierpb.LogEntry{keylessEntry(7, ins("(1)")), tc.entry})
			var cu *CannotUndoError
			if !errors.As(err, &cu) || cu.Version != 8 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a CannotUndoError for version 8 that says %q", err, tc.want)
			}
		})
	}
}

func entry(v uint64, bytes int) logentry.Entry {
	return logentry.Entry{Version: v, Bytes: make([]byte, bytes)}
}

// The undo window holds the entries after its start, consecutive; trims
// to the oldest pin; skips entries delivered again; starts over after a
// gap; and, past its bound, drops its oldest entries, after which a rewind
// below them is refused, saying why.
func TestUndoWindow(t *testing.T) {
	w := NewUndoWindow(10, 100)
	w.Append(entry(11, 10), entry(12, 10), entry(13, 10))
	w.Append(entry(12, 10), entry(14, 10)) // 12 again: skipped
	if s, l := w.Span(); s != 10 || l != 14 {
		t.Fatalf("span (%d, %d], want (10, 14]", s, l)
	}
	got, err := w.Entries(11, 14)
	if err != nil || len(got) != 3 || got[0].Version != 12 || got[2].Version != 14 {
		t.Fatalf("entries (11, 14]: %v, %v", got, err)
	}
	if _, err := w.Entries(11, 15); err == nil {
		t.Error("entries up to 15, which the window lacks, were given")
	}
	w.Trim(12)
	if _, err := w.Entries(11, 14); err == nil {
		t.Error("entries below the trim were given")
	}
	w.Append(entry(15, 90)) // 13, 14, 15: 110 bytes, over 100
	var cu *CannotUndoError
	if _, err := w.Entries(12, 15); !errors.As(err, &cu) || !strings.Contains(err.Error(), "passed its bound of 100 bytes") {
		t.Errorf("after the bound was passed: %v, want a CannotUndoError naming the bound", err)
	}
	if got, err := w.Entries(13, 15); err != nil || len(got) != 2 {
		t.Errorf("entries (13, 15]: %v, %v", got, err)
	}
	w.DropAbove(13)
	if s, l := w.Span(); s != 13 || l != 13 {
		t.Errorf("after the rewind to 13: span (%d, %d], want (13, 13]", s, l)
	}
	w.Append(entry(20, 1))
	if s, l := w.Span(); s != 19 || l != 20 {
		t.Errorf("after a gap: span (%d, %d], want (19, 20]", s, l)
	}
}

func fakePins(versions ...uint64) []*Pin {
	out := make([]*Pin, len(versions))
	for i, v := range versions {
		out[i] = &Pin{Version: v}
	}
	return out
}

func pinVersions(pins []*Pin) []uint64 {
	out := make([]uint64, len(pins))
	for i, p := range pins {
		out[i] = p.Version
	}
	return out
}

// Pins keep the newest usable pin (at or below the durable version) and
// every newer candidate; a pin replaced by a newer one of the same version
// goes; a leased pin stays whatever it is. When every connection holds a
// pin, the newest candidate makes room, never the oldest (the next to
// become usable), and none does while fewer than two candidates exist,
// unless a pin is wanted at once (TakeNow).
func TestPinsKeepTheNewestUsablePin(t *testing.T) {
	pins := fakePins(3, 5, 5, 8, 12)
	keep, drop := prune(pins, 9, nil)
	if got := pinVersions(keep); !slices.Equal(got, []uint64{8, 12}) {
		t.Errorf("durable 9: keep %v, want [8 12]", got)
	}
	if got := pinVersions(drop); !slices.Equal(got, []uint64{3, 5, 5}) {
		t.Errorf("durable 9: drop %v, want [3 5 5]", got)
	}
	keep, _ = prune(pins, 2, map[*Pin]bool{pins[1]: true})
	if got := pinVersions(keep); !slices.Equal(got, []uint64{3, 5, 5, 8, 12}) {
		t.Errorf("durable 2, the first 5 leased: keep %v, want every pin", got)
	}
	keep, _ = prune(pins, 2, nil)
	if got := pinVersions(keep); !slices.Equal(got, []uint64{3, 5, 8, 12}) {
		t.Errorf("durable 2: keep %v, want [3 5 8 12] (the older 5 replaced)", got)
	}
	if v := makeRoom(fakePins(4, 6, 7), 4, nil); v == nil || v.Version != 7 {
		t.Errorf("room among [4 6 7], durable 4: %v, want the pin at 7", v)
	}
	if v := makeRoom(fakePins(4, 6), 4, nil); v != nil {
		t.Errorf("room among [4 6], durable 4: %v, want none (one candidate)", v)
	}
	if v := newestCandidate(fakePins(4, 6), 4, nil); v == nil || v.Version != 6 {
		t.Errorf("room at once among [4 6], durable 4: %v, want the pin at 6", v)
	}
	full := fakePins(6, 7)
	if v := makeRoom(full, 4, map[*Pin]bool{full[1]: true}); v != nil {
		t.Errorf("room among [6 7], 7 leased: %v, want none", v)
	}

	p := NewPins(PinsConfig{})
	for _, pin := range fakePins(3, 7, 9) {
		p.insertLocked(pin)
	}
	if u := p.Usable(100); u != nil {
		t.Errorf("nothing durable: usable %d, want none", u.Version)
	}
	p.Advance(8)
	p.Advance(5) // never moves back
	if u := p.Usable(100); u == nil || u.Version != 7 {
		t.Fatalf("durable 8: usable %v, want the pin at 7", u)
	}
	if u := p.Usable(6); u == nil || u.Version != 3 {
		t.Errorf("durable 8, at or below 6: usable %v, want the pin at 3", u)
	}
	p.Rewound(7)
	if got := p.Versions(); !slices.Equal(got, []uint64{3, 7}) {
		t.Errorf("after a rewind to 7: pins %v, want [3 7]", got)
	}
}
