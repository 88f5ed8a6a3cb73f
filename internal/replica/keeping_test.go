package replica

import (
	"testing"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

// keeping prints a change as change does, with "M" for an upsert that
// keeps its row (KeepsRow).
func keeping(cs []*certifierpb.Change) []string {
	out := changes(cs)
	for i, c := range cs {
		if c.GetKeepsRow() {
			out[i] = "M" + out[i][1:]
		}
	}
	return out
}

// TestCollapseKeepingUpdates: a key's change keeps its row only when every
// event of the key in the transaction was a keeping update ('M') and the
// last one an upsert (certification.KeepingWrite; the foreign-key bullet
// of docs/GUARANTEES.md).
func TestCollapseKeepingUpdates(t *testing.T) {
	ev := func(op byte, key, row string) Event {
		return Event{Table: "public.p", Op: op, Key: []byte(key), Row: []byte(row)}
	}
	for _, tc := range []struct {
		name string
		evs  []Event
		want []string
	}{
		{"one keeping update", []Event{ev('M', "[1]", "(1,a)")}, []string{"M public.p [1] (1,a)"}},
		{"two keeping updates", []Event{ev('M', "[1]", "(1,a)"), ev('M', "[1]", "(1,b)")}, []string{"M public.p [1] (1,b)"}},
		{"insert then keeping update", []Event{ev('U', "[1]", "(1,a)"), ev('M', "[1]", "(1,b)")}, []string{"U public.p [1] (1,b)"}},
		{"keeping update then plain upsert", []Event{ev('M', "[1]", "(1,a)"), ev('U', "[1]", "(1,b)")}, []string{"U public.p [1] (1,b)"}},
		{"keeping update then delete", []Event{ev('M', "[1]", "(1,a)"), ev('D', "[1]", "")}, []string{"D public.p [1]"}},
		{"delete, insert, keeping update", []Event{ev('D', "[1]", ""), ev('U', "[1]", "(1,a)"), ev('M', "[1]", "(1,b)")},
			[]string{"U public.p [1] (1,b)"}},
		{"key moved in, then kept", []Event{ev('D', "[1]", ""), ev('U', "[2]", "(2,a)"), ev('M', "[2]", "(2,b)")},
			[]string{"D public.p [1]", "U public.p [2] (2,b)"}},
		{"keys apart", []Event{ev('M', "[1]", "(1,a)"), ev('U', "[2]", "(2,a)"), ev('M', "[3]", "(3,a)")},
			[]string{"M public.p [1] (1,a)", "U public.p [2] (2,a)", "M public.p [3] (3,a)"}},
		// A reference to a row the transaction keeps is dropped: the
		// keeping write conflicts with every plain write a reference would.
		{"reference to a kept row", []Event{ev('M', "[1]", "(1,a)"), {Table: "public.p", Op: 'R', Key: []byte("[1]")}},
			[]string{"M public.p [1] (1,a)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Collapse(tc.evs)
			if err != nil {
				t.Fatal(err)
			}
			eqStrings(t, tc.name, keeping(got), tc.want)
		})
	}
	if _, err := Collapse([]Event{{Table: "public.p", Op: 'M'}}); err == nil {
		t.Error("a keyless keeping update was accepted")
	}
}
