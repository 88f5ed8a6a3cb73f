package certgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"

	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// DefaultTickInterval is Raft's tick: with DefaultElectionTicks a follower
// that stops hearing from the leader campaigns after 0.4 to 0.8 s.
const DefaultTickInterval = 10 * time.Millisecond

// readyWaitMax bounds how long Certify waits for a new leader to finish
// applying its log before it answers ErrNotReady (the client retries).
const readyWaitMax = 3 * time.Second

// NodeConfig configures a Node.
type NodeConfig struct {
	Core Config
	// DataDir holds the member's Raft log (raft.log).
	DataDir string
	// Members maps every member's id to its gRPC address (the one agents
	// and peers dial).
	Members      map[uint64]string
	TickInterval time.Duration
	// NoSync skips fsync: voids durability; benchmarks only.
	NoSync bool
	// SyncDelay: DiskLog.SyncDelay (an emulated slow disk; benchmarks only).
	SyncDelay   time.Duration
	DialOptions []grpc.DialOption // e.g. TLS credentials
	Logger      *slog.Logger
	// UnsafeFaultPartitionFile: see partitionFile (real-process fault
	// tests only).
	UnsafeFaultPartitionFile string
	// UnsafeFaultPeerDelay: every Raft message to a peer is sent this long
	// after Raft handed it over, as on a link with that one-way latency (an
	// emulated distant member; benchmarks and tests only). Zero: at once.
	UnsafeFaultPeerDelay time.Duration
}

// Callbacks are how a Node reports to the service, all from its one loop
// goroutine, in order.
type Callbacks struct {
	// Committed: versions durable on a majority, contiguous, in order; a
	// span is one entry, its head (see Applied.Committed).
	Committed func([]logentry.Entry)
	// LostLeadership: drop every reply not yet sent (see Applied).
	LostLeadership func()
	// Confirmed: aborts with a ticket up to t may be sent.
	Confirmed func(t uint64)
	// Failed: the Raft log could not be written; the member stops.
	Failed func(error)
	// Restored: this member's state starts at a snapshot of this version
	// (at Start, from its disk, or later, received from the leader): the
	// next Committed versions follow it, and none before it will come.
	// epoch is that of the entry at version (0: the snapshot does not say).
	Restored func(version, epoch uint64)
	// BeforeCompact is called before a snapshot is saved and the Raft log
	// drops the entries it covers (every one of them already reported by
	// Committed). A snapshot holds certification keys, not writesets: the
	// service must make the versions it wrote durable now, since the Raft
	// log was their durable copy. ErrCompactLater skips this snapshot on
	// disk (the next one covers it); any other error stops the member.
	BeforeCompact func() error
	// Retention: a log retention decision of the service applied, in log
	// order (ProposeRetention), or the last one a snapshot carries (at
	// Start, and when the leader's snapshot is installed).
	Retention func(decision []byte)
}

// Node runs a Core: a ticker, the Ready loop (one write and one fsync per
// batch: group commit), the transport to the peers.
type Node struct {
	cfg  NodeConfig
	log  *slog.Logger
	disk *DiskLog

	mu       sync.Mutex // guards core, changed, members
	core     *Core
	changed  chan struct{} // closed and replaced after every batch
	members  map[uint64]string
	cb       Callbacks
	lastRole string
	removed  bool // this member saw its own removal applied

	wake      chan struct{}
	transport *transport
	partition *partitionFile
	stop      chan struct{}
	done      sync.WaitGroup
	stopOnce  sync.Once
}

// OpenNode reads the member's Raft log back and builds its Core.
func OpenNode(cfg NodeConfig) (*Node, error) {
	if cfg.TickInterval == 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	if cfg.Core.ElectionTicks == 0 {
		cfg.Core.ElectionTicks = DefaultElectionTicks
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if _, ok := cfg.Members[cfg.Core.ID]; !ok {
		return nil, fmt.Errorf("certifier group: member id %d is not among the members %v", cfg.Core.ID, cfg.Members)
	}
	if len(cfg.Core.Peers) == 0 {
		for id := range cfg.Members {
			cfg.Core.Peers = append(cfg.Core.Peers, id)
		}
		sort.Slice(cfg.Core.Peers, func(i, j int) bool { return cfg.Core.Peers[i] < cfg.Core.Peers[j] })
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("certifier group: %w", err)
	}
	disk, p, torn, err := OpenDiskLog(OSDir{Path: cfg.DataDir, NoSync: cfg.NoSync})
	if err != nil {
		return nil, fmt.Errorf("certifier group: open the raft log in %s: %w", cfg.DataDir, err)
	}
	disk.SyncDelay = cfg.SyncDelay
	if torn > 0 {
		cfg.Logger.Warn("raft log: dropped a torn tail (unsynced writes of a crash)", "dir", cfg.DataDir, "dropped_bytes", torn)
	}
	cfg.Core.Addrs = cfg.Members
	core, err := NewCore(cfg.Core, p)
	if err != nil {
		disk.Close()
		return nil, err
	}
	n := &Node{
		cfg: cfg, log: cfg.Logger, disk: disk,
		core: core, changed: make(chan struct{}), members: cfg.Members,
		wake: make(chan struct{}, 1), stop: make(chan struct{}),
	}
	if voters, _ := core.Config(); len(voters) > 0 {
		// Restarted from a snapshot: its configuration and addresses (members
		// added or removed online) win over --peers.
		n.syncMembers()
	}
	n.transport = newTransport(n, cfg.DialOptions)
	if cfg.UnsafeFaultPartitionFile != "" {
		n.partition = &partitionFile{path: cfg.UnsafeFaultPartitionFile}
		n.log.Warn("UNSAFE: fault point set: Raft messages to and from the members listed in this file are dropped while it exists",
			"file", cfg.UnsafeFaultPartitionFile)
	}
	if cfg.UnsafeFaultPeerDelay > 0 {
		// Each peer's sender waits out the delay in nanosleep (awaitDue),
		// holding a Go P: with as many peers as Ps, the member's other
		// goroutines (its decisions and replies) would wait for the
		// sleeps, which a real network latency does not make them do.
		procs := raiseProcsForPeerDelay(len(cfg.Members) - 1)
		n.log.Warn("UNSAFE: fault point set: every Raft message to a peer is delayed (an emulated distant member; benchmarks and tests only)",
			"delay", cfg.UnsafeFaultPeerDelay, "go_threads", procs)
	}
	return n, nil
}

// peerDelayProcs raises GOMAXPROCS once per process, however many
// members with a peer delay it opens (in-process tests open several).
var peerDelayProcs struct {
	once  sync.Once
	procs int
}

// raiseProcsForPeerDelay adds one Go thread per peer to GOMAXPROCS, once,
// and returns the result.
func raiseProcsForPeerDelay(peers int) int {
	peerDelayProcs.once.Do(func() {
		peerDelayProcs.procs = runtime.GOMAXPROCS(0) + peers
		runtime.GOMAXPROCS(peerDelayProcs.procs)
	})
	return peerDelayProcs.procs
}

// Start runs the node until Close.
func (n *Node) Start(cb Callbacks) {
	n.cb = cb
	n.mu.Lock()
	v, epoch := n.core.SnapshotVersion()
	retention := n.core.Retention()
	n.mu.Unlock()
	if v > 0 && cb.Restored != nil {
		cb.Restored(v, epoch)
	}
	if retention != nil && cb.Retention != nil {
		cb.Retention(retention)
	}
	n.done.Add(1)
	go n.run()
}

// Close stops the loop and the transport and closes the Raft log.
func (n *Node) Close() error {
	n.stopOnce.Do(func() { close(n.stop) })
	n.done.Wait()
	n.transport.close()
	return n.disk.Close()
}

func (n *Node) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *Node) run() {
	defer n.done.Done()
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	clock := tickClock{interval: n.cfg.TickInterval, last: time.Now()}
	for {
		select {
		case now := <-ticker.C:
			n.mu.Lock()
			_, _, leading := n.core.Leader()
			for i := clock.due(now, leading, n.cfg.Core.ElectionTicks); i > 0; i-- {
				n.core.Tick()
			}
			n.mu.Unlock()
		case <-n.wake:
		case <-n.stop:
			return
		}
		if err := n.processReady(); err != nil {
			n.log.Error("certifier group: raft log write failed; this member stops", "err", err)
			if n.cb.Failed != nil {
				n.cb.Failed(err)
			}
			return
		}
	}
}

// tickClock keeps a follower's Raft clock on the wall clock. A
// time.Ticker drops the ticks its receiver was too late for: on a loaded
// machine (a busy Ready loop, or a process waiting for a CPU) a follower's
// election timer then ran at a fraction of real time, and elections after
// a leader's death took 1.3 to 2.1 s instead of at most 1.2 s (measured:
// docs/BENCHMARKS.md "Failover"). A follower or candidate is given the
// ticks it missed, at most one election timeout's worth at once; the leader
// is not (its timers are the heartbeat and CheckQuorum: catching up after
// a stall, before the followers' queued answers are read, could make it
// step down for nothing). A follower that campaigns too early is stopped
// by PreVote while the others still hear the leader.
type tickClock struct {
	interval time.Duration
	last     time.Time
}

// due is how many ticks to give Raft at now.
func (c *tickClock) due(now time.Time, leading bool, electionTicks int) int {
	missed := int(now.Sub(c.last) / c.interval)
	if leading || missed < 1 {
		c.last = now
		return 1
	}
	if limit := max(electionTicks, 1); missed > limit {
		c.last = now
		return limit
	}
	c.last = c.last.Add(time.Duration(missed) * c.interval)
	return missed
}

// processReady carries out batches until Raft has none: persist (one
// fsync), send, apply, report.
func (n *Node) processReady() error {
	for {
		n.mu.Lock()
		b, ok := n.core.Ready()
		n.mu.Unlock()
		if !ok {
			return nil
		}
		if b.Leader {
			n.transport.send(b.Messages)
		}
		if b.Snapshot != nil {
			if err := n.disk.InstallSnapshot(b.Snapshot, b.State); err != nil {
				return err
			}
			n.log.Info("certifier group: installing the leader's snapshot", "index", b.Snapshot.GetMetadata().GetIndex())
		}
		if err := n.disk.Save(b.HardState, b.Entries, b.MustSync); err != nil {
			return err
		}
		if !b.Leader {
			n.transport.send(b.Messages)
		}
		n.mu.Lock()
		a := n.core.Advance()
		if a.MembersChanged {
			n.syncMembers()
		}
		st := n.core.Status()
		close(n.changed)
		n.changed = make(chan struct{})
		n.mu.Unlock()
		// Report first: the service writes the committed versions to its
		// versioned log, which compact makes durable (BeforeCompact)
		// before the Raft log drops them.
		n.report(a, st)
		if err := n.compact(a.Compaction); err != nil {
			return err
		}
	}
}

// ErrCompactLater is what Callbacks.BeforeCompact returns while the
// service has not yet written every version a snapshot covers (a long span
// copy): the member keeps its whole Raft log on disk until a later
// snapshot, instead of stopping its Raft loop to wait.
var ErrCompactLater = errors.New("certifier group: the service is not ready for a compaction")

// compact saves a snapshot the core took, durably, and only then drops the
// log prefix it covers.
func (n *Node) compact(c *Compaction) error {
	if c == nil {
		return nil
	}
	if n.cb.BeforeCompact != nil {
		err := n.cb.BeforeCompact()
		if errors.Is(err, ErrCompactLater) {
			n.log.Debug("certifier group: snapshot not saved, the service is still writing the versions it covers",
				"snapshot_index", c.Snapshot.GetMetadata().GetIndex())
			return nil
		}
		if err != nil {
			return fmt.Errorf("before compacting the raft log: %w", err)
		}
	}
	if err := n.disk.SaveSnapshot(c.Snapshot); err != nil {
		return err
	}
	if err := n.disk.Compact(c.Index, c.HardState); err != nil {
		return err
	}
	n.log.Debug("certifier group: snapshot taken, raft log compacted", "snapshot_index", c.Snapshot.GetMetadata().GetIndex(),
		"compacted_to", c.Index, "snapshot_bytes", len(c.Snapshot.GetData()), "segments", n.disk.Segments())
	return nil
}

func (n *Node) report(a Applied, st Status) {
	if a.Installed > 0 && n.cb.Restored != nil {
		n.cb.Restored(a.Installed, a.InstalledEpoch)
	}
	// A lost leadership is reported before the versions committed in the
	// same batch: those may be the new leader's at versions this member
	// answered as its own commits, and the service drops those replies only
	// if it hears of the loss before their version becomes durable.
	if a.LostLeadership && n.cb.LostLeadership != nil {
		n.cb.LostLeadership()
	}
	if len(a.Committed) > 0 && n.cb.Committed != nil {
		n.cb.Committed(a.Committed)
	}
	if a.Retention != nil && n.cb.Retention != nil {
		n.cb.Retention(a.Retention)
	}
	if n.cb.Confirmed != nil {
		n.cb.Confirmed(a.Confirmed)
	}
	if st.Role != n.lastRole {
		n.log.Info("certifier group: role changed", "member", st.ID, "role", st.Role, "term", st.Term,
			"leader", st.Leader, "applied_version", st.AppliedVersion)
		n.lastRole = st.Role
	}
}

// syncMembers makes the address book the applied configuration's members
// with their addresses (n.mu held).
func (n *Node) syncMembers() {
	addrs := n.core.Addrs()
	voters, learners := n.core.Config()
	members := make(map[uint64]string, len(voters)+len(learners))
	for _, id := range append(voters, learners...) {
		if a := addrs[id]; a != "" {
			members[id] = a
		} else if a := n.members[id]; a != "" {
			members[id] = a
		}
	}
	if _, self := members[n.cfg.Core.ID]; !self && len(voters) > 0 && !n.removed {
		n.log.Warn("certifier group: this member was removed from the group; stop its process", "member", n.cfg.Core.ID)
		n.removed = true
	}
	n.members = members
}

// Certify decides a request if this member leads; a leader still applying
// its log is waited for (up to readyWaitMax). See Core.Certify.
func (n *Node) Certify(ctx context.Context, req certification.Request, prefix logentry.Prefix) (certification.Outcome, uint64, error) {
	deadline := time.Now().Add(readyWaitMax)
	for {
		n.mu.Lock()
		o, ticket, err := n.core.Certify(req, prefix)
		changed := n.changed
		n.mu.Unlock()
		if err == nil {
			if o.Decision == certification.Commit && !o.Duplicate || ticket != 0 {
				n.signal()
			}
			return o, ticket, nil
		}
		if !errors.Is(err, ErrNotReady) || time.Now().After(deadline) {
			return o, ticket, err
		}
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return o, ticket, err
		}
	}
}

// CertifyAll decides a stream's message with one entry into the member's
// lock (the stream receivers and the Raft loop contend for it): Certify or
// Lookup for each request, in order. A leader still applying its log is
// waited for (up to readyWaitMax) before the first request. On an error the
// results before it stand and the rest are not decided. decided, if not
// nil, is called with the results while the lock is still held, so that
// the calls of every stream see the versions in order.
func (n *Node) CertifyAll(ctx context.Context, reqs []Request, decided func([]Result)) ([]Result, error) {
	deadline := time.Now().Add(readyWaitMax)
	for {
		n.mu.Lock()
		out, err := n.core.certifyAll(reqs)
		if len(out) > 0 && decided != nil {
			decided(out)
		}
		changed := n.changed
		n.mu.Unlock()
		if len(out) > 0 {
			n.signal()
		}
		if err == nil || len(out) > 0 || !errors.Is(err, ErrNotReady) || time.Now().After(deadline) {
			return out, err
		}
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return out, err
		}
	}
}

// CommittedSpan: see Core.CommittedSpan.
func (n *Node) CommittedSpan(txn certification.TxnID) (first, last uint64, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.core.CommittedSpan(txn)
}

// Lookup: see Core.Lookup.
func (n *Node) Lookup(txn certification.TxnID) (version, ticket uint64, err error) {
	n.mu.Lock()
	version, ticket, err = n.core.Lookup(txn)
	n.mu.Unlock()
	if err == nil && ticket != 0 {
		n.signal()
	}
	return version, ticket, err
}

// ReadVersion: see Core.ReadVersion. A leader still applying its log is
// waited for (up to readyWaitMax).
func (n *Node) ReadVersion(ctx context.Context) (version, ticket, term uint64, err error) {
	err = n.whenReady(ctx, func() (err error) {
		version, ticket, term, err = n.core.ReadVersion()
		return err
	})
	if err == nil {
		n.signal()
	}
	return version, ticket, term, err
}

// CertifyingEpoch: see Core.CertifyingEpoch. A leader still applying its
// log is waited for (up to readyWaitMax).
func (n *Node) CertifyingEpoch(ctx context.Context) (epoch, firstVersion uint64, err error) {
	err = n.whenReady(ctx, func() (err error) {
		epoch, firstVersion, err = n.core.CertifyingEpoch()
		return err
	})
	return epoch, firstVersion, err
}

// whenReady calls read under the lock until it returns anything but
// ErrNotReady, or readyWaitMax passed, or ctx ended.
func (n *Node) whenReady(ctx context.Context, read func() error) error {
	deadline := time.Now().Add(readyWaitMax)
	for {
		n.mu.Lock()
		err := read()
		changed := n.changed
		n.mu.Unlock()
		if !errors.Is(err, ErrNotReady) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return err
		}
	}
}

// ProposeRetention: see Core.ProposeRetention.
func (n *Node) ProposeRetention(decision []byte) error {
	n.mu.Lock()
	err := n.core.ProposeRetention(decision)
	n.mu.Unlock()
	if err == nil {
		n.signal()
	}
	return err
}

// Leader: see Core.Leader.
func (n *Node) Leader() (id, term uint64, leading bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.core.Leader()
}

// Versions: see Core.Versions.
func (n *Node) Versions() (version, lowWaterMark uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.core.Versions()
}

// IndexedRows: see Core.IndexedRows.
func (n *Node) IndexedRows() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.core.IndexedRows()
}

// Status reports this member's view.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.core.Status()
}

// ID is this member's id.
func (n *Node) ID() uint64 { return n.cfg.Core.ID }

// Members maps member ids to addresses.
func (n *Node) Members() map[uint64]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[uint64]string, len(n.members))
	for id, a := range n.members {
		out[id] = a
	}
	return out
}

// DialOptions are the options the member dials its peers with (their TLS).
func (n *Node) DialOptions() []grpc.DialOption { return n.cfg.DialOptions }

// AddrOf is a member's address ("" if unknown).
func (n *Node) AddrOf(id uint64) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.members[id]
}

// FsyncStats: syncs of the Raft log and the entries they carried.
func (n *Node) FsyncStats() (syncs, entries uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.disk.Syncs, n.disk.SyncedEntries
}

// step hands a peer's message to Raft (from the transport).
func (n *Node) step(m *raftpb.Message) {
	n.mu.Lock()
	err := n.core.Step(m) // messages from unknown members or old terms are dropped
	n.mu.Unlock()
	if errors.Is(err, ErrLostLog) {
		n.lostLog(err)
		return
	}
	n.signal()
}

// lostLog stops the member: its log is behind what it acknowledged.
func (n *Node) lostLog(err error) {
	n.stopOnce.Do(func() {
		n.log.Error("certifier group: this member stops", "err", err)
		close(n.stop)
		if n.cb.Failed != nil {
			go n.cb.Failed(err)
		}
	})
}

// snapshotSent reports whether a snapshot message reached the gRPC stream
// (see Core.ReportSnapshot); other messages are ignored.
func (n *Node) snapshotSent(m *raftpb.Message, ok bool) {
	if m.GetType() != raftpb.MessageType_MsgSnap {
		return
	}
	n.mu.Lock()
	n.core.ReportSnapshot(m.GetTo(), !ok)
	n.mu.Unlock()
	n.signal()
}

func (n *Node) reportUnreachable(id uint64) {
	n.mu.Lock()
	n.core.ReportUnreachable(id)
	n.mu.Unlock()
}
