package certgroup_test

// The seeded deterministic simulation of the certifier group (Tashkent
// §7.3). One seed runs a whole group in one goroutine: the real
// Core of every member (etcd Raft + the certification state machine) over a
// simulated network that drops, delays and reorders messages and cuts
// partitions, simulated disks that lose what was not synced when their
// member crashes (and may keep a torn part of it), crashes and restarts,
// and clients that certify conflicting transactions and re-send those
// whose outcome they lost, as certclient does; some transactions are
// streamed (a span of versions, certgroup.Core.CertifySpan). The driver does for each
// member what Node does for a real one: persist a batch (one sync), send
// its messages, Advance, and answer the waiting requests the way the
// certifier service does (commits once durable in the same leadership,
// aborts once leadership is confirmed, everything dropped on a lost
// leadership).
//
// Checkers, at every step and at the end:
//   - no version assigned twice: every member that applies version v applies
//     the same entry, and no transaction commits at two versions;
//   - no acknowledged entry lost: every commit a client was told of is in the
//     final log at its version, which every live member has applied;
//   - an abort a client was told of is never committed (40001 only when the
//     transaction certainly did not commit);
//   - live members' logs agree on the committed prefix and converge;
//   - epochs (the group's base plus the leader's term) never decrease along
//     the log, and a snapshot a member installs names the epoch of its
//     version.
//
// Raft randomizes election timeouts with crypto/rand, which no seed
// controls, so the members' election timers are set out of reach and the
// simulation starts elections itself (Core.Campaign) from its seeded
// source: when no leader is known for a while, and at random, to force
// leader changes under load.
//
// Replay a failing seed: go test ./internal/certgroup -run TestSimulation -seed=N -v

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/certifier"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/process"
)

var (
	flagSeed  = flag.Int64("seed", 0, "run only this simulation seed (replays a failure)")
	flagSeeds = flag.Int("seeds", 0, "how many seeds TestSimulation runs (default 2000; 300 with -short)")
	flagSteps = flag.Int("steps", 0, "steps per seed (default 200)")
)

func TestSimulation(t *testing.T) {
	if raceBuild && *flagSeed == 0 && *flagSeeds == 0 {
		runSimulationWithoutRace(t)
		return
	}
	if *flagSeed != 0 {
		if _, err := runSim(*flagSeed, simSteps(), true); err != nil {
			t.Fatalf("seed %d: %v", *flagSeed, err)
		}
		return
	}
	seeds := *flagSeeds
	if seeds == 0 {
		seeds = 2000
		if testing.Short() {
			seeds = 300
		}
	}
	var total simStats
	for seed := int64(1); seed <= int64(seeds); seed++ {
		st, err := runSim(seed, simSteps(), false)
		if err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./internal/certgroup -run TestSimulation -seed=%d -v", seed, err, seed)
		}
		total.add(st)
	}
	t.Logf("%d seeds: %+v", seeds, total)
	// The seeds must exercise what the checkers are there for: otherwise
	// they would pass without testing compaction or membership at all.
	if seeds >= 100 && (total.SnapshotsTaken == 0 || total.Installed == 0 || total.RestartsFromSnapshot == 0 ||
		total.Joined == 0 || total.Departed == 0 || total.Spans == 0) {
		t.Fatalf("the seeds did not take, install and restart from snapshots, change members and commit spans: %+v", total)
	}
}

// simStats count what a run exercised.
type simStats struct {
	SnapshotsTaken, Installed, RestartsFromSnapshot, Joined, Departed int
	Spans                                                             int // streamed transactions committed
	LostLog                                                           int // members stopped on ErrLostLog
}

func (a *simStats) add(b simStats) {
	a.SnapshotsTaken += b.SnapshotsTaken
	a.Installed += b.Installed
	a.RestartsFromSnapshot += b.RestartsFromSnapshot
	a.Joined += b.Joined
	a.Departed += b.Departed
	a.Spans += b.Spans
}

// TestSimulationIsDeterministic runs seeds twice and compares traces: a
// failing seed must replay exactly.
func TestSimulationIsDeterministic(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		a, errA := traceSim(seed)
		b, errB := traceSim(seed)
		if errA != nil || errB != nil {
			t.Fatalf("seed %d: %v / %v", seed, errA, errB)
		}
		if a != b {
			t.Fatalf("seed %d ran differently twice:\n%s\n---\n%s", seed, a, b)
		}
	}
}

func simSteps() int {
	if *flagSteps != 0 {
		return *flagSteps
	}
	return 200
}

func traceSim(seed int64) (string, error) {
	s := newSim(seed, false)
	s.tracing = true
	err := s.run(simSteps())
	return s.trace.String(), err
}

func runSim(seed int64, steps int, verbose bool) (st simStats, err error) {
	s := newSim(seed, verbose)
	s.tracing = verbose || *flagSeed != 0
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v (replay with -seed=%d -v for the trace)\n%s", r, seed, process.OutputTail(s.trace.String(), 3000))
		}
	}()
	err = s.run(steps)
	return s.stats, err
}

// --- simulated disk ---

type simFile struct {
	data   []byte
	synced int
}

func (f *simFile) Write(p []byte) (int, error) { f.data = append(f.data, p...); return len(p), nil }
func (f *simFile) Sync() error                 { f.synced = len(f.data); return nil }
func (f *simFile) Close() error                { return nil }

// crash loses the unsynced tail, except a random (possibly torn) part of it.
func (f *simFile) crash(rng *rand.Rand) {
	keep := f.synced + rng.Intn(len(f.data)-f.synced+1)
	f.data = f.data[:keep:keep]
	f.synced = keep
}

// simDir is a member's directory. Creating, replacing and removing files
// are durable at once (the real OSDir syncs the directory each time); file
// contents lose their unsynced tail on a crash.
type simDir struct {
	files map[string]*simFile
}

func newSimDir() *simDir { return &simDir{files: map[string]*simFile{}} }

func (d *simDir) List() ([]string, error) {
	names := make([]string, 0, len(d.files))
	for n := range d.files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (d *simDir) ReadFile(name string) ([]byte, error) {
	f, ok := d.files[name]
	if !ok {
		return nil, fmt.Errorf("no file %s", name)
	}
	return bytes.Clone(f.data), nil
}

func (d *simDir) OpenAppend(name string, size int64) (certgroup.File, error) {
	f := d.files[name]
	if f == nil {
		f = &simFile{}
		d.files[name] = f
	}
	if size >= 0 && int(size) < len(f.data) {
		f.data = f.data[:size:size]
		f.synced = min(f.synced, int(size))
	}
	return f, nil
}

func (d *simDir) WriteAtomic(name string, data []byte) error {
	d.files[name] = &simFile{data: bytes.Clone(data), synced: len(data)}
	return nil
}

func (d *simDir) Remove(name string) error { delete(d.files, name); return nil }

func (d *simDir) crash(rng *rand.Rand) {
	names, _ := d.List()
	for _, n := range names {
		d.files[n].crash(rng)
	}
}

func (d *simDir) bytes() int {
	n := 0
	for _, f := range d.files {
		n += len(f.data)
	}
	return n
}

// --- members, network, clients ---

type waiting struct {
	txn     certification.TxnID
	version uint64 // commit: durable at this version
	first   uint64 // commit: the first version of its span (version for one)
	ticket  uint64 // abort: confirmed at this ticket
	abort   bool
	epoch   int
}

type member struct {
	id      uint64
	core    *certgroup.Core // nil while crashed
	disk    *simDir
	log     *certgroup.DiskLog
	epoch   int
	waits   []waiting
	applied uint64 // versions applied since the last start
	confirm uint64
	// leaderless counts ticks without a known leader.
	leaderless int
	// join: added to the group online (starts empty, never bootstraps);
	// added once the leader's configuration had it; removed once the
	// leader's configuration no longer has it (then stopped for good).
	join, added, removed bool
}

type message struct {
	at, seq int64
	m       *raftpb.Message
}

type txn struct {
	id    certification.TxnID
	start uint64
	ws    *pb.Writeset
	// fragments: a streamed transaction of that many versions (0: one
	// version, not streamed).
	fragments int
	// outcome the client was told: 0 none yet, else the version; aborted
	// when told abort.
	acked   uint64
	aborted bool
	sentAt  int64
}

type sim struct {
	rng      *rand.Rand
	verbose  bool
	tracing  bool // keep a trace (replays and the determinism test)
	settling bool // no more faults
	trace    bytes.Buffer
	now      int64
	seq      int64
	members  []*member
	net      []message
	cut      map[[2]uint64]bool
	dropPct  int
	// Snapshots every snapEntries applied entries, catchUp entries kept
	// behind each: small, so that members restart from snapshots and
	// lagging ones catch up by one.
	snapEntries, catchUp uint64
	stats                simStats
	// membership: this seed adds and removes members online; initial are
	// the members the group was bootstrapped with.
	membership bool
	initial    []uint64

	history map[uint64][]byte              // version -> entry committed
	txnAt   map[certification.TxnID]uint64 // the last version of its span
	firstAt map[certification.TxnID]uint64 // the first version of its span
	txns    []*txn
	nextSeq uint64
}

func newSim(seed int64, verbose bool) *sim {
	rng := rand.New(rand.NewSource(seed))
	n := 3
	if rng.Intn(4) == 0 {
		n = 5
	}
	s := &sim{rng: rng, verbose: verbose, cut: map[[2]uint64]bool{}, dropPct: rng.Intn(15),
		history: map[uint64][]byte{}, txnAt: map[certification.TxnID]uint64{}, firstAt: map[certification.TxnID]uint64{},
		snapEntries: uint64(3 + rng.Intn(30)), catchUp: uint64(1 + rng.Intn(10))}
	s.membership = rng.Intn(3) == 0
	for i := 1; i <= n; i++ {
		s.members = append(s.members, &member{id: uint64(i), disk: newSimDir(), added: true})
		s.initial = append(s.initial, uint64(i))
	}
	for _, m := range s.members {
		s.start(m)
	}
	return s
}

func (s *sim) logf(format string, args ...any) {
	if !s.tracing {
		return
	}
	fmt.Fprintf(&s.trace, "%d: ", s.now)
	fmt.Fprintf(&s.trace, format, args...)
	s.trace.WriteByte('\n')
	if s.verbose {
		fmt.Printf("%d: "+format+"\n", append([]any{s.now}, args...)...)
	}
}

// simStart is the simulated clock's start; a step lasts simStep.
var simStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const simStep = 10 * time.Millisecond

// clock is the simulated time (the group's base is read from it).
func (s *sim) clock() time.Time { return simStart.Add(time.Duration(s.now) * simStep) }

// window small enough that the simulation slides it: re-sent requests then
// also exercise the clients' settling from the log.
const simWindowVersions = 64

func (s *sim) start(m *member) {
	log, p, _, err := certgroup.OpenDiskLog(m.disk)
	if err != nil {
		panic(err)
	}
	core, err := certgroup.NewCore(certgroup.Config{
		ID: m.id, Peers: s.initial, Join: m.join, ElectionTicks: 1 << 20, HeartbeatTicks: 2,
		WindowVersions: simWindowVersions, Decode: certifier.DecodeEntryKeys, DisableCheckQuorum: true,
		SnapshotEntries: s.snapEntries, CatchUpEntries: s.catchUp, Now: s.clock,
	}, p)
	if err != nil {
		panic(err)
	}
	// A member that starts from a snapshot applies the versions after it.
	m.core, m.log, m.applied, m.waits, m.confirm = core, log, core.AppliedVersion(), nil, 0
	if p.Snapshot != nil {
		s.stats.RestartsFromSnapshot++
		s.logf("member %d starts from its snapshot at index %d, version %d", m.id, p.Snapshot.GetMetadata().GetIndex(), m.applied)
	}
	m.epoch++
}

func (s *sim) crash(m *member) {
	s.logf("crash %d", m.id)
	m.core = nil
	m.waits = nil
	m.disk.crash(s.rng)
}

func (s *sim) live() []*member {
	var out []*member
	for _, m := range s.members {
		if m.core != nil {
			out = append(out, m)
		}
	}
	return out
}

func (s *sim) member(id uint64) *member { return s.members[id-1] }

func (s *sim) connected(a, b uint64) bool { return !s.cut[[2]uint64{a, b}] && !s.cut[[2]uint64{b, a}] }

func (s *sim) send(from uint64, msgs []*raftpb.Message) {
	for _, m := range msgs {
		if !s.connected(from, m.GetTo()) || s.rng.Intn(100) < s.dropPct {
			s.snapshotLost(m)
			continue
		}
		s.seq++
		s.net = append(s.net, message{at: s.now + 1 + int64(s.rng.Intn(4)), seq: s.seq, m: m})
	}
}

// snapshotLost reports a snapshot message that never arrived to its sender
// (as the real transport does when its stream fails).
func (s *sim) snapshotLost(m *raftpb.Message) {
	if m.GetType() != raftpb.MessageType_MsgSnap {
		return
	}
	if from := s.member(m.GetFrom()); from.core != nil {
		from.core.ReportSnapshot(m.GetTo(), true)
	}
}

// drive carries out every batch a member has ready, as Node does.
func (s *sim) drive(m *member) error {
	for m.core != nil {
		b, ok := m.core.Ready()
		if !ok {
			return nil
		}
		if b.Snapshot != nil {
			if err := m.log.InstallSnapshot(b.Snapshot, b.State); err != nil {
				return err
			}
		}
		if b.Leader && s.rng.Intn(2) == 0 {
			// A leader may send before its own write; a crash then loses
			// the write but not the messages.
			s.send(m.id, b.Messages)
			if !s.settling && s.rng.Intn(50) == 0 {
				s.crash(m)
				return nil
			}
			if err := m.log.Save(b.HardState, b.Entries, b.MustSync); err != nil {
				return err
			}
		} else {
			if err := m.log.Save(b.HardState, b.Entries, b.MustSync); err != nil {
				return err
			}
			s.send(m.id, b.Messages)
		}
		a := m.core.Advance()
		if c := a.Compaction; c != nil {
			s.stats.SnapshotsTaken++
			if err := m.log.SaveSnapshot(c.Snapshot); err != nil {
				return err
			}
			if !s.settling && s.rng.Intn(40) == 0 {
				// Crash between the snapshot and the compaction, before
				// the batch is reported to the service (as in Node): the
				// versions it committed are committed all the same.
				if err := s.recordCommitted(m, a.Committed); err != nil {
					return err
				}
				s.crash(m)
				return nil
			}
			if err := m.log.Compact(c.Index, c.HardState); err != nil {
				return err
			}
		}
		if err := s.applied(m, a); err != nil {
			return err
		}
	}
	return nil
}

func (s *sim) applied(m *member, a certgroup.Applied) error {
	if a.Installed > 0 {
		if a.Installed < m.applied {
			return fmt.Errorf("member %d installed a snapshot of version %d after applying %d", m.id, a.Installed, m.applied)
		}
		entry, ok := s.history[a.Installed]
		if !ok {
			return fmt.Errorf("member %d installed a snapshot of version %d, which never committed", m.id, a.Installed)
		}
		if h, err := logentry.HeaderOf(entry); err != nil || h.Epoch != a.InstalledEpoch {
			return fmt.Errorf("member %d installed a snapshot of version %d in epoch %d, committed in epoch %d (%v)", m.id, a.Installed, a.InstalledEpoch, h.Epoch, err)
		}
		s.stats.Installed++
		s.logf("member %d installed the leader's snapshot: version %d (was %d)", m.id, a.Installed, m.applied)
		m.applied = a.Installed
	}
	if err := s.recordCommitted(m, a.Committed); err != nil {
		return err
	}
	if a.LostLeadership {
		s.logf("member %d lost leadership; %d replies dropped", m.id, len(m.waits))
		m.epoch++
		m.waits = nil
	}
	if a.MembersChanged {
		s.logf("member %d voters %v", m.id, m.core.Status().Voters)
	}
	m.confirm = max(m.confirm, a.Confirmed)
	return s.answer(m)
}

// recordCommitted checks the versions a member applied against the
// history of the whole run and records new ones. A span is one entry, its
// head, at its last version: the history holds the head at each of its
// versions.
func (s *sim) recordCommitted(m *member, entries []logentry.Entry) error {
	for _, e := range entries {
		h, err := logentry.HeaderOf(e.Bytes)
		if err != nil {
			return err
		}
		first := e.Version
		if h.SpanLast != 0 {
			first = h.SpanFirst
		}
		if first != m.applied+1 || h.Version != e.Version || h.SpanLast != 0 && h.SpanLast != e.Version {
			return fmt.Errorf("member %d applied versions %d..%d (entry of version %d, span %d..%d) after %d",
				m.id, first, e.Version, h.Version, h.SpanFirst, h.SpanLast, m.applied)
		}
		m.applied = e.Version
		if prev, ok := s.history[e.Version]; ok {
			if !bytes.Equal(prev, e.Bytes) || s.history[first] == nil || !bytes.Equal(s.history[first], e.Bytes) {
				return fmt.Errorf("versions %d..%d assigned twice: member %d applied a different entry", first, e.Version, m.id)
			}
			continue
		}
		if err := s.checkEpoch(first, h.Epoch); err != nil {
			return err
		}
		id := certification.TxnID{Origin: h.Origin, Seq: h.Seq}
		if v, ok := s.txnAt[id]; ok {
			return fmt.Errorf("transaction %v committed twice, at versions %d and %d", id, v, e.Version)
		}
		for v := first; v <= e.Version; v++ {
			if s.history[v] != nil {
				return fmt.Errorf("version %d assigned twice: member %d applied the span %d..%d", v, m.id, first, e.Version)
			}
			s.history[v] = e.Bytes
		}
		s.txnAt[id], s.firstAt[id] = e.Version, first
		if first != e.Version {
			s.stats.Spans++
		}
		s.logf("versions %d..%d committed: %v (member %d)", first, e.Version, id, m.id)
	}
	return nil
}

// checkEpoch: a new entry from version first on is of an epoch above
// the group's base, and not below the epoch of the version before it.
func (s *sim) checkEpoch(first, epoch uint64) error {
	if epoch <= uint64(simStart.UnixMicro()) {
		return fmt.Errorf("versions from %d on were certified in epoch %d, not above the group's base", first, epoch)
	}
	prev, ok := s.history[first-1]
	if !ok {
		return nil
	}
	h, err := logentry.HeaderOf(prev)
	if err != nil {
		return err
	}
	if epoch < h.Epoch {
		return fmt.Errorf("version %d was certified in epoch %d, below the epoch %d of version %d", first, epoch, h.Epoch, first-1)
	}
	return nil
}

// answer sends, in order, the replies whose condition holds, as the
// service's send loop does.
func (s *sim) answer(m *member) error {
	for len(m.waits) > 0 {
		w := m.waits[0]
		if w.epoch != m.epoch {
			panic("reply of an older leadership left waiting")
		}
		if w.abort && w.ticket > m.confirm || !w.abort && w.version > m.applied {
			return nil
		}
		m.waits = m.waits[1:]
		t := s.txns[w.txn.Seq-1]
		if at, ok := s.txnAt[w.txn]; ok && w.abort && at <= m.applied {
			// The member sends every entry it applied before the reply, and
			// the client settles a pending call from the entries
			// (certclient.settleFromLog): the commit wins over an abort by
			// a member that forgot the transaction id (window slid).
			s.logf("client settles %v from the log at version %d", w.txn, at)
			w.abort, w.version, w.first = false, at, s.firstAt[w.txn]
		}
		if w.abort {
			s.logf("client told %v aborted (member %d)", w.txn, m.id)
			if t.acked != 0 {
				return fmt.Errorf("transaction %v told abort after commit at %d", w.txn, t.acked)
			}
			t.aborted = true
			continue
		}
		at, ok := s.txnAt[w.txn]
		if !ok || at != w.version || s.firstAt[w.txn] != w.first {
			return fmt.Errorf("member %d acknowledged %v at versions %d..%d, but the log has it at %d..%d (%v)",
				m.id, w.txn, w.first, w.version, s.firstAt[w.txn], at, ok)
		}
		if t.aborted {
			return fmt.Errorf("transaction %v told commit after abort", w.txn)
		}
		t.acked = w.version
	}
	return nil
}

func (s *sim) newTxn() *txn {
	s.nextSeq++
	rows := 1 + s.rng.Intn(3)
	ws := &pb.Writeset{}
	for i := 0; i < rows; i++ {
		ws.Changes = append(ws.Changes, &pb.Change{Table: "t", Op: pb.Op_OP_UPSERT, Key: fmt.Appendf(nil, "[%d]", s.rng.Intn(30)), Row: []byte("x")})
	}
	// A replica's snapshot is a durable version some member applied.
	start := uint64(0)
	if l := s.live(); len(l) > 0 {
		start = l[s.rng.Intn(len(l))].applied
	}
	t := &txn{id: certification.TxnID{Origin: "sim", Seq: s.nextSeq}, start: start, ws: ws}
	if s.rng.Intn(8) == 0 {
		t.fragments = 1 + s.rng.Intn(4)
	}
	s.txns = append(s.txns, t)
	return t
}

// certify asks a member to certify a transaction on keys, as the service
// does: a streamed one with its span head.
func certify(m *member, t *txn, keys []certification.Key) (certification.Outcome, uint64, error) {
	id := &pb.TxnID{Origin: t.id.Origin, Seq: t.id.Seq}
	req := certification.Request{Txn: t.id, StartVersion: t.start, Keys: keys, Versions: t.fragments}
	if t.fragments == 0 {
		return m.core.Certify(req, logentry.EncodePrefix(id, t.ws))
	}
	certified, err := proto.Marshal(t.ws)
	if err != nil {
		panic(err) // cannot fail for a well-formed message
	}
	return m.core.CertifySpan(req, certgroup.SpanHead{Txn: id, Certified: certified})
}

// submit sends a transaction to a member, as certclient does: to the
// leader it was told of, else anyone.
func (s *sim) submit(t *txn, m *member, drive bool) error {
	if m.core == nil {
		return nil
	}
	keys, err := certifier.KeysOf(t.ws)
	if err != nil {
		return err
	}
	t.sentAt = s.now
	o, ticket, err := certify(m, t, keys)
	if err != nil {
		return nil // not the leader or not ready: the client tries again later
	}
	w := waiting{txn: t.id, epoch: m.epoch}
	if o.Decision == certification.Commit {
		w.version, w.first = o.CommitVersion, o.FirstVersion
	} else {
		w.abort, w.ticket = true, ticket
	}
	m.waits = append(m.waits, w)
	s.logf("member %d certified %v: %v %d..%d", m.id, t.id, o.Decision, o.FirstVersion, o.CommitVersion)
	if !drive {
		return nil
	}
	return s.drive(m)
}

func (s *sim) leader() *member {
	for _, m := range s.live() {
		if _, _, leading := m.core.Leader(); leading {
			return m
		}
	}
	return nil
}

func (s *sim) deliver() error {
	sort.Slice(s.net, func(i, j int) bool {
		if s.net[i].at != s.net[j].at {
			return s.net[i].at < s.net[j].at
		}
		return s.net[i].seq < s.net[j].seq
	})
	n := 0
	for n < len(s.net) && s.net[n].at <= s.now {
		n++
	}
	due := s.net[:n]
	s.net = append([]message(nil), s.net[n:]...)
	for _, msg := range due {
		to := s.member(msg.m.GetTo())
		if to.core == nil || !s.connected(msg.m.GetFrom(), to.id) {
			s.snapshotLost(msg.m)
			continue
		}
		if msg.m.GetType() == raftpb.MessageType_MsgSnap {
			s.logf("member %d receives a snapshot at index %d from %d", to.id, msg.m.GetSnapshot().GetMetadata().GetIndex(), msg.m.GetFrom())
			if from := s.member(msg.m.GetFrom()); from.core != nil {
				from.core.ReportSnapshot(to.id, false)
			}
		}
		if err := to.core.Step(msg.m); errors.Is(err, certgroup.ErrLostLog) {
			// The member stops, as Node does. No member of a normal run
			// loses synced writes, so check() fails the run on it.
			s.logf("member %d stops: %v", to.id, err)
			s.stats.LostLog++
			to.core, to.waits = nil, nil
			continue
		}
		if err := s.drive(to); err != nil {
			return err
		}
	}
	return nil
}

func (s *sim) tick() error {
	for _, m := range s.live() {
		m.core.Tick()
		if err := s.drive(m); err != nil {
			return err
		}
	}
	// Each member's election timer, counted in ticks without a leader,
	// with seeded jitter.
	for _, m := range s.live() {
		if s.hearsLeader(m) {
			m.leaderless = 0
			continue
		}
		m.leaderless++
		if m.leaderless > 4+s.rng.Intn(8) {
			s.logf("member %d campaigns", m.id)
			m.leaderless = 0
			_ = m.core.Campaign()
			if err := s.drive(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// hearsLeader: the member's leader is alive, leads in the member's term
// and is connected to it (what Raft's election timer measures by hearing
// heartbeats).
func (s *sim) hearsLeader(m *member) bool {
	lead, term, leading := m.core.Leader()
	if lead == 0 {
		return false
	}
	if lead == m.id {
		return leading
	}
	l := s.member(lead)
	if l.core == nil || !s.connected(m.id, l.id) {
		return false
	}
	_, lterm, lleading := l.core.Leader()
	return lleading && lterm == term
}

// pending are the transactions with no outcome told yet.
func (s *sim) pending() []*txn {
	var out []*txn
	for _, t := range s.txns {
		if t.acked == 0 && !t.aborted {
			out = append(out, t)
		}
	}
	return out
}

func (s *sim) step() error {
	s.now++
	if err := s.deliver(); err != nil {
		return err
	}
	if err := s.tick(); err != nil {
		return err
	}
	switch r := s.rng.Intn(100); {
	case r < 45: // new transactions, to the leader if there is one
		// A burst reaches the member before it is driven: the leader
		// proposes them as one batch (one Raft entry) at its next Ready.
		burst := s.rng.Intn(2) == 0
		for i := s.rng.Intn(4); i >= 0; i-- {
			t := s.newTxn()
			if err := s.submit(t, s.target(), !burst || i == 0); err != nil {
				return err
			}
		}
	case r < 60: // re-send transactions whose outcome is still unknown
		for _, t := range s.pending() {
			if s.now-t.sentAt > 8 {
				if err := s.submit(t, s.target(), true); err != nil {
					return err
				}
			}
		}
	case r < 63:
		if l := s.live(); len(l) > len(s.active())/2 {
			s.crash(l[s.rng.Intn(len(l))])
		}
	case r < 68:
		for _, m := range s.active() {
			if m.core == nil {
				s.logf("restart %d", m.id)
				s.start(m)
				break
			}
		}
	case r < 71:
		a, b := uint64(1+s.rng.Intn(len(s.members))), uint64(1+s.rng.Intn(len(s.members)))
		if a != b {
			s.logf("cut %d-%d", a, b)
			s.cut[[2]uint64{a, b}] = true
		}
	case r < 74:
		s.logf("heal")
		s.cut = map[[2]uint64]bool{}
	case r < 76: // force a leader change under load
		if l := s.live(); len(l) > 0 {
			m := l[s.rng.Intn(len(l))]
			s.logf("member %d campaigns", m.id)
			_ = m.core.Campaign()
			return s.drive(m)
		}
	case r < 79:
		if s.membership {
			if err := s.changeMembership(); err != nil {
				return err
			}
		}
	}
	return s.reconcileMembers(false)
}

// target is the member a client sends to: usually the leader (clients
// follow the leader hint), sometimes anyone (a stale hint).
func (s *sim) target() *member {
	if l := s.leader(); l != nil && s.rng.Intn(5) != 0 {
		return l
	}
	return s.members[s.rng.Intn(len(s.members))]
}

func (s *sim) run(steps int) error {
	for i := 0; i < steps; i++ {
		if err := s.step(); err != nil {
			return err
		}
	}
	return s.settle()
}

// settle heals everything, restarts every member, resolves every pending
// transaction and then checks the end state.
func (s *sim) settle() error {
	s.logf("settle")
	s.settling = true
	s.cut, s.dropPct = map[[2]uint64]bool{}, 0
	for _, m := range s.active() {
		if m.core == nil {
			s.start(m)
		}
	}
	for round := 0; round < 4000; round++ {
		if err := s.reconcileMembers(round%10 == 0); err != nil {
			return err
		}
		s.now++
		if err := s.deliver(); err != nil {
			return err
		}
		if err := s.tick(); err != nil {
			return err
		}
		if round%10 == 0 {
			for _, t := range s.pending() {
				if err := s.submit(t, s.target(), true); err != nil {
					return err
				}
			}
		}
		if len(s.pending()) == 0 && s.converged() {
			return s.check()
		}
	}
	var states []string
	for _, m := range s.active() {
		states = append(states, fmt.Sprintf("%+v applied %d", m.core.Status(), m.applied))
	}
	return fmt.Errorf("did not settle: %d transactions pending, converged %v, leader %v\n%s", len(s.pending()), s.converged(), s.leader() != nil, strings.Join(states, "\n"))
}

// converged: every member has the same log, all of it applied.
func (s *sim) converged() bool {
	active := s.active()
	first := active[0].core.Status()
	for _, m := range active {
		st := m.core.Status()
		if m.applied != active[0].applied || st.LastIndex != first.LastIndex || st.AppliedIndex != st.LastIndex {
			return false
		}
	}
	return true
}

func (s *sim) check() error {
	if s.stats.LostLog > 0 {
		return fmt.Errorf("%d times a member refused a heartbeat as beyond its log (ErrLostLog), but no member lost synced writes", s.stats.LostLog)
	}
	last := s.active()[0].applied
	if uint64(len(s.history)) < last {
		return fmt.Errorf("history has %d versions, members applied %d", len(s.history), last)
	}
	for v := uint64(1); v <= last; v++ {
		if s.history[v] == nil {
			return fmt.Errorf("version %d missing from the history", v)
		}
	}
	acked, aborted := 0, 0
	for _, t := range s.txns {
		at, committed := s.txnAt[t.id]
		switch {
		case t.acked != 0:
			acked++
			if !committed || at != t.acked || at > last {
				return fmt.Errorf("acknowledged %v at version %d lost (log: %d %v, applied %d)", t.id, t.acked, at, committed, last)
			}
		case t.aborted:
			aborted++
			if committed {
				return fmt.Errorf("%v was told abort but committed at version %d", t.id, at)
			}
		}
	}
	s.logf("end: %d versions, %d acknowledged, %d aborted; members %v", last, acked, aborted, s.activeIDs())
	return nil
}

// --- membership ---

// active are the members not removed from the group (running or crashed).
func (s *sim) active() []*member {
	var out []*member
	for _, m := range s.members {
		if !m.removed {
			out = append(out, m)
		}
	}
	return out
}

func (s *sim) activeIDs() []uint64 {
	var ids []uint64
	for _, m := range s.active() {
		ids = append(ids, m.id)
	}
	return ids
}

// changeMembership adds a member (started empty, as a learner; promoted by
// reconcileMembers once caught up) or removes a voter, the leader itself
// included, one change at a time, as `certifier members add|remove` does.
func (s *sim) changeMembership() error {
	l := s.leader()
	if l == nil {
		return nil
	}
	voters, learners := l.core.Config()
	if len(learners) > 0 || len(s.active()) != len(voters) {
		return nil // a change is under way
	}
	if len(voters) < 5 && len(s.members) < 9 && s.rng.Intn(2) == 0 {
		m := &member{id: uint64(len(s.members) + 1), disk: newSimDir(), join: true}
		s.members = append(s.members, m)
		s.start(m)
		s.logf("member %d started empty; the leader %d adds it as a learner", m.id, l.id)
		_ = l.core.ProposeMemberChange(raftpb.ConfChangeType_ConfChangeAddLearnerNode, m.id, "")
		return s.drive(l)
	}
	if len(voters) > 3 {
		id := voters[s.rng.Intn(len(voters))]
		s.logf("the leader %d removes member %d", l.id, id)
		_ = l.core.ProposeMemberChange(raftpb.ConfChangeType_ConfChangeRemoveNode, id, "")
		return s.drive(l)
	}
	return nil
}

// reconcileMembers follows the leader's applied configuration (once it has
// applied its whole log): members in it are added, members that were added
// and are no longer in it are removed and stopped for good, learners that
// caught up are promoted. With retry, members started to join but not in
// the configuration (their addition was dropped with a leadership) are
// proposed again.
func (s *sim) reconcileMembers(retry bool) error {
	l := s.leader()
	if l == nil || !l.core.Status().Certifying {
		return nil
	}
	voters, learners := l.core.Config()
	in := map[uint64]bool{}
	for _, id := range append(append([]uint64(nil), voters...), learners...) {
		in[id] = true
	}
	for _, m := range s.members {
		switch {
		case m.removed:
		case in[m.id] && !m.added:
			m.added = true
			s.stats.Joined++
			s.logf("member %d is in the configuration", m.id)
		case !in[m.id] && m.added:
			m.removed = true
			s.stats.Departed++
			m.core, m.waits = nil, nil
			s.logf("member %d removed; stopped", m.id)
		case !in[m.id] && retry:
			_ = l.core.ProposeMemberChange(raftpb.ConfChangeType_ConfChangeAddLearnerNode, m.id, "")
		}
	}
	for _, id := range learners {
		if l.core.CaughtUp(id) {
			s.logf("the leader %d promotes learner %d", l.id, id)
			_ = l.core.ProposeMemberChange(raftpb.ConfChangeType_ConfChangeAddNode, id, "")
			break
		}
	}
	if l.core == nil {
		return nil
	}
	return s.drive(l)
}
