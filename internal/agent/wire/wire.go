// Package wire is the agent's side of the socket protocol between a
// PostgreSQL backend (the extension, extension/src/channel.c) and the
// replica's agent. The two must agree byte for byte; channel.c's comment
// is the reference, and this package's tests run it against a real
// backend.
//
// Every message is a frame: a 4-byte big-endian length of what follows,
// a type byte, then the payload, integers big-endian.
//
//	backend -> agent
//	  'H' Hello     u32 protocol, i32 pid, u8 role, u16 length + database
//	                (empty for the durability feed)
//	  'C' Certify   u64 start version, the encoded Writeset to the end
//	  'F' Fragment  an encoded Writeset to the end: the next fragment of a
//	                streamed writeset (Certifier.Stage)
//	  'W' CertifyStreamed
//	                u64 start version, u32 fragments, u64 bytes (the
//	                fragments' total size), the certified Writeset to the end
//	  'A' Abandon   u64 version
//	  'S' Sync      u32 milliseconds to answer within
//	  'K' Hold      u64 version, u32 milliseconds to hold at most
//	  'R' Release   no payload
//	  'Q' StateQuery
//	                u64 version, u8 epoch given, u64 epoch
//	agent -> backend
//	  'h' Welcome   u8 accepted, u64 agent generation, u16 length + text
//	  'D' Decision  u8 kind, u64 version, u64 epoch, u64 durable (the
//	                certifier's durable version the agent knew when it
//	                answered), u8 abort reason, u32 length + detail
//	  's' Synced    u8 known, u64 durable version, u16 length + text
//	  'k' Held      u8 held, u64 version, u16 length + text
//	  'q' StateAnswer
//	                u8 state, u8 final, u64 durable version,
//	                u16 length + text
//	agent -> durability feed (RoleFeed), after its Welcome
//	  'V' Durable   u64 the certifier's durable version: at once, then at
//	                each advance (only the latest, once the socket's
//	                buffer is full: the agent never waits for a feed)
//	  'X' Failed    u64 C, u64 epoch: every version above C decided in
//	                that epoch or an earlier one failed (C math.MaxUint64:
//	                none is known to): once the agent knows, then at each
//	                change, before any 'V' that follows the change
//
// A streamed transaction (one too large to certify in one 'C') sends its
// writeset as 'F' frames, each at most 4 MiB unless one change is larger,
// then 'W' with what it is certified on; nothing else comes in between.
// Its 'D' is as for 'C', the version of a commit being the last of its
// span: the span is version - fragments + 1 .. version.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// ProtocolVersion is TK_PROTOCOL_VERSION in extension/src/tashkent.h.
const ProtocolVersion = 3

// FrameBytesMax bounds a frame the agent reads: a writeset of
// tashkent.writeset_max_bytes' largest value, with room for the header.
const FrameBytesMax = 1<<31 - 1

// Role says what a connecting backend is.
type Role uint8

const (
	// RoleSession is a client's backend, which certifies its commits.
	RoleSession Role = 0
	// RoleApplier is the backend of the agent's own apply connection,
	// proving who it is (tashkent.register_applier).
	RoleApplier Role = 1
	// RoleFeed is the extension's durability feed (extension/src/feed.c),
	// a background worker of the server that reads Durable frames.
	RoleFeed Role = 2
)

// DecisionKind is TkDecisionKind in extension/src/tashkent.h.
type DecisionKind uint8

const (
	Commit      DecisionKind = 1
	Abort       DecisionKind = 2
	Unavailable DecisionKind = 3 // the agent cannot certify now (starting, recovering, halted)
	Unknown     DecisionKind = 4 // the certifier did not answer in time
)

// Hello is a backend's first message.
type Hello struct {
	Protocol uint32
	PID      int32
	Role     Role
	Database string
}

// Welcome answers a Hello.
type Welcome struct {
	Accepted   bool
	Generation uint64
	Text       string // why not, when refused
}

// Certify asks for a writeset's certification.
type Certify struct {
	StartVersion uint64
	Writeset     []byte // an encoded certifierpb.Writeset
}

// Fragment is the next fragment of a streamed writeset, in the order the
// changes are to be applied.
type Fragment struct {
	Writeset []byte // an encoded certifierpb.Writeset
}

// CertifyStreamed asks for the certification of a streamed writeset,
// whose fragments came before it.
type CertifyStreamed struct {
	StartVersion uint64
	Fragments    uint32 // how many Fragment frames the backend sent
	Bytes        uint64 // their payloads' total size
	// Certified is what the transaction is certified on (tables written,
	// truncated, referenced; DDL): an encoded certifierpb.Writeset.
	Certified []byte
}

// Abandon says the backend will not commit a version it was told to.
type Abandon struct {
	Version uint64
}

// Sync asks for the certifier's durable version (tashkent.sync_wait): a
// version at or above every version the cluster acknowledged before it.
type Sync struct {
	TimeoutMillis uint32 // the backend stops waiting for the answer then
}

// Synced answers a Sync: the version, or why it is not known.
type Synced struct {
	Known   bool
	Version uint64
	Text    string // why not, when not known
}

// Hold asks the agent to hold the replica's commits after Version, or
// after the last version already under way if that is later, for at most
// HoldMillis (tashkent.hold_commits).
type Hold struct {
	Version    uint64
	HoldMillis uint32
}

// Release ends the backend's hold.
type Release struct{}

// Held answers a Hold: the version commits are held after, or why not.
type Held struct {
	Held    bool
	Version uint64
	Text    string // why not, when not held
}

// Decision answers a Certify.
type Decision struct {
	Kind    DecisionKind
	Version uint64 // Commit: the commit version; Abort: the version it conflicted with, or 0
	Epoch   uint64 // Commit: the epoch that certified it (LogEntry.epoch)
	// Durable is the certifier's durable version the agent knew when it
	// answered: a safe commit at or below it does not wait (safe.c).
	Durable     uint64
	AbortReason uint8 // certifierpb.AbortReason
	Detail      string
}

// TxnState is TkTxnState in extension/src/tashkent.h: a transaction's
// state under eventual durability (Kashi §2.2.1, property 2), as
// tashkent.txn_state names it.
type TxnState uint8

const (
	// StateUnavailable: the agent cannot judge now (Text says why).
	StateUnavailable TxnState = 0
	StateDurable     TxnState = 1
	StateCommitted   TxnState = 2
	StateFailed      TxnState = 3
	StateUnknown     TxnState = 4
)

func (s TxnState) String() string {
	switch s {
	case StateDurable:
		return "durable"
	case StateCommitted:
		return "committed"
	case StateFailed:
		return "failed"
	case StateUnknown:
		return "unknown"
	}
	return "unavailable"
}

// StateQuery asks for the state of the transaction committed as Version,
// in Epoch if HasEpoch, else in the epoch the replica's history holds at
// Version (tashkent.txn_state).
type StateQuery struct {
	Version  uint64
	HasEpoch bool
	Epoch    uint64
}

// StateAnswer answers a StateQuery, with the certifier's durable version
// as the agent knows it.
type StateAnswer struct {
	State TxnState
	// Final: the state never changes on this replica (durable, failed,
	// or unknown for good: tashkent.wait_durable does not wait for it).
	Final   bool
	Durable uint64
	// Text says why the agent cannot judge (StateUnavailable), or why a
	// final unknown stays unknown.
	Text string
}

// Durable tells the durability feed the certifier's durable version.
type Durable struct {
	Version uint64
}

// Failed tells the durability feed that every version above After
// decided in Epoch or an earlier epoch failed (After NoneFailed: none is
// known to). A later epoch reuses the numbers above After: its versions
// did not fail.
type Failed struct {
	After uint64
	Epoch uint64
}

// NoneFailed is Failed.After when no version is known to have failed.
const NoneFailed = math.MaxUint64

// ErrMalformed wraps every error about a frame's contents.
var ErrMalformed = errors.New("wire: malformed message")

// ReadFrame reads one frame: its type and payload. max bounds the frame.
func ReadFrame(r *bufio.Reader, max int) (byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 1 || uint64(n) > uint64(max) {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes (limit %d)", ErrMalformed, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return b[0], b[1:], nil
}

// Message is any of the messages above.
type Message interface{ frameType() byte }

func (Hello) frameType() byte           { return 'H' }
func (Certify) frameType() byte         { return 'C' }
func (Abandon) frameType() byte         { return 'A' }
func (Fragment) frameType() byte        { return 'F' }
func (CertifyStreamed) frameType() byte { return 'W' }
func (Welcome) frameType() byte         { return 'h' }
func (Decision) frameType() byte        { return 'D' }
func (Sync) frameType() byte            { return 'S' }
func (Synced) frameType() byte          { return 's' }
func (Hold) frameType() byte            { return 'K' }
func (Release) frameType() byte         { return 'R' }
func (Held) frameType() byte            { return 'k' }
func (StateQuery) frameType() byte      { return 'Q' }
func (StateAnswer) frameType() byte     { return 'q' }
func (Durable) frameType() byte         { return 'V' }
func (Failed) frameType() byte          { return 'X' }

// Decode parses a frame read by ReadFrame.
func Decode(typ byte, p []byte) (Message, error) {
	d := decoder{p: p}
	var m Message
	switch typ {
	case 'H':
		m = Hello{Protocol: d.u32(), PID: int32(d.u32()), Role: Role(d.u8()), Database: d.text(int(d.u16()))}
	case 'C':
		m = Certify{StartVersion: d.u64(), Writeset: d.rest()}
	case 'A':
		m = Abandon{Version: d.u64()}
	case 'F':
		m = Fragment{Writeset: d.rest()}
	case 'W':
		m = CertifyStreamed{StartVersion: d.u64(), Fragments: d.u32(), Bytes: d.u64(), Certified: d.rest()}
	case 'h':
		m = Welcome{Accepted: d.u8() != 0, Generation: d.u64(), Text: d.text(int(d.u16()))}
	case 'D':
		m = Decision{Kind: DecisionKind(d.u8()), Version: d.u64(), Epoch: d.u64(), Durable: d.u64(), AbortReason: d.u8(), Detail: d.text(int(d.u32()))}
	case 'S':
		m = Sync{TimeoutMillis: d.u32()}
	case 's':
		m = Synced{Known: d.u8() != 0, Version: d.u64(), Text: d.text(int(d.u16()))}
	case 'K':
		m = Hold{Version: d.u64(), HoldMillis: d.u32()}
	case 'R':
		m = Release{}
	case 'k':
		m = Held{Held: d.u8() != 0, Version: d.u64(), Text: d.text(int(d.u16()))}
	case 'Q':
		m = StateQuery{Version: d.u64(), HasEpoch: d.u8() != 0, Epoch: d.u64()}
	case 'q':
		m = StateAnswer{State: TxnState(d.u8()), Final: d.u8() != 0, Durable: d.u64(), Text: d.text(int(d.u16()))}
	case 'V':
		m = Durable{Version: d.u64()}
	case 'X':
		m = Failed{After: d.u64(), Epoch: d.u64()}
	default:
		return nil, fmt.Errorf("%w: unknown type %q", ErrMalformed, typ)
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrMalformed, typ, d.err)
	}
	if len(d.p) != 0 {
		return nil, fmt.Errorf("%w: %q: %d bytes too many", ErrMalformed, typ, len(d.p))
	}
	return m, nil
}

// Encode returns m as one frame.
func Encode(m Message) []byte {
	e := encoder{b: make([]byte, 4, 64)}
	e.u8(m.frameType())
	switch m := m.(type) {
	case Hello:
		e.u32(m.Protocol)
		e.u32(uint32(m.PID))
		e.u8(uint8(m.Role))
		e.text16(m.Database)
	case Certify:
		e.u64(m.StartVersion)
		e.b = append(e.b, m.Writeset...)
	case Abandon:
		e.u64(m.Version)
	case Fragment:
		e.b = append(e.b, m.Writeset...)
	case CertifyStreamed:
		e.u64(m.StartVersion)
		e.u32(m.Fragments)
		e.u64(m.Bytes)
		e.b = append(e.b, m.Certified...)
	case Welcome:
		e.u8(boolByte(m.Accepted))
		e.u64(m.Generation)
		e.text16(m.Text)
	case Decision:
		e.u8(uint8(m.Kind))
		e.u64(m.Version)
		e.u64(m.Epoch)
		e.u64(m.Durable)
		e.u8(m.AbortReason)
		detail := truncate(m.Detail, 32<<10) // the backend reads frames of at most 64 KiB
		e.u32(uint32(len(detail)))
		e.b = append(e.b, detail...)
	case Sync:
		e.u32(m.TimeoutMillis)
	case Synced:
		e.u8(boolByte(m.Known))
		e.u64(m.Version)
		e.text16(m.Text)
	case Hold:
		e.u64(m.Version)
		e.u32(m.HoldMillis)
	case Held:
		e.u8(boolByte(m.Held))
		e.u64(m.Version)
		e.text16(m.Text)
	case StateQuery:
		e.u64(m.Version)
		e.u8(boolByte(m.HasEpoch))
		e.u64(m.Epoch)
	case StateAnswer:
		e.u8(uint8(m.State))
		e.u8(boolByte(m.Final))
		e.u64(m.Durable)
		e.text16(m.Text)
	case Durable:
		e.u64(m.Version)
	case Failed:
		e.u64(m.After)
		e.u64(m.Epoch)
	}
	binary.BigEndian.PutUint32(e.b, uint32(len(e.b)-4))
	return e.b
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

// text16 appends a u16 length and the text, cut to what a u16 counts.
func (e *encoder) text16(s string) {
	s = truncate(s, 1<<16-1)
	e.u16(uint16(len(s)))
	e.b = append(e.b, s...)
}

type decoder struct {
	p   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.p) < n {
		d.err = fmt.Errorf("truncated: want %d bytes, have %d", n, len(d.p))
		return nil
	}
	b := d.p[:n]
	d.p = d.p[n:]
	return b
}

func (d *decoder) u8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) text(n int) string { return string(d.take(n)) }

func (d *decoder) rest() []byte {
	b := d.p
	d.p = nil
	return b
}
