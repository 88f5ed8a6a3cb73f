package proxy

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// unitBytesMax bounds the extended-protocol messages buffered before Sync.
// A unit is normally a few statements; a client that never sends Sync must
// not make the proxy buffer without end.
const unitBytesMax = 256 << 20

// unitMsg is one buffered extended-protocol message: its encoding (what is
// forwarded) and what the proxy needs to know about it.
type unitMsg struct {
	raw    []byte
	typ    byte   // 'P' Parse, 'B' Bind, 'E' Execute, 'D' Describe, 'C' Close
	name   string // Parse: statement; Bind, Execute: portal; Describe, Close: object
	stmt   string // Bind: the statement bound
	query  string // Parse: the SQL
	object byte   // Describe, Close: 'S' or 'P'
	// paramTypes are, for a Parse, the parameter types it declares.
	paramTypes []uint32
	// bindArgs is, for a Bind, its parameters and parameter format codes
	// (deferBeginUnit defers only a Bind without either).
	bindArgs int
}

// unit is the extended-protocol messages up to and including Sync, or up
// to a Flush: a client may send Flush and wait for the answers before it
// sends more (asyncpg prepares every statement that way). A unit ended by a
// Flush is partial: the exchange goes on until Sync, and session.exchange
// keeps what the proxy must remember across its parts.
type unit struct {
	msgs []unitMsg
	sync []byte // the encoded Sync; nil for a partial unit
}

func (u *unit) partial() bool { return u.sync == nil }

// terminator is what ends the unit's last segment: its Sync, or a Flush.
func (u *unit) terminator() []byte {
	if u.partial() {
		return flushMessage
	}
	return u.sync
}

var flushMessage, _ = (&pgproto3.Flush{}).Encode(nil)

// readUnit buffers extended-protocol messages, starting with first, up to
// Sync or Flush. Everything is copied: pgproto3 reuses its buffers.
func (s *session) readUnit(first pgproto3.FrontendMessage) (*unit, error) {
	u := &unit{}
	size := 0
	for msg := first; ; {
		raw, err := msg.Encode(nil)
		if err != nil {
			return nil, err
		}
		size += len(raw)
		if size > unitBytesMax {
			return nil, fmt.Errorf("client sent over %d bytes of extended-protocol messages without Sync", unitBytesMax)
		}
		m := unitMsg{raw: raw}
		switch v := msg.(type) {
		case *pgproto3.Sync:
			u.sync = raw
			return u, nil
		case *pgproto3.Parse:
			m.typ, m.name, m.query, m.paramTypes = 'P', v.Name, v.Query, slices.Clone(v.ParameterOIDs)
		case *pgproto3.Bind:
			m.typ, m.name, m.stmt = 'B', v.DestinationPortal, v.PreparedStatement
			m.bindArgs = len(v.Parameters) + len(v.ParameterFormatCodes)
		case *pgproto3.Execute:
			m.typ, m.name = 'E', v.Portal
		case *pgproto3.Describe:
			m.typ, m.name, m.object = 'D', v.Name, v.ObjectType
		case *pgproto3.Close:
			m.typ, m.name, m.object = 'C', v.Name, v.ObjectType
		case *pgproto3.Flush:
			return u, nil
		default:
			return nil, fmt.Errorf("%w: unexpected %T in an extended-protocol exchange", errProtocol, msg)
		}
		u.msgs = append(u.msgs, m)
		if msg, err = s.w.Client.Receive(); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
}

var errProtocol = fmt.Errorf("protocol violation")

// track records statements and portals as the messages will create them,
// and returns, for each Bind and Execute, the statement it binds or runs.
func (s *session) track(u *unit) [][]sqlclass.Statement {
	stmts := make([][]sqlclass.Statement, len(u.msgs))
	for i := range u.msgs {
		m := &u.msgs[i]
		switch m.typ {
		case 'P':
			parsed, _ := s.classify(m.query)
			if len(parsed) == 1 {
				if rewritten := rewriteIsolation(parsed[0]); rewritten != "" {
					m.raw, _ = (&pgproto3.Parse{Name: m.name, Query: rewritten, ParameterOIDs: m.paramTypes}).Encode(nil)
					s.isolationNotice()
				}
			}
			s.noteParse(m.name)
			s.statements[m.name] = preparedStatement{stmts: parsed, declaredParams: len(m.paramTypes)}
		case 'B':
			s.portals[m.name] = m.stmt
			stmts[i] = s.statements[m.stmt].stmts
		case 'E':
			stmts[i] = s.statements[s.portals[m.name]].stmts
		case 'C':
			if m.object == 'S' {
				delete(s.statements, m.name)
			} else {
				delete(s.portals, m.name)
			}
		}
	}
	return stmts
}

func kindOf(stmts []sqlclass.Statement) sqlclass.Kind {
	if len(stmts) != 1 {
		return sqlclass.Other
	}
	return stmts[0].Kind
}

// executedKinds are the kinds of the statements the unit's Executes run
// (sqlclass.Other for one the proxy does not know).
func executedKinds(u *unit, stmts [][]sqlclass.Statement) []sqlclass.Kind {
	var kinds []sqlclass.Kind
	for i, m := range u.msgs {
		if m.typ == 'E' {
			kinds = append(kinds, kindOf(stmts[i]))
		}
	}
	return kinds
}

// exchange is what the proxy remembers across the partial units of one
// extended-protocol exchange (up to Sync).
type exchange struct {
	open    bool // a partial unit was processed; Sync has not come yet
	wrapped bool // the proxy opened a transaction block for a write (see splitUnit)
	failed  bool // an error was reported: PostgreSQL discards everything until Sync
	played  bool // the error came from the proxy for a preempted session: discard here, not at the backend
}

// extendedUnit processes one unit. The common cases (a read, or a statement
// inside a transaction block) are forwarded as they are; a COMMIT of a
// transaction block and a write outside one split the unit at the point
// where the proxy must act.
func (s *session) extendedUnit(ctx context.Context, u *unit) error {
	stmts := s.track(u)
	kinds := executedKinds(u, stmts)
	s.noteUnit(kinds)
	defer s.undoUnconfirmedParses()
	if s.ex.failed {
		return s.skipToSync(ctx, u)
	}
	if !s.ex.open {
		if taken, err := s.takeDoom(kinds, u); taken || err != nil {
			return err
		}
		for i, m := range u.msgs {
			if m.typ == 'P' && unparsableNotUTF8(m.query) {
				return s.refuse(codeFeatureNotSupported, notUTF8Message, notUTF8Hint)
			}
			if m.typ == 'E' && len(stmts[i]) == 1 && reservedSetting(stmts[i][0]) {
				return s.refuse(codeInsufficientPrivilege, "settings named tashkent.* belong to the tashkent proxy", "")
			}
			if refused, err := s.refuseUnreplicated(executed(m, stmts[i])...); refused || err != nil {
				return err
			}
		}
		s.labelIfIdle()
		if refusal, err := s.markLocalDDL(u, stmts); err != nil || refusal != nil {
			if err != nil {
				return err
			}
			return s.refuse(refusal.Code, refusal.Message, refusal.Hint)
		}
		if s.deferBeginUnit(u, stmts) { // a whole exchange that only opens a block
			return nil
		}
		if st, ok := s.onlyPortalCommit(u, stmts); ok { // a whole exchange that only commits
			return s.commitUnit(ctx, u, st)
		}
	}
	s.ex.open = u.partial()
	if !s.ex.wrapped && !s.unitNeedsIntervention(u, stmts) {
		return s.forwardUnit(u, stmts)
	}
	return s.splitUnit(ctx, u, stmts)
}

// skipToSync passes on what the client sends after an error until Sync,
// as PostgreSQL discards it, and then ends the exchange.
func (s *session) skipToSync(ctx context.Context, u *unit) error {
	if s.ex.played {
		if !u.partial() {
			s.ex = exchange{}
			s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.playedStatus()})
		}
		return nil
	}
	if err := s.forwardRaw(u.encoded(0, len(u.msgs), u.terminator())); err != nil {
		return err
	}
	if u.partial() {
		return nil // PostgreSQL answers nothing until Sync
	}
	if _, err := s.relay(false); err != nil {
		return err
	}
	return s.endExchange(ctx, false)
}

// endExchange answers the client's Sync: the block the proxy opened is
// committed or rolled back, and the client gets ReadyForQuery.
func (s *session) endExchange(ctx context.Context, ok bool) error {
	wrapped := s.ex.wrapped
	s.ex = exchange{}
	if wrapped {
		return s.finishWrapped(ctx, ok)
	}
	if !ok && s.status == 'T' { // the error came from the proxy, not the backend
		if err := s.failBlock(); err != nil {
			return err
		}
	}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	return nil
}

// noteExecuted records what the Executes of messages [from, to) did, once
// they all completed without error.
func (s *session) noteExecuted(u *unit, stmts [][]sqlclass.Statement, from, to int) error {
	for i := from; i < to; i++ {
		if u.msgs[i].typ == 'E' && len(stmts[i]) == 1 {
			if err := s.noteStatement(stmts[i][0]); err != nil {
				return err
			}
		}
	}
	return nil
}

// intervention is what the proxy must do at one message of a unit.
type intervention int

const (
	none        intervention = iota
	openBlock                // a write is bound outside a transaction block
	commitBlock              // COMMIT of a transaction block
	refuse2PC                // PREPARE TRANSACTION
)

// interventionAt predicts, from the transaction status pred before message
// i, what the proxy must do there, and returns the status after it.
func interventionAt(m unitMsg, stmts []sqlclass.Statement, pred byte) (intervention, byte) {
	k := kindOf(stmts)
	switch m.typ {
	case 'B':
		if pred == 'I' && writes(k) {
			return openBlock, 'T'
		}
	case 'E':
		switch {
		case k == sqlclass.PrepareTransaction:
			return refuse2PC, pred
		case k == sqlclass.Commit && pred == 'T':
			return commitBlock, 'I'
		case k == sqlclass.Begin:
			return none, 'T'
		case k == sqlclass.Commit || k == sqlclass.Rollback:
			return none, 'I'
		}
	}
	return none, pred
}

// unitNeedsIntervention reports whether any message of the unit does.
func (s *session) unitNeedsIntervention(u *unit, stmts [][]sqlclass.Statement) bool {
	pred := s.status
	for i, m := range u.msgs {
		var what intervention
		if what, pred = interventionAt(m, stmts[i], pred); what != none {
			return true
		}
	}
	return false
}

// forwardUnit sends the unit as it is and relays the whole answer.
func (s *session) forwardUnit(u *unit, stmts [][]sqlclass.Statement) error {
	if err := s.forwardRaw(u.encoded(0, len(u.msgs), u.terminator())); err != nil {
		return err
	}
	if u.partial() {
		failed, err := s.relayFlushed(u.msgs)
		if err == nil && !failed {
			err = s.noteExecuted(u, stmts, 0, len(u.msgs))
		}
		s.ex.failed = failed
		return err
	}
	res, err := s.relayUnit()
	if err != nil {
		return err
	}
	if !res.failed() {
		if err := s.noteExecuted(u, stmts, 0, len(u.msgs)); err != nil {
			return err
		}
	}
	s.ex = exchange{}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	return nil
}

// encoded concatenates messages [from, to) and the terminator (a Sync or a
// Flush; nil for none).
func (u *unit) encoded(from, to int, terminator []byte) []byte {
	var b []byte
	for _, m := range u.msgs[from:to] {
		b = append(b, m.raw...)
	}
	return append(b, terminator...)
}

// relayFlushed relays the answers to messages sent with Flush instead of
// Sync: there is no ReadyForQuery to wait for, so it counts, per message,
// up to the answer that ends it. An error ends everything: PostgreSQL
// discards the rest until Sync. It reports whether there was one.
func (s *session) relayFlushed(msgs []unitMsg) (bool, error) {
	for _, m := range msgs {
		for done := false; !done; {
			msg, err := s.w.Server.Receive()
			if err != nil {
				return false, fmt.Errorf("%w: %v", errBackendGone, err)
			}
			switch v := msg.(type) {
			case *pgproto3.ErrorResponse:
				s.w.Client.Send(s.rewriteError(v))
				return true, nil
			case *pgproto3.ParseComplete:
				done = m.typ == 'P'
				s.confirmParse()
			case *pgproto3.BindComplete:
				done = m.typ == 'B'
			case *pgproto3.CloseComplete:
				done = m.typ == 'C'
			case *pgproto3.RowDescription, *pgproto3.NoData:
				done = m.typ == 'D'
			case *pgproto3.CommandComplete, *pgproto3.EmptyQueryResponse, *pgproto3.PortalSuspended:
				done = m.typ == 'E'
			case *pgproto3.ParameterStatus:
				s.w.ServerParams[v.Name] = v.Value
			case *pgproto3.CopyInResponse:
				s.w.Client.Send(v)
				if err := s.w.Client.Flush(); err != nil {
					return false, err
				}
				if err := s.pumpCopyIn(); err != nil {
					return false, err
				}
				// PostgreSQL holds the COPY's CommandComplete until a
				// Flush or Sync, which the client sends only after it,
				// so the proxy asks for it.
				s.w.Server.Send(&pgproto3.Flush{})
				if err := s.w.Server.Flush(); err != nil {
					return false, fmt.Errorf("%w: %v", errBackendGone, err)
				}
				continue
			}
			s.w.Client.Send(msg)
		}
	}
	return false, nil
}

// splitUnit runs the unit in segments, each ended by a Sync of the proxy's,
// acting between segments: opening a transaction block before a write is
// bound outside one (a Sync inside the block is harmless; the block keeps
// the portals), committing at COMMIT. After an error the rest of the unit is
// skipped, as PostgreSQL skips to Sync.
func (s *session) splitUnit(ctx context.Context, u *unit, stmts [][]sqlclass.Statement) error {
	from := 0
	beginFirst := false // the next segment goes after the proxy's BEGIN, in the same write
	wrapped := s.ex.wrapped
	segment := func(to int) (bool, error) {
		if to == from {
			return true, nil
		}
		raw := u.encoded(from, to, u.sync)
		if beginFirst {
			raw = append(append([]byte{}, beginPrefix...), raw...)
		}
		if err := s.forwardRaw(raw); err != nil {
			return false, err
		}
		start := from
		from = to
		if beginFirst {
			beginFirst = false
			if ok, err := s.afterPipelinedBegin(u.encoded(start, to, u.sync), true); !ok || err != nil {
				wrapped = false
				return false, err
			}
		}
		res, err := s.relayUnit()
		if err != nil || res.failed() {
			return false, err
		}
		return true, s.noteExecuted(u, stmts, start, to)
	}
	if u.partial() {
		// The proxy's own Syncs between segments end PostgreSQL's implicit
		// transaction, and with it the portals of a flushed exchange: keep
		// a block open for the rest of the exchange.
		segment = s.flushedSegment(u, stmts, &from)
	}
	// statusBefore predicts the backend's status before message i from the
	// status at the start of the pending segment.
	statusBefore := func(i int) byte {
		pred := s.status
		for j := from; j < i; j++ {
			_, pred = interventionAt(u.msgs[j], stmts[j], pred)
		}
		return pred
	}
	ok := true
	for i, m := range u.msgs {
		what, _ := interventionAt(m, stmts[i], statusBefore(i))
		if what == none {
			continue
		}
		if what == openBlock && s.status == 'I' && !wrapped && !u.partial() && !executes(u.msgs[from:i]) {
			// Nothing before the write needs the implicit transaction:
			// the block opens ahead of the whole segment, in one round trip.
			s.labelIfIdle()
			beginFirst, wrapped = true, true
			continue
		}
		var err error
		if ok, err = segment(i); err != nil {
			return err
		}
		if !ok {
			break
		}
		switch {
		case what == refuse2PC:
			s.w.Client.Send(errorResponse(codeFeatureNotSupported, "tashkent does not support two-phase commit (PREPARE TRANSACTION)", "",
				"The cluster itself is the coordinator: commit the transaction normally."))
			ok = false
		case what == commitBlock && s.status == 'T':
			// The client's COMMIT, of its own block or of the one the proxy
			// opened for a write outside a block (PostgreSQL would commit
			// its implicit transaction there): certified either way. It was
			// forwarded as it was after a wrapped write, which committed the
			// write on this replica only.
			from = i + 1 // the COMMIT itself is not forwarded
			wrapped = false
			if err := s.commitStatement(ctx, stmts[i][0], false); err != nil {
				return err
			}
		case what == openBlock && s.status == 'I' && !wrapped:
			s.labelIfIdle()
			res, err := s.begin()
			if err != nil {
				return err
			}
			wrapped, ok = !res.failed(), !res.failed()
			if res.failed() {
				s.w.Client.Send(res.err)
			}
		}
		if !ok {
			break
		}
	}
	if ok {
		var err error
		if ok, err = segment(len(u.msgs)); err != nil {
			return err
		}
	}
	s.ex.wrapped = wrapped
	if u.partial() {
		s.ex.failed = !ok
		return nil
	}
	return s.endExchange(ctx, ok)
}

// flushedSegment forwards the messages of a partial unit with Flush (not
// Sync: PostgreSQL's implicit transaction and its portals live on) and
// relays their answers.
func (s *session) flushedSegment(u *unit, stmts [][]sqlclass.Statement, from *int) func(int) (bool, error) {
	return func(to int) (bool, error) {
		if to == *from {
			return true, nil
		}
		if err := s.forwardRaw(u.encoded(*from, to, flushMessage)); err != nil {
			return false, err
		}
		start := *from
		*from = to
		failed, err := s.relayFlushed(u.msgs[start:to])
		if err != nil || failed {
			return false, err
		}
		return true, s.noteExecuted(u, stmts, start, to)
	}
}

// onlyPortalCommit returns the COMMIT (or END) of a unit that only runs
// it through the unnamed portal, in a transaction block: how libpq runs a
// prepared COMMIT (pgbench -M prepared ends every TPC-B transaction so).
// COMMIT AND CHAIN is left to splitUnit.
func (s *session) onlyPortalCommit(u *unit, stmts [][]sqlclass.Statement) (sqlclass.Statement, bool) {
	if u.partial() || s.status != 'T' || s.ex.wrapped {
		return sqlclass.Statement{}, false
	}
	st, ok := s.onlyPortalStatement(u, stmts)
	return st, ok && st.Kind == sqlclass.Commit && !st.Chain
}

// commitUnit answers a unit onlyPortalCommit found and commits the block.
// The Bind and the Describe are answered by the proxy, as PostgreSQL
// would for a COMMIT (BindComplete, NoData), and never sent: the commit
// needs no portal, and a round trip to the database before the collect
// would only delay it (splitUnit would forward them with a Sync of its
// own first).
func (s *session) commitUnit(ctx context.Context, u *unit, st sqlclass.Statement) error {
	s.answerBindAndDescribe(u)
	s.ex = exchange{}
	return s.commitStatement(ctx, st, true)
}

// finishWrapped commits (or, after an error, rolls back) the transaction
// block the proxy opened around a unit's writes: the implicit transaction
// PostgreSQL would have committed at Sync.
func (s *session) finishWrapped(ctx context.Context, ok bool) error {
	if ok && s.status == 'T' {
		errResp, err := s.commitTransaction(ctx)
		if err != nil {
			return err
		}
		if errResp != nil {
			s.w.Client.Send(errResp)
		}
	} else if err := s.rollback(); err != nil {
		return err
	}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	return nil
}

// executes reports whether any of msgs is an Execute.
func executes(msgs []unitMsg) bool {
	for _, m := range msgs {
		if m.typ == 'E' {
			return true
		}
	}
	return false
}
