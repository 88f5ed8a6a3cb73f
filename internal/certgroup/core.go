package certgroup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// DecodeFunc reads the transaction id and the certification keys out of an
// encoded log entry. It must be deterministic: every member calls it on the
// same bytes and must reach the same keys.
type DecodeFunc func(entry []byte) (certification.TxnID, []certification.Key, error)

// Config configures a Core.
type Config struct {
	ID uint64
	// Peers are the voting members a new group starts with (bootstrap). A
	// member that restarts with a Raft log, or that joins an existing group,
	// ignores them.
	Peers []uint64
	// Addrs are the members' addresses this member starts with; those in
	// its snapshot and configuration changes take precedence.
	Addrs map[uint64]string
	// Join: this member starts with an empty log and waits to be added by
	// the group (certifier members add).
	Join bool
	// ElectionTicks and HeartbeatTicks count Tick calls (Raft's timers are
	// counted, not slept).
	ElectionTicks  int
	HeartbeatTicks int
	// WindowVersions: see certification.Config.
	WindowVersions uint64
	// UnsafeSkipConflictCheck: see certification.Config (the fault
	// harness's detector self-test only).
	UnsafeSkipConflictCheck bool
	Decode                  DecodeFunc
	Logger                  raft.Logger // nil: Raft logs nothing
	// DisableCheckQuorum turns off Raft's CheckQuorum and with it the
	// leader lease, which counts election ticks: the simulation and the
	// hand-driven tests start elections themselves and never let them run
	// out (see sim_test.go).
	DisableCheckQuorum bool
	// SnapshotEntries: this member takes a snapshot of its state every
	// SnapshotEntries applied log entries (versions: a Raft entry holds a
	// batch of them; one without, or a span head, counts one), or as soon
	// as SnapshotBytes of entry data were applied since the last one, and
	// compacts its log behind it but for CatchUpEntries Raft entries (a
	// follower that far behind catches up from the log; one further behind
	// gets the snapshot). Zero: the defaults.
	SnapshotEntries uint64
	SnapshotBytes   uint64
	CatchUpEntries  uint64
	// Now is the clock the group's base is read from (Core.proposeBase);
	// nil: time.Now.
	Now func() time.Time
}

// Snapshot defaults. A snapshot costs a pass over the conflict window
// (certification.State.Marshal, tens of MB with the default window) and
// its write and fsync, in the Raft loop: every 10,000 versions, at 20,000
// certifications/s, halved the 3-member group's throughput and made its
// p99 330-460 ms (docs/BENCHMARKS.md, "Batched proposals"). Every 100,000
// versions the log between snapshots stays about 20 MB (SnapshotBytes
// bounds it anyway) and a restart replays at most that. etcd keeps 5,000 entries
// behind a snapshot for slow followers.
const (
	DefaultSnapshotEntries = 100_000
	DefaultSnapshotBytes   = 64 << 20
	DefaultCatchUpEntries  = 5_000
)

// defaults for the tick counts: with a 10 ms tick, a follower starts an
// election 0.4 to 0.8 s after it last heard from the leader (Raft
// randomizes in [ElectionTicks, 2*ElectionTicks)), and heartbeats go out
// every 50 ms (8 per election timeout). An election that needs a second
// round (a pre-vote refused by a follower whose lease on the dead leader
// had a tick or a heartbeat left) then still ends within 1.6 s, inside the
// 2 s failover target; with 60 ticks, 2 of 20 kills on a quiet machine
// took 2.1 and 2.4 s (docs/BENCHMARKS.md, "The tail").
const (
	DefaultElectionTicks  = 40
	DefaultHeartbeatTicks = 5
)

// maxSizePerMsgBytes bounds the entries in one append message: large enough
// that a burst of certified entries travels in few messages.
const maxSizePerMsgBytes = 4 << 20

// maxInflightMsgs bounds the append messages in flight to one follower
// (pipelining).
const maxInflightMsgs = 256

// ErrNotReady means this member is the leader but has not yet applied its
// whole log (its barrier entry), or has just re-fenced itself; retry soon.
var ErrNotReady = errors.New("certifier group: the leader is not ready to certify (still applying its log, or handing its leadership over); retry")

// NotLeaderError is returned by Certify on a member that is not the leader.
type NotLeaderError struct {
	Leader uint64 // 0 when no leader is known
}

func (e *NotLeaderError) Error() string {
	if e.Leader == 0 {
		return "not the leader of the certifier group, and no leader is known yet (an election is under way)"
	}
	return fmt.Sprintf("not the leader of the certifier group; member %d is", e.Leader)
}

// Persisted is what a member finds on its disk when it starts.
type Persisted struct {
	Snapshot  *raftpb.Snapshot // nil: none yet
	HardState *raftpb.HardState
	Entries   []*raftpb.Entry // the log after the snapshot
}

// Batch is one Ready of the Raft node: what the driver must do, in order,
// before calling Advance.
type Batch struct {
	// Entries and HardState must be written to stable storage, with one
	// sync when MustSync (group commit: every entry of the batch shares it).
	Entries   []*raftpb.Entry
	HardState *raftpb.HardState
	MustSync  bool
	// Messages are sent after the write, except on a leader (Leader
	// true), which may send its appends while it writes them itself (Raft
	// thesis §10.2.1; etcd does the same): an entry commits once a majority
	// wrote it, whoever they are, and a leader's messages carry no vote.
	Messages []*raftpb.Message
	Leader   bool
	// Snapshot, when set, is the leader's snapshot this member must install:
	// written durably, and the whole log before it dropped, before Entries
	// (DiskLog.InstallSnapshot). State is the hard state after the batch.
	Snapshot *raftpb.Snapshot
	State    *raftpb.HardState
}

// Applied is what Advance applied.
type Applied struct {
	// Committed are the versions Raft committed in this batch, in version
	// order, contiguous with the ones before: durable on a majority. A
	// span first..last (a streamed transaction, CertifySpan) is one entry
	// at version last, its head (entry.go: the span's last log entry with
	// an empty fragment; logentry.RawHeaderOf(head).InSpan()), right after
	// version first-1. Its fragments are not in the group's log: the
	// service copies them into its versioned log from its stage.
	Committed []logentry.Entry
	// LostLeadership says this member was the leader and no longer is (or
	// is leader of a later term). Entries it certified and did not see
	// committed may be failed versions: every reply waiting for one must be
	// dropped, never sent.
	LostLeadership bool
	// MembersChanged says a configuration change was applied.
	MembersChanged bool
	// Confirmed is the highest abort ticket confirmed so far: aborts with
	// a ticket up to it may be sent.
	Confirmed uint64
	// Installed is set (to the snapshot's version) when this member
	// installed the leader's snapshot: versions up to it were never in
	// Committed here, and the next ones follow it. InstalledEpoch is the
	// epoch of its entry at that version (0: not known).
	Installed, InstalledEpoch uint64
	// Compaction, when set, is a snapshot this member took: the driver
	// saves it durably, then compacts its log up to Compaction.Index.
	Compaction *Compaction
	// Retention, when set, is the last retention decision applied in this
	// batch (ProposeRetention), or the one of a snapshot installed.
	Retention []byte
}

// Compaction is a snapshot taken by Advance and the log prefix it lets go.
type Compaction struct {
	Snapshot  *raftpb.Snapshot
	Index     uint64            // entries up to it may be dropped from disk
	HardState *raftpb.HardState // the current one, for the next segment
}

// Core is one member of the certifier group as a deterministic state
// machine: Raft (etcd's RawNode) plus the certification state. It does no
// I/O and starts no goroutines; it is not safe for concurrent use. A driver
// (Node, or the simulation) feeds it ticks, messages and requests and
// carries out its batches.
type Core struct {
	cfg   Config
	rn    *raft.RawNode
	mem   *raft.MemoryStorage
	state *certification.State

	applied     uint64 // Raft index of the last applied entry
	appliedTerm uint64 // its term
	// appliedVersion is the highest version Raft committed and this member
	// applied: the durable prefix.
	appliedVersion uint64

	// leaderTerm is the term in which this member leads, 0 when it does not.
	leaderTerm uint64
	// spec are the entries this leader certified and proposed in leaderTerm
	// and has not yet applied, then batch the ones certified since its last
	// proposal (proposed as one Raft entry at the next Ready, or when
	// batchBytes reach maxBatchBytes): together versions
	// appliedVersion+1..state.Version(). A span in spec is its head, at its
	// last version, standing for all of its versions (never in batch: it
	// is proposed as soon as it is certified).
	spec, batch []logentry.Entry
	batchBytes  int
	// fenceVersion: after a proposal was dropped the leader certifies again
	// only once the versions it did propose are applied.
	fenceVersion uint64
	// proposalDropped: Raft refused a batch whose versions were already
	// answered as commits; the next Advance reports LostLeadership so that
	// no reply waiting for them is ever sent (they are failed versions).
	proposalDropped bool
	// refusedTerm is the term in which Raft refused a proposal of this
	// leader (Raft refuses them while the leadership is handed over). Its
	// versions may have been delivered at their commit point (mode ed)
	// with this term's epoch: certifying those numbers again in the same
	// term would give one (version, epoch) to two transactions. So the
	// leader certifies no more in that term, and hands its leadership over
	// again if the transfer was given up (handOverAgain).
	refusedTerm uint64

	// Abort decisions are sent only once a majority confirmed, after the
	// decision, that this member still leads (Raft's ReadIndex): a deposed
	// leader that has not heard of its successor could otherwise abort a
	// retried transaction that the successor committed. openTicket is the
	// ticket of the aborts decided since the last ReadIndex (0: none);
	// confirmedTicket the highest ticket confirmed.
	openTicket, lastTicket, confirmedTicket uint64

	pending   *raft.Ready // between Ready and Advance
	confState *raftpb.ConfState

	// snapIndex is the Raft index of the last snapshot (0: none);
	// bytesSinceSnap the entry data applied since, entriesSinceSnap the log
	// entries (versions; other Raft entries count one).
	snapIndex, bytesSinceSnap, entriesSinceSnap uint64
	// snapshotDue: a member was added since the last snapshot (see
	// snapshotForNewMember).
	snapshotDue bool
	// addrs are the members' addresses learned from configuration changes
	// (their context) and snapshots.
	addrs map[uint64]string
	// retention is the last retention decision applied, which snapshots
	// carry (nil: none yet).
	retention []byte

	// base is the group's base (base.go), 0 until the entry that fixes it
	// is applied; baseProposed the term in which this member proposed one.
	base, baseProposed uint64
	// appliedEpoch is the epoch of the entry at appliedVersion (0: not
	// known, a snapshot of an older format), which snapshots carry: a
	// member whose versioned log starts after a snapshot compares replicas
	// at its start by it.
	appliedEpoch uint64
}

// NewCore starts a member from what its disk holds.
func NewCore(cfg Config, disk Persisted) (*Core, error) {
	if cfg.ElectionTicks == 0 {
		cfg.ElectionTicks = DefaultElectionTicks
	}
	if cfg.HeartbeatTicks == 0 {
		cfg.HeartbeatTicks = DefaultHeartbeatTicks
	}
	if cfg.Decode == nil {
		return nil, errors.New("certifier group: no DecodeFunc")
	}
	cfg = cfg.withSnapshotDefaults()
	mem := raft.NewMemoryStorage()
	if disk.Snapshot != nil {
		if err := mem.ApplySnapshot(disk.Snapshot); err != nil {
			return nil, fmt.Errorf("certifier group: load raft snapshot: %w", err)
		}
	}
	if disk.HardState != nil {
		if err := mem.SetHardState(disk.HardState); err != nil {
			return nil, err
		}
	}
	if err := mem.Append(disk.Entries); err != nil {
		return nil, fmt.Errorf("certifier group: load raft log: %w", err)
	}
	rc := &raft.Config{
		ID:                        cfg.ID,
		ElectionTick:              cfg.ElectionTicks,
		HeartbeatTick:             cfg.HeartbeatTicks,
		Storage:                   mem,
		MaxSizePerMsg:             maxSizePerMsgBytes,
		MaxInflightMsgs:           maxInflightMsgs,
		CheckQuorum:               !cfg.DisableCheckQuorum,
		PreVote:                   true,
		DisableProposalForwarding: true, // only the leader certifies
		StepDownOnRemoval:         true,
		Logger:                    cfg.Logger,
		Applied:                   disk.Snapshot.GetMetadata().GetIndex(),
	}
	if rc.Logger == nil {
		rc.Logger = quietLogger{}
	}
	rn, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, fmt.Errorf("certifier group: %w", err)
	}
	c := &Core{cfg: cfg, rn: rn, mem: mem, confState: &raftpb.ConfState{}, addrs: map[uint64]string{}}
	for id, a := range cfg.Addrs {
		c.addrs[id] = a
	}
	c.state = c.newState(0)
	if disk.Snapshot != nil {
		if err := c.restoreSnapshot(disk.Snapshot); err != nil {
			return nil, err
		}
	}
	last, _ := mem.LastIndex()
	if last == 0 && !cfg.Join {
		peers := make([]raft.Peer, len(cfg.Peers))
		for i, id := range cfg.Peers {
			peers[i] = raft.Peer{ID: id}
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("certifier group: bootstrap: %w", err)
		}
	}
	return c, nil
}

func (c *Core) newState(base uint64) *certification.State {
	return certification.New(certification.Config{WindowVersions: c.cfg.WindowVersions,
		UnsafeSkipConflictCheck: c.cfg.UnsafeSkipConflictCheck}, base)
}

// Tick advances Raft's logical clock by one tick.
func (c *Core) Tick() { c.rn.Tick() }

// Campaign makes this member start an election now.
func (c *Core) Campaign() error { return c.rn.Campaign() }

// ErrLostLog: the leader knows this member acknowledged Raft entries that
// its log no longer holds (its data directory was wiped or replaced, and it
// came back under its old id). Raft would panic; the member must stop and
// come back under a new id.
var ErrLostLog = errors.New("certifier group: the leader counts Raft entries this member acknowledged but no longer holds " +
	"(its data directory was wiped or replaced): stop it, remove it (`tashkent certifier members remove`) and add it back " +
	"under a new id with an empty directory (docs/OPERATIONS.md)")

// lastIndexHeld is the last index this member holds, entries of the batch
// being written (between Ready and Advance) included: the follower may
// already have acknowledged them.
func (c *Core) lastIndexHeld() uint64 {
	last, _ := c.mem.LastIndex()
	if rd := c.pending; rd != nil {
		if n := len(rd.Entries); n > 0 {
			last = max(last, rd.Entries[n-1].GetIndex())
		}
		if hasSnapshot(rd) {
			last = max(last, rd.Snapshot.GetMetadata().GetIndex())
		}
	}
	return last
}

// Step hands a message from a peer to Raft. A heartbeat that commits
// beyond this member's log (ErrLostLog) is refused: the leader only commits
// on a follower what the follower acknowledged, so the log was lost.
func (c *Core) Step(m *raftpb.Message) error {
	if m.GetType() == raftpb.MessageType_MsgHeartbeat && m.GetTerm() >= c.rn.BasicStatus().GetTerm() {
		if last := c.lastIndexHeld(); m.GetCommit() > last {
			return fmt.Errorf("%w (the leader, member %d, commits index %d on it; its log ends at %d)", ErrLostLog, m.GetFrom(), m.GetCommit(), last)
		}
	}
	return c.rn.Step(m)
}

// ReportUnreachable tells Raft a message to peer could not be sent.
func (c *Core) ReportUnreachable(peer uint64) { c.rn.ReportUnreachable(peer) }

// ReportSnapshot tells Raft whether a snapshot message (MsgSnap) reached
// peer. Until it is told, the leader sends that peer nothing more (Raft's
// StateSnapshot): a lost snapshot must be reported, or the peer is never
// caught up.
func (c *Core) ReportSnapshot(peer uint64, failed bool) {
	st := raft.SnapshotFinish
	if failed {
		st = raft.SnapshotFailure
	}
	c.rn.ReportSnapshot(peer, st)
}

// errSpanWithoutHead: the service asked for several versions without the
// span head that commits them (CertifySpan).
var errSpanWithoutHead = errors.New("certifier group: a request of several versions (a streamed writeset) is certified with its span head")

// Certify decides a request on the leader. A new commit joins the batch
// that the next Ready proposes to Raft as one entry (pipelined: batches
// follow one another without waiting); its version is durable when Advance
// reports it in Applied.Committed. An abort may be sent once
// Applied.Confirmed reaches the returned ticket. Errors: *NotLeaderError,
// ErrNotReady. A request of several versions goes through CertifySpan.
func (c *Core) Certify(req certification.Request, prefix logentry.Prefix) (certification.Outcome, uint64, error) {
	if req.Versions > 1 {
		return certification.Outcome{}, 0, errSpanWithoutHead
	}
	o, ticket, isNew, err := c.decide(req, false)
	if !isNew {
		return o, ticket, err
	}
	e := prefix.WithVersion(o.CommitVersion, c.epoch())
	c.batch = append(c.batch, e)
	c.batchBytes += len(e.Bytes)
	return o, 0, nil
}

// SpanHead is what a streamed request's span head is made of, besides its
// versions: the transaction id, the writeset it is certified on (the
// request's, encoded), and the size and checksum of the staged fragments
// (logentry.SpanChecksum) against which every member checks its copy.
type SpanHead struct {
	Txn       *pb.TxnID
	Certified []byte
	Bytes     uint64
	Checksum  uint32
}

// CertifySpan decides a streamed request (req.Versions fragments) on the
// leader, as Certify does. A new commit, the versions first..last
// (Outcome.FirstVersion..CommitVersion), goes to Raft at once as an entry
// of its own, its span head (entry.go), after the batch certified before
// it (a batch holds contiguous versions); its versions are durable when
// Advance reports the head in Applied.Committed. Errors: as Certify's; a
// head Raft refuses is ErrNotReady, with nothing decided.
func (c *Core) CertifySpan(req certification.Request, span SpanHead) (certification.Outcome, uint64, error) {
	if span.Txn.GetOrigin() != req.Txn.Origin || span.Txn.GetSeq() != req.Txn.Seq {
		return certification.Outcome{}, 0, fmt.Errorf("certifier group: span head of transaction %s/%d for a request of %s/%d",
			span.Txn.GetOrigin(), span.Txn.GetSeq(), req.Txn.Origin, req.Txn.Seq)
	}
	o, ticket, isNew, err := c.decide(req, true)
	if !isNew {
		return o, ticket, err
	}
	head := logentry.Entry{Version: o.CommitVersion, Bytes: logentry.AppendSpanEntry(nil, logentry.SpanEntry{
		Version: o.CommitVersion, Txn: span.Txn, First: o.FirstVersion, Last: o.CommitVersion, Certified: span.Certified,
		SpanBytes: span.Bytes, SpanChecksum: span.Checksum, Epoch: c.epoch()})}
	if !c.propose(encodeSpan(head.Bytes), o.FirstVersion, head) {
		return certification.Outcome{}, 0, ErrNotReady
	}
	return o, 0, nil
}

// decide certifies req if this member may; isNew says it is a new commit,
// which the caller records. The batch is proposed first when it is full,
// or always with proposeBatchFirst (a span follows whole batches only).
func (c *Core) decide(req certification.Request, proposeBatchFirst bool) (o certification.Outcome, ticket uint64, isNew bool, err error) {
	if err := c.checkCertifying(); err != nil {
		return certification.Outcome{}, 0, false, err
	}
	if (proposeBatchFirst || c.batchBytes >= maxBatchBytes) && !c.proposeBatch() {
		return certification.Outcome{}, 0, false, ErrNotReady
	}
	o = c.state.Certify(req)
	switch {
	case o.Decision != certification.Commit:
		return o, c.abortTicket(), false, nil
	case o.Duplicate:
		return o, 0, false, nil
	}
	return o, 0, true, nil
}

// proposeBatch proposes the entries certified since the last proposal as
// one Raft entry.
func (c *Core) proposeBatch() bool {
	if len(c.batch) == 0 {
		return true
	}
	if !c.propose(encodeBatch(c.batch), c.batch[0].Version, c.batch...) {
		return false
	}
	c.batch, c.batchBytes = c.batch[:0], 0 // spec holds copies
	return true
}

// propose hands Raft one entry, data, which holds the versions from first
// on; entries are what spec records of it. If Raft refuses it (this member
// no longer leads, or hands its leadership over), the state counted
// versions that are not in the log: it goes back to the applied state,
// certifies again only once every entry that was proposed is applied, and
// the next Advance reports a lost leadership (the replies of the versions
// it speculated on are dropped, never sent).
func (c *Core) propose(data []byte, first uint64, entries ...logentry.Entry) bool {
	if err := c.rn.Propose(data); err != nil {
		c.fenceVersion = first - 1
		c.dropSpeculation()
		c.proposalDropped = true
		c.refusedTerm = c.leaderTerm
		return false
	}
	c.spec = append(c.spec, entries...)
	return true
}

// Lookup answers a request the leader will not certify (it is over a limit
// of the service): if the transaction committed, its version; otherwise a
// ticket to confirm the abort with, as for Certify.
func (c *Core) Lookup(txn certification.TxnID) (version, ticket uint64, err error) {
	if err := c.checkCertifying(); err != nil {
		return 0, 0, err
	}
	if v, ok := c.state.CommittedVersion(txn); ok {
		return v, 0, nil
	}
	return 0, c.abortTicket(), nil
}

// ReadVersion answers a read of the durable version on the leader (Raft's
// ReadIndex): the durable prefix this member has applied, a ticket, and
// the term it leads in. Once Applied.Confirmed reaches the ticket while the
// member still leads in that term, a majority confirmed after this call
// that it led, so every version acknowledged or delivered before the call
// is at or below the version: an earlier leader's are in this leader's log
// before its own first entry, which checkCertifying requires applied, and
// its own are acknowledged only once applied. Errors: *NotLeaderError,
// ErrNotReady.
func (c *Core) ReadVersion() (version, ticket, term uint64, err error) {
	if err := c.checkCertifying(); err != nil {
		return 0, 0, 0, err
	}
	return c.appliedVersion, c.abortTicket(), c.leaderTerm, nil
}

// CertifyingEpoch is the epoch this leader certifies in and the first
// version it may certify in it, once it has applied its whole log: every
// version of an earlier epoch that will ever be durable is below it (an
// earlier leader's are in this leader's log before its own first entry).
// Errors: *NotLeaderError, ErrNotReady.
func (c *Core) CertifyingEpoch() (epoch, firstVersion uint64, err error) {
	if err := c.checkCertifying(); err != nil {
		return 0, 0, err
	}
	return c.epoch(), c.appliedVersion + 1, nil
}

func (c *Core) abortTicket() uint64 {
	if c.openTicket == 0 {
		c.lastTicket++
		c.openTicket = c.lastTicket
	}
	return c.openTicket
}

// confirmLeadership issues a ReadIndex for the aborts decided since the
// last one.
func (c *Core) confirmLeadership() {
	if c.openTicket == 0 {
		return
	}
	var ctx [8]byte
	binary.BigEndian.PutUint64(ctx[:], c.openTicket)
	c.rn.ReadIndex(ctx[:])
	c.openTicket = 0
}

// checkCertifying says whether this member may certify now: it leads in
// the current term, has applied its whole log (an entry of its own term,
// the barrier Raft appends on election, is applied), and knows the
// group's base.
func (c *Core) checkCertifying() error {
	st := c.rn.BasicStatus()
	if st.RaftState != raft.StateLeader {
		return &NotLeaderError{Leader: st.Lead}
	}
	if c.leaderTerm == 0 || st.GetTerm() != c.leaderTerm || c.appliedTerm != c.leaderTerm || c.state.Version() < c.fenceVersion || c.base == 0 ||
		c.refusedTerm == c.leaderTerm || st.LeadTransferee != raft.None { // Raft would refuse its proposal
		return ErrNotReady
	}
	return nil
}

// handOverAgain transfers the leadership once more if this leader had a
// proposal refused in its term (refusedTerm) and the transfer that
// refused it was given up: it certifies no more in this term.
func (c *Core) handOverAgain() {
	if c.leaderTerm == 0 || c.refusedTerm != c.leaderTerm {
		return
	}
	if st := c.rn.BasicStatus(); st.RaftState == raft.StateLeader && st.LeadTransferee == raft.None {
		c.TransferLeadership()
	}
}

// CommittedVersion reports the version a transaction committed at (or was
// certified at by this leader), if it is inside the window.
func (c *Core) CommittedVersion(txn certification.TxnID) (uint64, bool) {
	return c.state.CommittedVersion(txn)
}

// CommittedSpan reports the versions a transaction committed as (or was
// certified as by this leader), first == last for one version, if its
// last version is inside the window: what a retried streamed request whose
// stage is gone is answered with.
func (c *Core) CommittedSpan(txn certification.TxnID) (first, last uint64, ok bool) {
	return c.state.CommittedSpan(txn)
}

// Versions returns the highest version certified and the low-water mark.
func (c *Core) Versions() (version, lowWaterMark uint64) {
	return c.state.Version(), c.state.LowWaterMark()
}

// IndexedRows is the size of the conflict index.
func (c *Core) IndexedRows() int { return c.state.IndexedRows() }

// Ready returns the next batch, if there is one. The driver must carry it
// out and call Advance before calling Ready again.
func (c *Core) Ready() (Batch, bool) {
	if c.pending != nil {
		panic("certgroup: Ready called twice without Advance")
	}
	c.proposeBase()
	c.proposeBatch()
	c.confirmLeadership()
	c.handOverAgain()
	if !c.rn.HasReady() {
		return Batch{}, false
	}
	rd := c.rn.Ready()
	c.pending = &rd
	leading := c.rn.BasicStatus().RaftState == raft.StateLeader
	b := Batch{Entries: rd.Entries, HardState: rd.HardState, MustSync: rd.MustSync, Messages: rd.Messages, Leader: leading}
	if hasSnapshot(&rd) {
		b.Snapshot = rd.Snapshot
	}
	b.State, _, _ = c.mem.InitialState()
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		b.State = rd.HardState
	}
	return b, true
}

func hasSnapshot(rd *raft.Ready) bool { return rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) }

// Advance records that the batch is on stable storage and its messages are
// sent, applies what Raft committed and reports it.
func (c *Core) Advance() Applied {
	rd := c.pending
	if rd == nil {
		panic("certgroup: Advance without Ready")
	}
	c.pending = nil
	var out Applied
	out.LostLeadership, c.proposalDropped = c.proposalDropped, false
	// A lost leadership is settled before committed entries are applied:
	// a committed entry at the index of one of this leader's proposals may
	// be the new leader's. It rebuilds the state from the storage as it was
	// before this batch.
	c.checkRole(&out)
	if hasSnapshot(rd) {
		c.installSnapshot(rd.Snapshot, &out)
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		if err := c.mem.SetHardState(rd.HardState); err != nil {
			panic(err)
		}
	}
	if err := c.mem.Append(rd.Entries); err != nil {
		panic(fmt.Sprintf("certgroup: append to the raft log: %v", err))
	}
	for _, e := range rd.CommittedEntries {
		c.apply(e, &out)
	}
	for _, rs := range rd.ReadStates {
		if len(rs.RequestCtx) == 8 {
			c.confirmedTicket = max(c.confirmedTicket, binary.BigEndian.Uint64(rs.RequestCtx))
		}
	}
	c.rn.Advance(*rd)
	c.checkRole(&out)
	out.Confirmed = c.confirmedTicket
	c.maybeSnapshot(&out)
	return out
}

func (c *Core) checkRole(out *Applied) {
	st := c.rn.BasicStatus()
	leading := st.RaftState == raft.StateLeader
	if c.leaderTerm != 0 && (!leading || st.GetTerm() != c.leaderTerm) {
		c.leaderTerm = 0
		c.fenceVersion = 0
		c.dropSpeculation()
		out.LostLeadership = true
	}
	if leading && c.leaderTerm == 0 {
		c.leaderTerm = st.GetTerm()
	}
}

func (c *Core) apply(e *raftpb.Entry, out *Applied) {
	c.applied, c.appliedTerm = e.GetIndex(), e.GetTerm()
	c.bytesSinceSnap += uint64(len(e.Data))
	c.entriesSinceSnap += max(1, certifiedCount(e))
	switch e.GetType() {
	case raftpb.EntryNormal:
		if decision, ok := retentionOf(e.Data); ok {
			c.retention = append([]byte(nil), decision...)
			out.Retention = c.retention
		} else if base, ok, err := baseOf(e.Data); ok {
			if err != nil {
				panic(fmt.Sprintf("certgroup: committed raft entry %d: %v", e.GetIndex(), err))
			}
			c.applyBase(base)
		} else if len(e.Data) > 0 {
			c.applyCertified(e, out)
		}
	case raftpb.EntryConfChange:
		cc := &raftpb.ConfChange{}
		mustUnmarshal(e.Data, cc)
		c.confState = c.rn.ApplyConfChange(cc)
		out.MembersChanged = true
	case raftpb.EntryConfChangeV2:
		cc := &raftpb.ConfChangeV2{}
		mustUnmarshal(e.Data, cc)
		c.confState = c.rn.ApplyConfChange(cc)
		c.learnAddresses(cc)
		c.snapshotForNewMember(cc)
		out.MembersChanged = true
	}
}

func mustUnmarshal(b []byte, m proto.Message) {
	if err := proto.Unmarshal(b, m); err != nil {
		panic(fmt.Sprintf("certgroup: committed configuration change does not decode: %v", err))
	}
}

// applyCertified applies a committed batch of versions, or a span. On the
// leader that proposed them, they are already in the state (spec);
// elsewhere they are restored into the state as read, never certified
// again: the leader's decisions are the log's.
func (c *Core) applyCertified(e *raftpb.Entry, out *Applied) {
	entries, spanFirst, err := decodeCommitted(e.Data)
	if err != nil {
		panic(fmt.Sprintf("certgroup: committed raft entry %d: %v", e.GetIndex(), err))
	}
	for _, entry := range entries {
		if from := firstVersionOf(entry, spanFirst); from != c.appliedVersion+1 {
			panic(fmt.Sprintf("certgroup: committed raft entry %d holds version %d after version %d: versions must be contiguous",
				e.GetIndex(), from, c.appliedVersion))
		}
		if len(c.spec) > 0 {
			own := c.spec[0]
			if own.Version != entry.Version || !bytes.Equal(own.Bytes, entry.Bytes) {
				panic(fmt.Sprintf("certgroup: the leader of term %d proposed version %d but another entry with that version committed",
					c.leaderTerm, own.Version))
			}
			c.spec = c.spec[1:]
		} else {
			c.restore(c.state, entry, spanFirst)
		}
		c.appliedVersion = entry.Version
	}
	h, err := logentry.RawHeaderOf(entries[len(entries)-1].Bytes)
	if err != nil {
		panic(fmt.Sprintf("certgroup: committed version %d does not read: %v", c.appliedVersion, err))
	}
	c.appliedEpoch = h.Epoch
	out.Committed = append(out.Committed, entries...)
}

// firstVersionOf is the first version a committed entry holds: its own,
// or its span's first (spanFirst, 0 for an entry of one version).
func firstVersionOf(entry logentry.Entry, spanFirst uint64) uint64 {
	if spanFirst != 0 {
		return spanFirst
	}
	return entry.Version
}

// restore records a committed entry into state as read from the log: a
// span head restores its whole span, first..last, with the keys of the
// writeset it was certified on.
func (c *Core) restore(state *certification.State, entry logentry.Entry, spanFirst uint64) {
	txn, keys, err := c.cfg.Decode(entry.Bytes)
	if err != nil {
		panic(fmt.Sprintf("certgroup: committed version %d does not decode: %v", entry.Version, err))
	}
	if spanFirst != 0 {
		state.RestoreSpan(spanFirst, entry.Version, txn, keys)
		return
	}
	state.Restore(entry.Version, txn, keys)
}

// dropSpeculation returns the state to the applied prefix (appliedState).
// Versions this leader certified beyond it either commit later (and are
// applied then, like any other member's) or are failed versions.
func (c *Core) dropSpeculation() {
	c.batch, c.batchBytes = nil, 0
	if len(c.spec) == 0 && c.state.Version() == c.appliedVersion {
		return
	}
	c.spec = nil
	c.state = c.appliedState()
}

// ProposeRetention proposes a log retention decision of the service
// (leader only). It is opaque here: every member applies it in log order
// (Applied.Retention), and snapshots carry the last one applied.
func (c *Core) ProposeRetention(decision []byte) error {
	if st := c.rn.BasicStatus(); st.RaftState != raft.StateLeader {
		return &NotLeaderError{Leader: st.Lead}
	}
	return c.rn.Propose(encodeRetention(decision))
}

// Retention is the last retention decision applied (nil: none).
func (c *Core) Retention() []byte { return c.retention }

// ProposeConfChange asks the group to add or remove a member (leader only).
func (c *Core) ProposeConfChange(cc *raftpb.ConfChange) error {
	if st := c.rn.BasicStatus(); st.RaftState != raft.StateLeader {
		return &NotLeaderError{Leader: st.Lead}
	}
	return c.rn.ProposeConfChange(cc)
}

// Status is a member's view of the group.
type Status struct {
	ID, Term, Leader        uint64
	Role                    string
	LastIndex, AppliedIndex uint64
	Version, AppliedVersion uint64
	LowWaterMark            uint64
	Voters                  []uint64
	Learners                []uint64
	Certifying              bool
	// SnapshotIndex is the Raft index of the last snapshot, FirstIndex the
	// first entry still in the log.
	SnapshotIndex, FirstIndex uint64
}

// Status reports role, term, positions and members.
func (c *Core) Status() Status {
	st := c.rn.BasicStatus()
	last, _ := c.mem.LastIndex()
	first, _ := c.mem.FirstIndex()
	return Status{
		ID: c.cfg.ID, Term: st.GetTerm(), Leader: st.Lead, Role: roleName(st.RaftState),
		LastIndex: last, AppliedIndex: c.applied,
		Version: c.state.Version(), AppliedVersion: c.appliedVersion, LowWaterMark: c.state.LowWaterMark(),
		Voters:        append([]uint64(nil), c.confState.GetVoters()...),
		Certifying:    c.checkCertifying() == nil,
		Learners:      append([]uint64(nil), c.confState.GetLearners()...),
		SnapshotIndex: c.snapIndex, FirstIndex: first,
	}
}

// Leader is who this member believes leads, in which term, and whether it
// is itself the leader (cheaper than Status).
func (c *Core) Leader() (id, term uint64, leading bool) {
	st := c.rn.BasicStatus()
	return st.Lead, st.GetTerm(), st.RaftState == raft.StateLeader
}

// AppliedVersion is the durable prefix this member has applied.
func (c *Core) AppliedVersion() uint64 { return c.appliedVersion }

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateFollower:
		return "follower"
	case raft.StateCandidate, raft.StatePreCandidate:
		return "candidate"
	}
	return s.String()
}

// Request is one request of a stream's message for CertifyAll: certified,
// or (Lookup) only looked up, as Lookup does for a request the service
// will not certify. A streamed request (Certify.Versions fragments) has
// its Span and no Prefix: it is certified by CertifySpan.
type Request struct {
	Certify certification.Request
	Prefix  logentry.Prefix
	Lookup  bool
	Span    *SpanHead
}

// Result is what CertifyAll decided for a Request: the outcome (or, for a
// lookup, Version, 0 when the transaction did not commit, and
// FirstVersion, the first of the span it committed as: Version for one
// version), the abort ticket, and the versions right after the decision
// (for an abort's description). Entry is a new commit of one version as
// the log will hold it (empty otherwise): a leader that delivers at the
// commit point sends it before Raft commits it.
type Result struct {
	Outcome                       certification.Outcome
	Version, FirstVersion, Ticket uint64
	LowWaterMark, Latest          uint64
	Entry                         logentry.Entry
}

// certifyAll decides the requests in order, as Certify and Lookup would,
// and stops at the first error: the results before it stand.
func (c *Core) certifyAll(reqs []Request) ([]Result, error) {
	out := make([]Result, 0, len(reqs))
	for _, r := range reqs {
		var res Result
		var err error
		switch {
		case r.Lookup:
			res.Version, res.Ticket, err = c.Lookup(r.Certify.Txn)
			if res.Version != 0 {
				res.FirstVersion, _, _ = c.state.CommittedSpan(r.Certify.Txn)
			}
		case r.Span != nil:
			res.Outcome, res.Ticket, err = c.CertifySpan(r.Certify, *r.Span)
		default:
			res.Outcome, res.Ticket, err = c.Certify(r.Certify, r.Prefix)
			if err == nil && res.Outcome.Decision == certification.Commit && !res.Outcome.Duplicate {
				res.Entry = c.batch[len(c.batch)-1]
			}
		}
		if err != nil {
			return out, err
		}
		res.Latest, res.LowWaterMark = c.Versions()
		out = append(out, res)
	}
	return out, nil
}
