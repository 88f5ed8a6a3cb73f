package faults

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The checkers must fail on the anomalies they exist for; these tests feed
// them hand-made bad observations (no database needed).

func TestLongForkCheckerFindsIncomparableReads(t *testing.T) {
	w := newLongFork("t")
	w.reads[0] = []lfRead{
		{replica: "replica1", keys: map[int]bool{0: true}},
		{replica: "replica2", keys: map[int]bool{0: true, 1: true}},
	}
	if f := w.forks(); len(f) != 0 {
		t.Fatalf("a chain of reads is no fork: %v", f)
	}
	w.reads[0] = append(w.reads[0], lfRead{replica: "replica3", keys: map[int]bool{2: true}})
	f := w.forks()
	if len(f) != 2 || !strings.Contains(f[0], "saw [0] but not [2]") {
		t.Fatalf("forks = %v", f)
	}
}

func TestBankCheckerFindsBrokenInvariant(t *testing.T) {
	b := newBank("t")
	good := map[int]int64{0: 100, 1: 100, 2: 100, 3: 100, 4: 100}
	b.check("r1", good)
	if v := b.result().Violations; len(v) != 0 {
		t.Fatalf("violations on a good read: %v", v)
	}
	b.check("r1", map[int]int64{0: 150, 1: 100, 2: 100, 3: 100, 4: 100})
	b.check("r1", map[int]int64{0: -10, 1: 210, 2: 100, 3: 100, 4: 100})
	v := b.result().Violations
	if len(v) != 2 || !strings.Contains(v[0], "sum to 550") || !strings.Contains(v[1], "negative") {
		t.Fatalf("violations = %v", v)
	}
}

func TestDurabilityCheckerFindsLostAppend(t *testing.T) {
	w := newListAppend("t")
	w.ack([]Mop{{Kind: Append, Key: 1, Value: 7}, {Kind: Read, Key: 1}, {Kind: Append, Key: 2, Value: 8}})
	if lost := w.lost(map[int][]int{1: {3, 7}, 2: {8}}); len(lost) != 0 {
		t.Fatalf("lost = %v", lost)
	}
	lost := w.lost(map[int][]int{1: {3}, 2: {8}})
	if len(lost) != 1 || !strings.Contains(lost[0], "append of 7 missing") {
		t.Fatalf("lost = %v", lost)
	}
}

func TestHistoryEDN(t *testing.T) {
	h := NewHistory()
	h.Add(Invoke, 3, []Mop{{Kind: Append, Key: 1, Value: 2}, {Kind: Read, Key: 4, Nil: true}}, "")
	h.Add(OK, 3, []Mop{{Kind: Append, Key: 1, Value: 2}, {Kind: Read, Key: 4, Values: []int{5, 6}}}, "")
	h.Add(Fail, 4, nil, `ERROR: "x" (SQLSTATE 40001)`)
	var b strings.Builder
	if err := h.WriteEDN(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		`:type :invoke, :f :txn, :process 3`, `:value [[:append 1 2] [:r 4 nil]]}`,
		`:type :ok`, `:value [[:append 1 2] [:r 4 [5 6]]]}`,
		`:type :fail`, `:error "ERROR: \"x\" (SQLSTATE 40001)"}`,
	}
	for i, w := range want {
		if !strings.Contains(lines[i/2], w) {
			t.Errorf("line %d = %s, want it to contain %s", i/2, lines[i/2], w)
		}
	}
}

func TestCommitOutcome(t *testing.T) {
	if got := commitOutcome(errString("connection reset")); got != Info {
		t.Errorf("a broken connection at COMMIT is %s, want info", got)
	}
	notSent := &pgconn.PgError{Severity: "ERROR", Code: "57P03", Message: "this replica cannot commit writes now: the agent is recovering"}
	if got := commitOutcome(notSent); got != Fail {
		t.Errorf("ERROR 57P03 at COMMIT (nothing sent for certification) is %s, want fail", got)
	}
	if got := commitOutcome(&pgconn.PgError{Severity: "ERROR", Code: "08007"}); got != Info {
		t.Errorf("08007 at COMMIT (sent, unanswered) is %s, want info", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestForbiddenAllowsOnlyTheG2Family(t *testing.T) {
	r := &AdyaReport{Valid: "false", AnomalyTypes: []string{"G2-item", "G2-item-process"}}
	if !r.OK() || len(r.Forbidden()) != 0 {
		t.Fatalf("write skew alone must pass: OK=%v forbidden=%v", r.OK(), r.Forbidden())
	}
	r.AnomalyTypes = append(r.AnomalyTypes, "G-single-item")
	if r.OK() {
		t.Fatal("G-single-item must fail the check")
	}
	if (&AdyaReport{Valid: "unknown"}).OK() {
		t.Fatal("an unknown verdict must fail the check")
	}
}

func TestParseFaults(t *testing.T) {
	all, err := ParseFaults("all", 1)
	if err != nil || len(all) != len(AllFaults) {
		t.Fatalf("all: %v %v", all, err)
	}
	if ks, err := ParseFaults("kill-agent, kill-backend, pause-certifier", 1); err != nil || len(ks) != 3 || ks[1] != KillBackend || ks[2] != PauseCertifier {
		t.Fatalf("list: %v %v", ks, err)
	}
	for _, kind := range []string{"kill-agent", "pause-agent", "kill-backend"} {
		if _, err := ParseFaults(kind, 3); err != nil {
			t.Errorf("%s with a certifier group: %v", kind, err)
		}
	}
	if _, err := ParseFaults("kill-everything", 1); err == nil || !strings.Contains(err.Error(), "unknown fault") {
		t.Fatalf("unknown kind: %v", err)
	}
}
