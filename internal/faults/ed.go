package faults

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tashkent-db/tashkent/internal/ctxtime"
)

// Mode ed (eventual durability, Kashi ch. 2): a transaction commits at the
// certifier's decision and becomes durable once the certifier's log syncs
// it, or fails if the certifier dies first (§2.2.1, property 2:
// committed, then durable or failed). A fast transaction is acknowledged
// at its commit point, a safe one once durable. What the history records
// for each list-append transaction:
//
//   - fast, writing, COMMIT acknowledged: its (version, epoch) from
//     tashkent.last_commit() on the same session; after the run
//     txn_state(version, epoch) says durable (:ok) or failed (:fail, as if
//     it aborted). A transaction that read a failed one's write and ends
//     :ok is then adya's G1a: the failure cascade (§2.2.1, property 4)
//     did not happen.
//   - safe, writing, COMMIT acknowledged: :ok, and txn_state must say
//     durable; failed is a violation of ED recoverability (Definition
//     2.2.2; a safe transaction acknowledged before it was durable).
//   - safe, writing, FATAL TK006 at COMMIT: :fail, and txn_state of the
//     version the message names must say failed.
//   - read-only, safe, COMMIT acknowledged: :ok (property 5b: what it read
//     is durable, so adya's G1a finds a read of a failed write).
//   - read-only, fast, COMMIT acknowledged: :ok, unless it read a failed
//     transaction's write: then it failed with it (§2.2.3) and is :fail.
//
// After the run each replica's final lists must hold no element of a
// failed transaction (no replica keeps a failed version), and every read
// of a transaction known durable must be a prefix of the final list.

// txnRef names one writing transaction: tashkent.last_commit().
type txnRef struct {
	Version uint64
	Epoch   uint64
}

func (r txnRef) String() string { return fmt.Sprintf("version %d of epoch %d", r.Version, r.Epoch) }

// edKind is what a transaction was and how its COMMIT was answered.
type edKind int

const (
	edFastWrite  edKind = iota // acknowledged at the commit point
	edSafeWrite                // acknowledged once durable
	edSafeFailed               // FATAL TK006 at COMMIT
	edFastRead                 // read-only, acknowledged at once
	edSafeRead                 // read-only, acknowledged once its reads were durable
)

func edKindOf(fast, writes bool) edKind {
	switch {
	case fast && writes:
		return edFastWrite
	case writes:
		return edSafeWrite
	case fast:
		return edFastRead
	}
	return edSafeRead
}

// edTxn is one list-append transaction whose outcome is checked after the
// run.
type edTxn struct {
	kind edKind
	op   int // index of its completion in the history
	ref  txnRef
	mops []Mop
}

// EDResult is what mode ed's checks found.
type EDResult struct {
	FastShare int `json:"fast_share"`
	// FailedVersions counts the versions the certifier had decided and did
	// not find in its log after its kills (a lower bound).
	FailedVersions uint64 `json:"failed_versions"`
	// FastCommits are fast writing transactions acknowledged with a
	// version; FastFailed of them failed (txn_state), recorded :fail.
	FastCommits int `json:"fast_commits"`
	FastFailed  int `json:"fast_failed"`
	// SafeCommits are safe writing transactions acknowledged, each durable;
	// SafeFailed got FATAL TK006 at COMMIT, each failed.
	SafeCommits int `json:"safe_commits"`
	SafeFailed  int `json:"safe_failed"`
	// FastReads are fast read-only transactions acknowledged;
	// FastReadsFailed of them read a failed write, recorded :fail.
	FastReads       int `json:"fast_reads"`
	FastReadsFailed int `json:"fast_reads_failed"`
	SafeReads       int `json:"safe_reads"`
	// Warnings counts the WARNING TK006 notices sessions got about a fast
	// commit of theirs that failed; each named a failed transaction.
	Warnings int `json:"warnings"`
	// Unresolved counts fast commits acknowledged whose last_commit() went
	// unanswered (the connection broke): recorded :info.
	Unresolved int      `json:"unresolved"`
	Violations []string `json:"violations,omitempty"`
}

// edLedger records the list-append transactions of mode ed. Safe for
// concurrent use.
type edLedger struct {
	fastShare int

	mu         sync.Mutex
	txns       []edTxn
	warned     []txnRef
	unnamed    []string // TK006 warnings that named no transaction
	unresolved int
	// failed holds, once resolved, the appended elements of failed
	// transactions, with the transaction.
	failed map[int]txnRef
}

func newEDLedger(fastShare int) *edLedger {
	return &edLedger{fastShare: fastShare, failed: map[int]txnRef{}}
}

// drawFast decides whether the next transaction of a client is fast.
func (l *edLedger) drawFast(c *client) bool {
	return l != nil && c.rng.IntN(100) < l.fastShare
}

func (l *edLedger) add(t edTxn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.txns = append(l.txns, t)
}

func (l *edLedger) addUnresolved() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unresolved++
}

// refPattern finds (version, epoch) in TK006's messages: "... version V
// (epoch E) before it became durable ...".
var refPattern = regexp.MustCompile(`version (\d+) \(epoch (\d+)\)`)

func parseRef(msg string) (txnRef, bool) {
	m := refPattern.FindStringSubmatch(msg)
	if m == nil {
		return txnRef{}, false
	}
	v, err1 := strconv.ParseUint(m[1], 10, 64)
	e, err2 := strconv.ParseUint(m[2], 10, 64)
	return txnRef{Version: v, Epoch: e}, err1 == nil && err2 == nil
}

// notice records a WARNING TK006: a session's last fast commit failed.
func (l *edLedger) notice(_ *pgconn.PgConn, n *pgconn.Notice) {
	if n.Code != sqlstateTransactionFailed {
		return
	}
	ref, ok := parseRef(n.Message)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok {
		l.unnamed = append(l.unnamed, n.Message)
		return
	}
	l.warned = append(l.warned, ref)
}

// failedAtCommit records a safe COMMIT answered FATAL TK006.
func (l *edLedger) failedAtCommit(op int, mops []Mop, err error) {
	var pg *pgconn.PgError
	if l == nil || !errors.As(err, &pg) || pg.Code != sqlstateTransactionFailed {
		return
	}
	ref, _ := parseRef(pg.Message)
	l.add(edTxn{kind: edSafeFailed, op: op, ref: ref, mops: mops})
}

// lastCommit reads the session's last writing commit right after its
// COMMIT.
func lastCommit(ctx context.Context, c *client) (txnRef, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var v, e *int64
	err := c.conn.QueryRow(ctx, "SELECT version, epoch FROM tashkent.last_commit()").Scan(&v, &e)
	if err == nil && (v == nil || e == nil) {
		err = errors.New("tashkent.last_commit() is NULL right after a writing COMMIT")
	}
	if err != nil {
		if c.conn.IsClosed() {
			c.drop()
		}
		return txnRef{}, err
	}
	return txnRef{Version: uint64(*v), Epoch: uint64(*e)}, nil
}

// resolveTimeout bounds the wait for every transaction asked about to be
// durable or failed once the cluster converged.
const resolveTimeout = 30 * time.Second

// resolveED asks every replica the state of every transaction the ledger
// names, applies the answers to the history and returns the result. The
// workload must have stopped and the replicas converged.
func (r *runner) resolveED(ctx context.Context, la *listAppend) *EDResult {
	l := la.ed
	res := &EDResult{FastShare: l.fastShare}
	for _, f := range r.log.all() {
		res.FailedVersions += f.FailedVersions
	}
	refs := l.refs()
	states, err := r.txnStates(ctx, refs)
	if err != nil {
		res.Violations = append(res.Violations, fmt.Sprintf("harness: ask the transactions' states: %v", err))
		return res
	}
	l.apply(la, states, res)
	return res
}

// refs returns every distinct transaction the ledger names.
func (l *edLedger) refs() []txnRef {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[txnRef]bool{}
	var out []txnRef
	add := func(r txnRef) {
		if r.Version != 0 && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, t := range l.txns {
		add(t.ref)
	}
	for _, r := range l.warned {
		add(r)
	}
	return out
}

// txnStates asks each replica txn_state of every ref until none is
// committed or unknown any more (or resolveTimeout passed), and returns
// the first replica's answers; replicas that answer otherwise are an
// error.
func (r *runner) txnStates(ctx context.Context, refs []txnRef) (map[txnRef]string, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	var first map[txnRef]string
	var firstName string
	for _, rep := range r.ctl.state().Replicas {
		states, err := settledStates(ctx, harnessDSN(rep), refs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rep.Name, err)
		}
		if first == nil {
			first, firstName = states, rep.Name
			continue
		}
		for _, ref := range refs {
			if states[ref] != first[ref] {
				return nil, fmt.Errorf("txn_state(%d, %d) is %s on %s and %s on %s",
					ref.Version, ref.Epoch, first[ref], firstName, states[ref], rep.Name)
			}
		}
	}
	return first, nil
}

// settledStates asks one replica until every state is durable or failed,
// or ctx ends (then it returns what it last read).
func settledStates(ctx context.Context, dsn string, refs []txnRef) (map[txnRef]string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	vs, es := make([]int64, len(refs)), make([]int64, len(refs))
	for i, ref := range refs {
		vs[i], es[i] = int64(ref.Version), int64(ref.Epoch)
	}
	for {
		rows, err := conn.Query(ctx, `SELECT v, e, tashkent.txn_state(v, e) FROM unnest($1::bigint[], $2::bigint[]) AS t(v, e)`, vs, es)
		if err != nil {
			return nil, err
		}
		states := map[txnRef]string{}
		settled := true
		var v, e int64
		var state string
		_, err = pgx.ForEachRow(rows, []any{&v, &e, &state}, func() error {
			states[txnRef{Version: uint64(v), Epoch: uint64(e)}] = state
			settled = settled && (state == "durable" || state == "failed")
			return nil
		})
		if err != nil {
			return nil, err
		}
		if settled || ctxtime.Sleep(ctx, 500*time.Millisecond) != nil {
			return states, nil
		}
	}
}

// apply judges every transaction by its state: it sets the history's
// outcome of fast transactions, acknowledges the appends of those durable
// for the durability check, and records violations.
func (l *edLedger) apply(la *listAppend, states map[txnRef]string, res *EDResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	res.Warnings, res.Unresolved = len(l.warned), l.unresolved
	violate := func(format string, args ...any) {
		res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
	}
	for _, t := range l.txns {
		state := states[t.ref]
		switch t.kind {
		case edFastWrite:
			res.FastCommits++
			switch state {
			case "durable":
				la.ack(t.mops)
			case "failed":
				res.FastFailed++
				l.markFailed(t)
				la.hist.SetOutcome(t.op, Fail, fmt.Sprintf("acknowledged fast as %s, which failed (txn_state)", t.ref))
			default:
				violate("harness: the fast commit %s is %q after the run, neither durable nor failed", t.ref, state)
			}
		case edSafeWrite:
			res.SafeCommits++
			if state != "durable" {
				violate("ED recoverability: a safe commit acknowledged as %s is %q, not durable", t.ref, state)
			}
		case edSafeFailed:
			res.SafeFailed++
			switch {
			case t.ref.Version == 0:
				violate("a FATAL TK006 at a safe COMMIT named no version and epoch")
			case state != "failed":
				violate("a safe COMMIT was told FATAL TK006 for %s, but txn_state says %q", t.ref, state)
			default:
				l.markFailed(t)
			}
		}
	}
	for _, msg := range l.unnamed {
		violate("a WARNING TK006 named no version and epoch: %q", msg)
	}
	for _, ref := range l.warned {
		if states[ref] != "failed" {
			violate("a session was warned (TK006) that its fast commit %s failed, but txn_state says %q", ref, states[ref])
		}
	}
	for _, t := range l.txns {
		switch t.kind {
		case edFastRead:
			res.FastReads++
			if from, ok := l.readFailed(t.mops); ok {
				res.FastReadsFailed++
				la.hist.SetOutcome(t.op, Fail, fmt.Sprintf("a fast read-only transaction that read a write of %s, which failed", from))
			}
		case edSafeRead:
			res.SafeReads++
		}
	}
}

// markFailed records the appends of a failed transaction (l.mu held).
func (l *edLedger) markFailed(t edTxn) {
	for _, m := range t.mops {
		if m.Kind == Append {
			l.failed[m.Value] = t.ref
		}
	}
}

// readFailed reports whether mops read an element a failed transaction
// appended, and which transaction (l.mu held).
func (l *edLedger) readFailed(mops []Mop) (txnRef, bool) {
	for _, m := range mops {
		if m.Kind != Read {
			continue
		}
		for _, v := range m.Values {
			if ref, ok := l.failed[v]; ok {
				return ref, true
			}
		}
	}
	return txnRef{}, false
}

// finalViolations checks one replica's final lists: no element of a
// failed transaction remains, and every read of a transaction known
// durable is a prefix of its key's final list (what a durable transaction
// read is durable: Definition 2.2.2, condition 2).
func (l *edLedger) finalViolations(table string, final map[int][]int, hist *History) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, vals := range final {
		for _, v := range vals {
			if ref, ok := l.failed[v]; ok {
				out = append(out, fmt.Sprintf("%s key %d keeps %d, appended by %s, which failed", table, k, v, ref))
			}
		}
	}
	for _, t := range l.txns {
		if hist.TypeAt(t.op) != OK || (t.kind != edSafeWrite && t.kind != edSafeRead && t.kind != edFastWrite) {
			continue
		}
		for _, m := range t.mops {
			if m.Kind == Read && !m.Nil && !isPrefix(m.Values, final[m.Key]) {
				out = append(out, fmt.Sprintf("%s key %d: a durable transaction (%s) read %v, which is not a prefix of the final %v",
					table, m.Key, describeRef(t), m.Values, final[m.Key]))
			}
		}
	}
	return out
}

func describeRef(t edTxn) string {
	if t.ref.Version == 0 {
		return "read-only, safe"
	}
	return t.ref.String()
}

func isPrefix(p, s []int) bool {
	return len(p) <= len(s) && slices.Equal(p, s[:len(p)])
}
