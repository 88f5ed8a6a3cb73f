package proxy

import (
	"context"
	"fmt"

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
	typ    byte   // 'P' Parse, 'B' Bind, 'E' Execute, 'D' Describe, 'C' Close, 'H' Flush
	name   string // Parse: statement; Bind, Execute: portal; Describe, Close: object
	stmt   string // Bind: the statement bound
	query  string // Parse: the SQL
	object byte   // Describe, Close: 'S' or 'P'
}

// unit is the extended-protocol messages up to and including Sync.
type unit struct {
	msgs []unitMsg
	sync []byte // the encoded Sync
}

// readUnit buffers extended-protocol messages, starting with first, up to
// Sync. Everything is copied: pgproto3 reuses its buffers.
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
			m.typ, m.name, m.query = 'P', v.Name, v.Query
		case *pgproto3.Bind:
			m.typ, m.name, m.stmt = 'B', v.DestinationPortal, v.PreparedStatement
		case *pgproto3.Execute:
			m.typ, m.name = 'E', v.Portal
		case *pgproto3.Describe:
			m.typ, m.name, m.object = 'D', v.Name, v.ObjectType
		case *pgproto3.Close:
			m.typ, m.name, m.object = 'C', v.Name, v.ObjectType
		case *pgproto3.Flush:
			m.typ = 'H'
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
			parsed, _ := sqlclass.Classify(m.query)
			if len(parsed) == 1 {
				if rewritten := rewriteIsolation(parsed[0]); rewritten != "" {
					m.raw, _ = (&pgproto3.Parse{Name: m.name, Query: rewritten}).Encode(nil)
					s.isolationNotice()
				}
			}
			s.statements[m.name] = parsed
		case 'B':
			s.portals[m.name] = m.stmt
			stmts[i] = s.statements[m.stmt]
		case 'E':
			stmts[i] = s.statements[s.portals[m.name]]
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

// extendedUnit processes one unit. The common cases (a read, or a statement
// inside a transaction block) are forwarded as they are; a COMMIT of a
// transaction block and a write outside one split the unit at the point
// where the proxy must act.
func (s *session) extendedUnit(ctx context.Context, u *unit) error {
	stmts := s.track(u)
	var kinds []sqlclass.Kind
	for i, m := range u.msgs {
		if m.typ == 'E' {
			kinds = append(kinds, kindOf(stmts[i]))
		}
	}
	if s.takeDoom(kinds) {
		return nil
	}
	for i, m := range u.msgs {
		if m.typ == 'E' && len(stmts[i]) == 1 && reservedSetting(stmts[i][0]) {
			return s.refuse(codeInsufficientPrivilege, "settings named tashkent.* belong to the tashkent proxy", "")
		}
	}
	s.labelIfIdle()
	if !s.unitNeedsIntervention(u, stmts) {
		return s.forwardUnit(u, stmts)
	}
	return s.splitUnit(ctx, u, stmts)
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
	if err := s.forwardRaw(u.encoded(0, len(u.msgs), true)); err != nil {
		return err
	}
	res, err := s.relay(false)
	if err != nil {
		return err
	}
	if !res.failed() {
		if err := s.noteExecuted(u, stmts, 0, len(u.msgs)); err != nil {
			return err
		}
	}
	s.w.Client.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
	return nil
}

func (u *unit) encoded(from, to int, withSync bool) []byte {
	var b []byte
	for _, m := range u.msgs[from:to] {
		b = append(b, m.raw...)
	}
	if withSync {
		b = append(b, u.sync...)
	}
	return b
}

// splitUnit runs the unit in segments, each ended by a Sync of the proxy's,
// acting between segments: opening a transaction block before a write is
// bound outside one (a Sync inside the block is harmless; the block keeps
// the portals), committing at COMMIT. After an error the rest of the unit is
// skipped, as PostgreSQL skips to Sync.
func (s *session) splitUnit(ctx context.Context, u *unit, stmts [][]sqlclass.Statement) error {
	wrapped := false
	from := 0
	segment := func(to int) (bool, error) {
		if to == from {
			return true, nil
		}
		if err := s.forwardRaw(u.encoded(from, to, true)); err != nil {
			return false, err
		}
		start := from
		from = to
		res, err := s.relay(false)
		if err != nil || res.failed() {
			return false, err
		}
		return true, s.noteExecuted(u, stmts, start, to)
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
		case what == commitBlock && s.status == 'T' && !wrapped:
			from = i + 1 // the COMMIT itself is not forwarded
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
