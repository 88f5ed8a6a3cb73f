package proxy

import (
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/replica"
	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// A transaction that only read has nothing to certify: it commits locally
// (Tashkent §6.2, C2). Its COMMIT used to collect the writeset first, to
// learn that it was empty: a round trip and a plpgsql call, about 0.5 ms
// against PostgreSQL's 0.04 (docs/BENCHMARKS.md, session 10). When every
// statement of the transaction was a plain read (no write, no DDL, no
// user code: a read that calls a user's function is user code,
// usercode.go), the proxy sends its COMMIT after a check instead, in one
// round trip: replica.AssertNothingToReplicateSQL fails the transaction
// if it has writes or DDL notes after all (a writing function called from
// a view, which no statement shows), and the COMMIT behind it in the
// pipeline does not run. The proxy then rolls back and answers 40001:
// the client's retry goes through the collect and is certified, as every
// later transaction of the session is.

// readOnlyCheck is the check before the fast COMMIT.
var readOnlyCheck = proxyStatement{readOnlyCheckStatement, replica.AssertNothingToReplicateSQL}

// readOnlyCommitStatements are the fast COMMIT's pipeline.
var readOnlyCommitStatements = []proxyStatement{readOnlyCheck, commit}

// mayWrite reports whether statements of these kinds may write, run user
// code or DDL: anything but plain reads and transaction control.
func mayWrite(kinds []sqlclass.Kind) bool {
	for _, k := range kinds {
		if writes(k) {
			return true
		}
	}
	return false
}

// noteUnit records, before a unit is handled, whether it may write; the
// open transaction then counts as one that may (endUnit), from the
// unit's start: a COMMIT in the same unit as a write must collect.
func (s *session) noteUnit(kinds []sqlclass.Kind) {
	s.unitMayWrite = mayWrite(kinds)
}

// endUnit carries the unit's mark over to the open transaction.
func (s *session) endUnit() {
	if s.unitMayWrite {
		s.onlyReads = false
	}
	s.unitMayWrite = false
}

// readsOnly reports whether the open transaction ran only plain reads,
// including the unit being handled.
func (s *session) readsOnly() bool {
	return s.onlyReads && !s.unitMayWrite && !s.hiddenWrites
}

// commitReadOnly commits a transaction that ran only plain reads.
func (s *session) commitReadOnly() (*pgproto3.ErrorResponse, error) {
	if err := s.sendPipeline(readOnlyCommitStatements); err != nil {
		return nil, err
	}
	res, err := s.relay(true)
	if err != nil {
		return nil, err
	}
	lost := s.notePipeline(readOnlyCommitStatements, res)
	if !res.failed() {
		return nil, nil
	}
	if res.status != 'I' { // the check failed: the COMMIT did not run
		if err := s.rollback(); err != nil {
			return nil, err
		}
	}
	if err := s.resyncStatements(lost); err != nil {
		return nil, err
	}
	if res.err.Code != replica.CodeSomethingToReplicate {
		return explainCollectError(res.err), nil
	}
	s.hiddenWrites = true
	s.log.Info("a transaction that ran only reads wrote through code the proxy could not see; this session's transactions are collected from now on")
	return errorResponse(codeSerializationFailure,
		"could not serialize access: the transaction wrote through code that tashkent saw only as reads (a function called by a view, an operator or a cast), so it was rolled back",
		"Its statements were all reads to the proxy, which commits such a transaction without collecting its writeset.",
		"Retry the transaction: from now on this session's transactions are collected and certified."), nil
}
