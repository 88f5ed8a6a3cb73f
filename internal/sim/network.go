package sim

import (
	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
)

// connID names one stream between a replica and the certifier. A replica
// opens a new one each time it reconnects; messages of older streams are
// ignored by both sides, as a closed gRPC stream delivers nothing.
type connID struct {
	replica int
	n       uint64
}

// write is one row of a writeset: the last value a transaction wrote to a
// key (the extension's collapse keeps the last change per row:
// extension/src/writeset.c).
type write struct {
	key   int
	value int64
	keeps bool // a keeping update of the row (certification.KeepingWrite)
}

// message travels on one stream, in one direction, as the real stream's
// messages (api/certifierpb): a CertifyStreamRequestEncoded to the
// certifier, a CertifyStreamReply from it, or a reset (the other side
// closed the stream, or the certifier refused it). seq is the stream's per-direction sequence number
// (what TCP would keep).
type message struct {
	conn   connID
	seq    uint64
	toCert bool

	req   *pb.CertifyStreamRequestEncoded
	rep   *pb.CertifyStreamReply
	reset bool
	// refused: the reset is the certifier refusing the session
	// (FailedPrecondition, pb.NeedsStateTransfer).
	refused bool
	// rewind: the refusal is a verdict "rewind to commonVersion"
	// (pb.RewindRequired): the replica holds versions the log does not,
	// above that version.
	rewind        bool
	commonVersion uint64
	// lineage is the lineage (lineage.go) of the certifier that sent a
	// message to a replica: a reply in flight when the certifier is
	// re-created arrives after the next lineage began.
	lineage int
	// storeEpochs is, in the message that opens a session, the epochs of
	// the versions the replica's store held when it sent it: what the
	// history it sends must describe (judgeAdmission).
	storeEpochs []uint64
}

// txnOf is a transaction id as certification names it.
func txnOf(id *pb.TxnID) certification.TxnID {
	return certification.TxnID{Origin: id.GetOrigin(), Seq: id.GetSeq()}
}

// cut says which directions of a replica's link a partition cuts.
type cut uint8

const (
	cutToCertifier cut = 1 << iota
	cutFromCertifier
	cutBoth = cutToCertifier | cutFromCertifier
)

// network delivers messages after a random delay, and drops, duplicates and
// partitions them as the seed says.
type network struct {
	w           *world
	partitioned []cut // per replica, the directions cut off
}

func newNetwork(w *world) *network {
	return &network{w: w, partitioned: make([]cut, w.cfg.Replicas)}
}

// blocked is true when m's direction of its link is cut.
func (n *network) blocked(m message) bool {
	dir := cutFromCertifier
	if m.toCert {
		dir = cutToCertifier
	}
	return n.partitioned[m.conn.replica]&dir != 0
}

func (n *network) send(m message) {
	w := n.w
	if n.blocked(m) {
		return
	}
	faulty := !w.healing
	if faulty && w.chance(w.cfg.DropPerMille) {
		w.stats.Dropped++
		w.note("drop", uint64(m.conn.replica), m.conn.n, m.seq)
		return
	}
	n.schedule(m)
	if faulty && w.chance(w.cfg.DuplicatePerMille) {
		w.stats.Duplicated++
		w.note("duplicate", uint64(m.conn.replica), m.conn.n, m.seq)
		n.schedule(m)
	}
}

func (n *network) schedule(m message) {
	w := n.w
	delay := int64(1)
	if !w.healing {
		delay = w.between(1, w.cfg.DelayTicksMax)
	}
	w.after(delay, "deliver", func() {
		if n.blocked(m) {
			return // in flight when the partition started
		}
		if m.toCert {
			w.cert.receive(m)
		} else {
			w.replicas[m.conn.replica].receive(m)
		}
	})
}

func (n *network) partition(replica int, c cut) {
	n.partitioned[replica] = c
	n.w.stats.Partitions++
	n.w.note("partition", uint64(replica), uint64(c), 0)
}

func (n *network) heal(replica int) {
	if n.partitioned[replica] != 0 {
		n.partitioned[replica] = 0
		n.w.note("partition-healed", uint64(replica), 0, 0)
	}
}

func (n *network) healAll() {
	for i := range n.partitioned {
		n.heal(i)
	}
}
