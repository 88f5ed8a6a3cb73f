// Package agenttest runs a PostgreSQL server with the tashkent extension
// and a stand-in for its agent, for tests of the extension itself: what a
// backend captures, certifies and commits. The stand-in decides every
// certification with a function the test gives (by default: commit, with
// the next version) and records what it was asked. It applies nothing:
// tests of the whole path use the real agent. It answers a Sync
// (tashkent.sync_wait) with a function the test gives (by default: the
// last version it decided), and a StateQuery (tashkent.txn_state) with
// one too (by default: unknown). It accepts the server's durability feed
// and sends it the durable versions the test gives (SetDurable).
package agenttest

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// Request is one certification a backend asked for, with the stand-in's
// answer.
type Request struct {
	PID          int32
	StartVersion uint64
	Writeset     *pb.Writeset
	Decision     wire.Decision
}

// Decide answers a request. Version is the next free version (the stand-in
// counts committed versions from the replica's version at start).
type Decide func(r Request, next uint64) wire.Decision

// Agent is the stand-in.
type Agent struct {
	t      testing.TB
	ln     net.Listener
	Socket string
	Server *pgserver.Server

	mu         sync.Mutex
	decide     Decide
	next       uint64
	requests   []Request
	abandoned  []uint64
	applierPID int32
	// welcomeDelay holds back the answer to a hello, as an agent that is
	// slow to answer.
	welcomeDelay time.Duration
	sync         func(m wire.Sync) wire.Synced
	syncs        []wire.Sync
	state        func(q wire.StateQuery) wire.StateAnswer
	stateQueries []wire.StateQuery
	// feeds are the durability feeds' connections, with their pids;
	// durable, if set, is sent to each.
	feeds   map[net.Conn]int32
	durable *uint64
}

// Start starts a server with the extension, installs it in database
// postgres, opens the admission gate, and serves the agent's socket. opts
// are pgtest's.
func Start(t testing.TB, opts ...pgtest.Option) *Agent {
	t.Helper()
	dir, err := os.MkdirTemp("", "tashkent-agenttest-") // the postgres user must reach the socket
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a := &Agent{t: t, Socket: filepath.Join(dir, "agent.sock"), next: 1, feeds: map[net.Conn]int32{}}
	a.decide = func(r Request, next uint64) wire.Decision { return wire.Decision{Kind: wire.Commit, Version: next} }
	if a.ln, err = net.Listen("unix", a.Socket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.ln.Close() })
	if err := os.Chmod(a.Socket, 0o777); err != nil { // the server runs as postgres
		t.Fatal(err)
	}
	go a.accept()
	opts = append(opts, pgtest.WithTashkent(), pgtest.WithSettings(map[string]string{"tashkent.agent_socket": a.Socket}))
	a.Server = pgtest.Start(t, opts...)
	c := a.Connect("postgres")
	ctx := context.Background()
	if _, err := c.Exec(ctx, `CREATE EXTENSION tashkent`); err != nil {
		t.Fatalf("agenttest: %v", err)
	}
	if _, err := c.Exec(ctx, `SELECT tashkent.set_admitting(true, '')`); err != nil {
		t.Fatalf("agenttest: %v", err)
	}
	return a
}

// Connect opens a connection to db as the postgres superuser, closed when
// the test ends.
func (a *Agent) Connect(db string) *pgx.Conn { return pgtest.Connect(a.t, a.Server, db) }

// SetDecide replaces the decision function.
func (a *Agent) SetDecide(d Decide) {
	a.mu.Lock()
	a.decide = d
	a.mu.Unlock()
}

// Requests returns the certifications asked so far, in order.
func (a *Agent) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.requests...)
}

// Abandoned returns the versions backends said they will not commit.
func (a *Agent) Abandoned() []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]uint64(nil), a.abandoned...)
}

// RegisterApplier makes c the applier (tashkent.register_applier), whose
// transactions commit versions with tashkent.apply_versions.
func (a *Agent) RegisterApplier(c *pgx.Conn) {
	a.t.Helper()
	a.mu.Lock()
	a.applierPID = int32(c.PgConn().PID())
	a.mu.Unlock()
	if _, err := c.Exec(context.Background(), `SELECT tashkent.register_applier()`); err != nil {
		a.t.Fatalf("agenttest: %v", err)
	}
}

// SetSync replaces the answer to a Sync.
func (a *Agent) SetSync(f func(m wire.Sync) wire.Synced) {
	a.mu.Lock()
	a.sync = f
	a.mu.Unlock()
}

// Syncs returns the Syncs asked so far, in order.
func (a *Agent) Syncs() []wire.Sync {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]wire.Sync(nil), a.syncs...)
}

// SetState replaces the answer to a StateQuery; f may sleep, as a
// stalled agent would.
func (a *Agent) SetState(f func(q wire.StateQuery) wire.StateAnswer) {
	a.mu.Lock()
	a.state = f
	a.mu.Unlock()
}

// StateQueries returns the StateQueries asked so far, in order.
func (a *Agent) StateQueries() []wire.StateQuery {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]wire.StateQuery(nil), a.stateQueries...)
}

// SetDurable sends v to every durability feed connected, and to those
// that connect later, as the agent does at each advance (v may be lower
// than before: the extension keeps the highest).
func (a *Agent) SetDurable(v uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.durable = &v
	for c := range a.feeds {
		c.Write(wire.Encode(wire.Durable{Version: v}))
	}
}

// Feeds is how many durability feeds are connected.
func (a *Agent) Feeds() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.feeds)
}

// FeedPIDs are the pids the connected durability feeds said hello with.
func (a *Agent) FeedPIDs() []int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	pids := make([]int32, 0, len(a.feeds))
	for _, pid := range a.feeds {
		pids = append(pids, pid)
	}
	return pids
}

// SetWelcomeDelay makes the stand-in wait d before it answers a hello.
func (a *Agent) SetWelcomeDelay(d time.Duration) {
	a.mu.Lock()
	a.welcomeDelay = d
	a.mu.Unlock()
}

// SetNext sets the version the next commit decision gets.
func (a *Agent) SetNext(v uint64) {
	a.mu.Lock()
	a.next = v
	a.mu.Unlock()
}

func (a *Agent) accept() {
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		go a.serve(c)
	}
}

func (a *Agent) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	var pid int32
	for {
		typ, p, err := wire.ReadFrame(r, wire.FrameBytesMax)
		if err != nil {
			return
		}
		m, err := wire.Decode(typ, p)
		if err != nil {
			a.t.Errorf("agenttest: %v", err)
			return
		}
		switch m := m.(type) {
		case wire.Hello:
			pid = m.PID
			if m.Role == wire.RoleFeed {
				a.feed(c, m.PID)
				continue
			}
			a.mu.Lock()
			ok := m.Role == wire.RoleSession || m.PID == a.applierPID
			delay := a.welcomeDelay
			a.mu.Unlock()
			time.Sleep(delay)
			c.Write(wire.Encode(wire.Welcome{Accepted: ok, Generation: 1, Text: "not the agent's apply connection"}))
		case wire.Certify:
			var ws pb.Writeset
			if err := proto.Unmarshal(m.Writeset, &ws); err != nil {
				a.t.Errorf("agenttest: the backend sent a writeset that does not decode: %v", err)
				return
			}
			req := Request{PID: pid, StartVersion: m.StartVersion, Writeset: &ws}
			a.mu.Lock()
			d := a.decide(req, a.next)
			if d.Kind == wire.Commit {
				a.next = d.Version + 1
			}
			req.Decision = d
			a.requests = append(a.requests, req)
			a.mu.Unlock()
			c.Write(wire.Encode(d))
		case wire.Abandon:
			a.mu.Lock()
			a.abandoned = append(a.abandoned, m.Version)
			a.mu.Unlock()
		case wire.Sync:
			a.mu.Lock()
			a.syncs = append(a.syncs, m)
			answer := wire.Synced{Known: true, Version: a.next - 1}
			if a.sync != nil {
				answer = a.sync(m)
			}
			a.mu.Unlock()
			c.Write(wire.Encode(answer))
		case wire.StateQuery:
			a.mu.Lock()
			a.stateQueries = append(a.stateQueries, m)
			state := a.state
			a.mu.Unlock()
			answer := wire.StateAnswer{State: wire.StateUnknown}
			if state != nil {
				answer = state(m) // unlocked: it may take its time
			}
			c.Write(wire.Encode(answer))
		}
	}
}

// feed welcomes a durability feed, sends it the durable version if one
// was set, and keeps it until its connection closes.
func (a *Agent) feed(c net.Conn, pid int32) {
	a.mu.Lock()
	c.Write(wire.Encode(wire.Welcome{Accepted: true}))
	if a.durable != nil {
		c.Write(wire.Encode(wire.Durable{Version: *a.durable}))
	}
	a.feeds[c] = pid
	a.mu.Unlock()
	c.Read(make([]byte, 1)) // the feed sends nothing more: returns at the close
	a.mu.Lock()
	delete(a.feeds, c)
	a.mu.Unlock()
}
