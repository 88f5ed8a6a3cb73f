package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// result is how a forwarded or injected unit ended at the backend.
type result struct {
	status byte                    // ReadyForQuery status: 'I', 'T' or 'E'
	err    *pgproto3.ErrorResponse // the first error, if any
}

func (r result) failed() bool { return r.err != nil }

// errRecovering refuses a session while the replica is being recovered.
var errRecovering = errors.New("the replica is recovering")

// errBackendGone means the backend connection broke; the session ends.
var errBackendGone = errors.New("the replica's database connection broke")

// relay reads the backend's messages until ReadyForQuery. Unless swallow,
// it forwards every message but the ReadyForQuery to the client; the caller
// decides what ReadyForQuery the client gets. It runs the COPY FROM STDIN
// sub-protocol with the client when the backend asks for it.
func (s *session) relay(swallow bool) (result, error) {
	var r result
	for {
		msg, err := s.w.Server.Receive()
		if err != nil {
			return r, fmt.Errorf("%w: %v", errBackendGone, err)
		}
		switch m := msg.(type) {
		case *pgproto3.ReadyForQuery:
			r.status = m.TxStatus
			s.status = m.TxStatus
			return r, nil
		case *pgproto3.ErrorResponse:
			e := s.rewriteError(m)
			if swallow {
				e = s.redactOwnError(e)
			}
			if r.err == nil {
				r.err = e
			}
			if !swallow {
				s.w.Client.Send(e)
			}
			continue
		case *pgproto3.ParameterStatus:
			s.w.ServerParams[m.Name] = m.Value
		case *pgproto3.ParseComplete:
			if !swallow { // a client's Parse (parsetrack.go)
				s.confirmParse()
			}
		case *pgproto3.CopyInResponse:
			if swallow {
				return r, fmt.Errorf("proxy: an injected statement asked for COPY data")
			}
			s.w.Client.Send(m)
			if err := s.w.Client.Flush(); err != nil {
				return r, err
			}
			if err := s.pumpCopyIn(); err != nil {
				return r, err
			}
			if s.relayingSyncedUnit {
				if err := s.forwardSyncAfterCopy(); err != nil {
					return r, err
				}
			}
			continue
		case *pgproto3.NoticeResponse:
			if swallow {
				s.log.Debug("notice from an injected statement", "message", m.Message)
				continue
			}
		}
		if !swallow {
			s.w.Client.Send(msg)
		}
	}
}

// pumpCopyIn forwards the client's COPY data until CopyDone or CopyFail.
func (s *session) pumpCopyIn() error {
	for {
		msg, err := s.w.Client.Receive()
		if err != nil {
			return fmt.Errorf("client: %w", err)
		}
		switch msg.(type) {
		case *pgproto3.CopyData, *pgproto3.Flush, *pgproto3.Sync:
			s.w.Server.Send(msg)
		case *pgproto3.CopyDone, *pgproto3.CopyFail:
			s.w.Server.Send(msg)
			return s.w.Server.Flush()
		default:
			s.w.Server.Send(&pgproto3.CopyFail{Message: fmt.Sprintf("unexpected %T during COPY", msg)})
			return s.w.Server.Flush()
		}
	}
}

// conflictCancelWindow is how long after the lock watch's last cancel a
// 57014 is taken for its doing. Not just the next one: the lock watch
// cancels again every lockWatchInterval until the remote writeset gets
// its lock, and a cancel is a signal that can arrive one statement late
// (see doom), so a second 57014 may follow the first (in the client's
// retry). A client's own cancel inside the window reads as 40001 too.
const conflictCancelWindow = time.Second

// rewriteError turns the cancellation the lock watch caused into the
// serialization failure it stands for.
func (s *session) rewriteError(m *pgproto3.ErrorResponse) *pgproto3.ErrorResponse {
	e := *m
	if e.Code == codeQueryCanceled && s.cancelledForConflict(time.Now()) {
		e.Code = codeSerializationFailure
		e.Message = "could not serialize access: this transaction holds a row lock that a transaction committed first on another replica needs"
		e.Detail = "The proxy cancelled the statement so that the replica can apply the other transaction (eager pre-certification, Tashkent §8.2)."
		e.Hint = "Retry the transaction."
	}
	return &e
}

// cancelledForConflict says whether a 57014 seen at now follows a cancel of
// the lock watch's (conflictCancelWindow).
func (s *session) cancelledForConflict(now time.Time) bool {
	at := s.conflictCancelAt.Load()
	if at == 0 {
		return false
	}
	since := sinceProcessStart(now) - time.Duration(at)
	return since >= 0 && since < conflictCancelWindow
}

// processStart anchors sinceProcessStart.
var processStart = time.Now()

// sinceProcessStart is t on the monotonic clock, as a duration from the
// process's start: a wall-clock step cannot move it, and it fits an
// atomic.Int64.
func sinceProcessStart(t time.Time) time.Duration { return t.Sub(processStart) }

// redactBoundParameters removes, from the error of a statement of the
// proxy's own, the context lines in which PostgreSQL reports the
// statement's bound parameters. The proxy binds the record token to its
// collect and to record_version (replica.CollectQuery, RecordVersionSQL),
// in the client's session, and any role may SET
// log_parameter_max_length_on_error: then an error in those statements
// (a DISCARD TEMP before COMMIT fails the collect) carried the token to
// the client, in the CONTEXT line "unnamed portal with parameters: $1 =
// '...'" (review h33, finding 2). With the token a role could empty its
// writeset before the collect (its writes never replicated) or record
// versions its database does not hold.
func redactBoundParameters(e *pgproto3.ErrorResponse) *pgproto3.ErrorResponse {
	if !strings.Contains(e.Where, "portal") {
		return e
	}
	lines := strings.Split(e.Where, "\n")
	kept := lines[:0]
	for _, line := range lines {
		if strings.Contains(line, "portal") && strings.Contains(line, "parameter") {
			continue
		}
		kept = append(kept, line)
	}
	e.Where = strings.Join(kept, "\n")
	return e
}

// redactOwnError is redactBoundParameters, and the token itself removed
// from every field wherever it is (a server whose lc_messages words the
// context lines otherwise).
func (s *session) redactOwnError(e *pgproto3.ErrorResponse) *pgproto3.ErrorResponse {
	e = redactBoundParameters(e)
	if s.p.rep == nil {
		return e
	}
	token := s.p.rep.recordToken.Load()
	if token == nil || len(*token) == 0 {
		return e
	}
	for _, f := range []*string{&e.Message, &e.Detail, &e.Hint, &e.Where, &e.InternalQuery} {
		*f = strings.ReplaceAll(*f, string(*token), "(tashkent's record token)")
	}
	return e
}

// exec sends a query of the proxy's own and swallows its responses.
func (s *session) exec(sql string) (result, error) {
	if err := s.openDeferredBegin(); err != nil {
		return result{}, err
	}
	s.w.Server.Send(&pgproto3.Query{String: sql})
	if err := s.w.Server.Flush(); err != nil {
		return result{}, fmt.Errorf("%w: %v", errBackendGone, err)
	}
	return s.relay(true)
}

// queryRows runs a query of the proxy's own and returns its rows, every
// value copied, NULL as nil.
func (s *session) queryRows(sql string) ([][][]byte, result, error) {
	if err := s.openDeferredBegin(); err != nil {
		return nil, result{}, err
	}
	s.w.Server.Send(&pgproto3.Query{String: sql})
	if err := s.w.Server.Flush(); err != nil {
		return nil, result{}, fmt.Errorf("%w: %v", errBackendGone, err)
	}
	return s.readRows()
}

// readRows collects the rows of the proxy's own query up to ReadyForQuery.
func (s *session) readRows() ([][][]byte, result, error) {
	byStatement, r, err := s.readStatementRows()
	return slices.Concat(byStatement...), r, err
}

// readStatementRows is readRows for a pipeline of statements: the rows of
// each, by its index (counted by the statements' completions; a
// statement that did not complete has none).
func (s *session) readStatementRows() ([][][][]byte, result, error) {
	var byStatement [][][][]byte
	var r result
	for stmt := 0; ; {
		msg, err := s.w.Server.Receive()
		if err != nil {
			return nil, r, fmt.Errorf("%w: %v", errBackendGone, err)
		}
		switch m := msg.(type) {
		case *pgproto3.CommandComplete, *pgproto3.EmptyQueryResponse:
			stmt++
		case *pgproto3.DataRow:
			row := make([][]byte, len(m.Values))
			for i, v := range m.Values {
				if v != nil {
					row[i] = append([]byte{}, v...)
				}
			}
			for len(byStatement) <= stmt {
				byStatement = append(byStatement, nil)
			}
			byStatement[stmt] = append(byStatement[stmt], row)
		case *pgproto3.ErrorResponse:
			if r.err == nil {
				r.err = s.redactOwnError(s.rewriteError(m))
			}
		case *pgproto3.NoticeResponse:
			s.log.Warn("notice from the writeset buffer", "message", m.Message)
		case *pgproto3.ReadyForQuery:
			r.status = m.TxStatus
			s.status = m.TxStatus
			return byStatement, r, nil
		}
	}
}

// rowsOf returns the rows of statement i of readStatementRows' result.
func rowsOf(byStatement [][][][]byte, i int) [][][]byte {
	if i < len(byStatement) {
		return byStatement[i]
	}
	return nil
}

// forwardRaw writes already-encoded client messages to the backend, after
// a deferred BEGIN if there is one (forwardDeferred).
func (s *session) forwardRaw(raw []byte) error {
	if s.deferredBegin {
		return s.forwardDeferred(raw)
	}
	if err := s.w.Server.Flush(); err != nil {
		return fmt.Errorf("%w: %v", errBackendGone, err)
	}
	if _, err := s.w.ServerConn.Write(raw); err != nil {
		return fmt.Errorf("%w: %v", errBackendGone, err)
	}
	return nil
}

// rollback ends whatever transaction the backend has open.
func (s *session) rollback() error {
	if s.status == 'I' || s.endDeferredBegin() {
		return nil
	}
	_, err := s.exec("ROLLBACK")
	return err
}

func errorResponse(code, message, detail, hint string) *pgproto3.ErrorResponse {
	return &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: message, Detail: detail, Hint: hint}
}

func (s *session) notice(message, detail string) {
	s.w.Client.Send(&pgproto3.NoticeResponse{Severity: "NOTICE", SeverityUnlocalized: "NOTICE", Code: "00000", Message: message, Detail: detail})
}

// relayUnit relays the answer to an extended-protocol unit the proxy sent
// with a Sync at its end (see relay).
func (s *session) relayUnit() (result, error) {
	s.relayingSyncedUnit = true
	defer func() { s.relayingSyncedUnit = false }()
	return s.relay(false)
}

// forwardSyncAfterCopy passes on the Sync a client sends after the
// CopyDone of a COPY FROM STDIN it started with the extended protocol.
// PostgreSQL ignored the unit's own Sync, which came during copy-in mode
// (libpq sends Execute and Sync together and a second Sync after
// CopyDone), and answers nothing more until that second one. The proxy
// must read it from the client, or both wait for ever; a client that
// leaves instead ends the session here rather than leaving it stuck.
func (s *session) forwardSyncAfterCopy() error {
	msg, err := s.w.Client.Receive()
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if _, ok := msg.(*pgproto3.Sync); !ok {
		return fmt.Errorf("%w: %T after the CopyDone of an extended-protocol COPY, where PostgreSQL needs a Sync", errProtocol, msg)
	}
	s.w.Server.Send(msg)
	return s.w.Server.Flush()
}
