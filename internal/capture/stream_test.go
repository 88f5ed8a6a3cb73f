package capture_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/agent/agenttest"
	"github.com/tashkent-db/tashkent/internal/agent/wire"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// fragmentBytesMax is FRAGMENT_BYTES in extension/src/stream.c.
const fragmentBytesMax = 4 << 20

// streamed is one streamed writeset a backend sent: its 'F' frames and
// its 'W' frame, with the stand-in's answer.
type streamed struct {
	fragments    [][]byte
	startVersion uint64
	count        uint32 // 'W': fragments
	bytes        uint64 // 'W': their total size
	certified    *pb.Writeset
	decision     wire.Decision
}

// streamAgent stands in for the agent where a backend streams its
// writeset: it reads 'F' and 'W' frames (channel.c) besides 'C', and
// answers a commit of n fragments with the next n versions, the last one
// in the decision.
type streamAgent struct {
	t      *testing.T
	socket string

	mu      sync.Mutex
	next    uint64
	abort   bool // answer the next streamed writeset with a conflict
	certify [][]byte
	streams []streamed
	// stall, when set, is closed at the next 'F'; the stand-in then reads
	// nothing until release is closed, and closes broken when the
	// connection ends before 'W'.
	stall, release, broken chan struct{}
}

// startStreamed starts a server with the extension (agenttest), points it
// at a streamAgent, runs schema, and returns a fixture whose connection
// streams past a threshold of 64 kB.
func startStreamed(t *testing.T, schema ...string) (*fixture, *streamAgent) {
	t.Helper()
	a := agenttest.Start(t)
	sa := &streamAgent{t: t}
	sa.listen()
	setup := a.Connect("postgres")
	ctx := context.Background()
	for _, sql := range []string{`ALTER SYSTEM SET tashkent.agent_socket = '` + sa.socket + `'`, `SELECT pg_reload_conf()`} {
		if _, err := setup.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{t: t, agent: a, conn: a.Connect("postgres")}
	deadline := time.Now().Add(10 * time.Second)
	for f.query(f.conn, `SHOW tashkent.agent_socket`)[0] != sa.socket {
		if time.Now().After(deadline) {
			t.Fatal("the server did not take the new tashkent.agent_socket")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var committed uint64
	if err := f.conn.QueryRow(ctx, `SELECT tashkent.committed_version()`).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	sa.next = committed + 1
	for _, sql := range schema {
		f.exec(f.conn, sql)
	}
	f.exec(f.conn, `SET tashkent.stream_threshold = '64kB'`)
	return f, sa
}

func (sa *streamAgent) listen() {
	dir, err := os.MkdirTemp("", "tashkent-stream-") // the postgres user must reach the socket
	if err != nil {
		sa.t.Fatal(err)
	}
	sa.t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		sa.t.Fatal(err)
	}
	sa.socket = filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sa.socket)
	if err != nil {
		sa.t.Fatal(err)
	}
	sa.t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(sa.socket, 0o777); err != nil {
		sa.t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sa.serve(c)
		}
	}()
}

func (sa *streamAgent) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	var fragments [][]byte
	for {
		typ, p, err := wire.ReadFrame(r, wire.FrameBytesMax)
		if err != nil {
			return
		}
		switch typ {
		case 'H':
			c.Write(wire.Encode(wire.Welcome{Accepted: true, Generation: 1}))
		case 'C':
			m, err := wire.Decode(typ, p)
			if err != nil {
				sa.t.Errorf("stream agent: %v", err)
				return
			}
			sa.mu.Lock()
			sa.certify = append(sa.certify, m.(wire.Certify).Writeset)
			d := wire.Decision{Kind: wire.Commit, Version: sa.next}
			sa.next++
			sa.mu.Unlock()
			c.Write(wire.Encode(d))
		case 'F':
			fragments = append(fragments, p)
			sa.mu.Lock()
			stall, release, broken := sa.stall, sa.release, sa.broken
			sa.stall = nil
			sa.mu.Unlock()
			if stall != nil {
				close(stall)
				<-release
				defer close(broken)
			}
		case 'W':
			s, err := parseStreamed(p, fragments)
			fragments = nil
			if err != nil {
				sa.t.Errorf("stream agent: %v", err)
				return
			}
			c.Write(wire.Encode(sa.decide(s)))
		default:
			sa.t.Errorf("stream agent: unexpected frame %q", typ)
			return
		}
	}
}

// parseStreamed reads a 'W' payload: u64 start version, u32 fragments,
// u64 bytes, the certified writeset.
func parseStreamed(p []byte, fragments [][]byte) (streamed, error) {
	s := streamed{fragments: fragments, certified: &pb.Writeset{}}
	if len(p) < 20 {
		return s, fmt.Errorf("'W' of %d bytes", len(p))
	}
	s.startVersion = binary.BigEndian.Uint64(p)
	s.count = binary.BigEndian.Uint32(p[8:])
	s.bytes = binary.BigEndian.Uint64(p[12:])
	if err := proto.Unmarshal(p[20:], s.certified); err != nil {
		return s, fmt.Errorf("the certified writeset does not decode: %v", err)
	}
	return s, nil
}

func (sa *streamAgent) decide(s streamed) wire.Decision {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	s.decision = wire.Decision{Kind: wire.Commit, Version: sa.next + uint64(s.count) - 1}
	if sa.abort {
		sa.abort = false
		s.decision = wire.Decision{Kind: wire.Abort, AbortReason: uint8(pb.AbortReason_ABORT_REASON_CONFLICT), Detail: "a conflict"}
	} else {
		sa.next += uint64(s.count)
	}
	sa.streams = append(sa.streams, s)
	return s.decision
}

// sent runs sql and returns the 'C' writesets and the streamed writesets
// the backend sent meanwhile.
func (sa *streamAgent) sent(f *fixture, sql string) ([][]byte, []streamed) {
	sa.t.Helper()
	sa.mu.Lock()
	c, s := len(sa.certify), len(sa.streams)
	sa.mu.Unlock()
	f.exec(f.conn, sql)
	sa.mu.Lock()
	defer sa.mu.Unlock()
	return slices.Clone(sa.certify[c:]), slices.Clone(sa.streams[s:])
}

// decodeFragments decodes each fragment as a Writeset.
func decodeFragments(t *testing.T, s streamed) []*pb.Writeset {
	t.Helper()
	var out []*pb.Writeset
	for i, frag := range s.fragments {
		var ws pb.Writeset
		if err := proto.Unmarshal(frag, &ws); err != nil {
			t.Fatalf("fragment %d does not decode: %v", i, err)
		}
		out = append(out, &ws)
	}
	return out
}

// cutFragments is stream.c's cut, as a model: whole changes, at most
// fragmentBytesMax a fragment (one larger change alone), and a keyless
// table's OP_DELETE_ROW never after an OP_INSERT_ROW of its table.
func cutFragments(changes []*pb.Change) [][]*pb.Change {
	var out [][]*pb.Change
	var cur []*pb.Change
	size := 0
	inserted := map[string]bool{}
	for _, c := range changes {
		n := protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(c))
		if len(cur) > 0 && (size+n > fragmentBytesMax || c.GetOp() == pb.Op_OP_DELETE_ROW && inserted[c.GetTable()]) {
			out = append(out, cur)
			cur, size, inserted = nil, 0, map[string]bool{}
		}
		cur = append(cur, c)
		size += n
		if c.GetOp() == pb.Op_OP_INSERT_ROW {
			inserted[c.GetTable()] = true
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// renderChanges renders changes as render renders a writeset.
func renderChanges(changes []*pb.Change) []string {
	return render(&pb.Writeset{Changes: changes})
}

// parseChange reads a rendered change back: "OP table [key] row" is
// enough for the changes the tests expect (keys without spaces).
func parseChange(t *testing.T, s string) *pb.Change {
	t.Helper()
	parts := strings.SplitN(s, " ", 3)
	c := &pb.Change{Op: pb.Op(pb.Op_value["OP_"+parts[0]]), Table: parts[1]}
	rest := ""
	if len(parts) == 3 {
		rest = parts[2]
	}
	switch c.Op {
	case pb.Op_OP_UPSERT:
		key, row, _ := strings.Cut(rest, " ")
		c.Key, c.Row = []byte(key), []byte(row)
	case pb.Op_OP_DELETE, pb.Op_OP_DELETE_ROW:
		c.Key = []byte(rest)
	case pb.Op_OP_INSERT_ROW:
		c.Row = []byte(rest)
	case pb.Op_OP_TRUNCATE:
	default:
		t.Fatalf("parseChange: %q", s)
	}
	return c
}

// A transaction past tashkent.stream_threshold streams its writeset: its
// changes, uncollapsed, in apply order (each statement's deletes before
// its upserts), without its savepoint that rolled back, cut into
// fragments; certified on the tables it wrote, referenced and truncated,
// and its DDL. A commit is a span of versions, one per fragment, and the
// replica's version moves to its last; the fragments applied one after
// the other on another server give the same rows.
func TestStreamedWriteset(t *testing.T) {
	schema := []string{
		`CREATE TABLE k (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text)`,
		`CREATE TABLE u (id int PRIMARY KEY, code int UNIQUE)`,
		`CREATE TABLE p (id int PRIMARY KEY)`,
		`CREATE TABLE c (id int PRIMARY KEY, pid int REFERENCES p)`,
		`CREATE TABLE nk (a int, b text)`,
		`CREATE TABLE tr (id int PRIMARY KEY)`,
		`CREATE TABLE sp (id int PRIMARY KEY)`,
	}
	f, sa := startStreamed(t, schema...)

	// Small transactions still send one writeset ('C'), under the low
	// threshold too.
	var entries []*pb.LogEntry
	for _, sql := range []string{
		`INSERT INTO k VALUES (1, 'a'), (2, 'b')`,
		`INSERT INTO p VALUES (1)`,
		`INSERT INTO nk VALUES (1, 'x')`,
		`INSERT INTO tr VALUES (1)`,
	} {
		c, s := sa.sent(f, sql)
		if len(c) != 1 || len(s) != 0 {
			t.Fatalf("%s: sent %d writesets and %d streamed ones, want 1 writeset", sql, len(c), len(s))
		}
		var ws pb.Writeset
		if err := proto.Unmarshal(c[0], &ws); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, &pb.LogEntry{Version: uint64(len(entries) + 1), Writeset: &ws})
	}

	var committed uint64
	if err := f.conn.QueryRow(context.Background(), `SELECT tashkent.committed_version()`).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	const rows = 4500 // of about 1 kB: more than one fragment
	c, ss := sa.sent(f, fmt.Sprintf(`BEGIN;
		INSERT INTO k SELECT g, repeat('x', 1000) FROM generate_series(10, %d) AS g;
		UPDATE k SET id = 3 - id WHERE id <= 2;
		DELETE FROM k WHERE id BETWEEN 10 AND 12;
		INSERT INTO nk VALUES (3, 'w');
		UPDATE nk SET b = 'v' WHERE a = 3;
		UPDATE nk SET b = 'y' WHERE a = 1;
		INSERT INTO u VALUES (1, 100);
		INSERT INTO c VALUES (1, 1);
		TRUNCATE tr;
		SAVEPOINT s; INSERT INTO sp VALUES (1); DELETE FROM k WHERE id = 20; ROLLBACK TO s;
		INSERT INTO tr VALUES (2);
		CREATE TABLE d (id int PRIMARY KEY);
		INSERT INTO d VALUES (1);
		COMMIT`, rows+9))
	if len(c) != 0 || len(ss) != 1 {
		t.Fatalf("sent %d writesets and %d streamed ones, want 1 streamed", len(c), len(ss))
	}
	s := ss[0]

	var want []string
	for g := 10; g < 10+rows; g++ {
		want = append(want, fmt.Sprintf("UPSERT public.k [%d] (%d,%s)", g, g, strings.Repeat("x", 1000)))
	}
	want = append(want,
		`DELETE public.k [1]`, `DELETE public.k [2]`, `UPSERT public.k [2] (2,a)`, `UPSERT public.k [1] (1,b)`,
		`DELETE public.k [10]`, `DELETE public.k [11]`, `DELETE public.k [12]`,
		`INSERT_ROW public.nk (3,w)`,
		`DELETE_ROW public.nk (3,w)`, `INSERT_ROW public.nk (3,v)`,
		`DELETE_ROW public.nk (1,x)`, `INSERT_ROW public.nk (1,y)`,
		`UPSERT public.u [1] (1,100)`,
		`UPSERT public.c [1] (1,1)`,
		`TRUNCATE public.tr`,
		`UPSERT public.tr [2] (2)`)
	var wantChanges []*pb.Change
	for _, w := range want {
		wantChanges = append(wantChanges, parseChange(t, w))
	}
	// DDL and what follows it: the DDL's text is checked apart.
	var ddl *pb.Change
	fragments := decodeFragments(t, s)
	var got []*pb.Change
	for _, ws := range fragments {
		got = append(got, ws.GetChanges()...)
	}
	if n := len(got); n < 2 || got[n-2].GetOp() != pb.Op_OP_DDL || !strings.HasPrefix(string(got[n-2].GetRow()), "CREATE TABLE d ") {
		t.Fatalf("the last changes are %q, want the DDL and the insert after it", renderChanges(got[max(0, len(got)-2):]))
	}
	ddl = got[len(got)-2]
	wantChanges = append(wantChanges, ddl, parseChange(t, `UPSERT public.d [1] (1)`))
	if g, w := renderChanges(got), renderChanges(wantChanges); !slices.Equal(g, w) {
		t.Errorf("streamed changes differ (got %d, want %d):\n%s", len(g), len(w), firstDifference(g, w))
	}

	// Fragments: cut as the model cuts, and counted as 'W' says.
	wantFragments := cutFragments(wantChanges)
	if len(fragments) != len(wantFragments) {
		t.Errorf("%d fragments, want %d", len(fragments), len(wantFragments))
	} else {
		for i := range fragments {
			if g, w := render(fragments[i]), renderChanges(wantFragments[i]); !slices.Equal(g, w) {
				t.Errorf("fragment %d differs:\n%s", i, firstDifference(g, w))
			}
		}
	}
	var bytes uint64
	for _, frag := range s.fragments {
		if len(frag) > fragmentBytesMax {
			t.Errorf("a fragment of %d bytes", len(frag))
		}
		bytes += uint64(len(frag))
	}
	if s.count != uint32(len(s.fragments)) || s.bytes != bytes {
		t.Errorf("'W' says %d fragments of %d bytes; sent %d of %d", s.count, s.bytes, len(s.fragments), bytes)
	}

	// Certified on tables, each once, and on its DDL; never on sp, written
	// only by the savepoint that rolled back.
	wantCertified := []string{
		`TABLE_WRITE public.k`, `TABLE_WRITE public.nk`, `TABLE_WRITE public.u`, `TABLE_WRITE public.c`,
		`TABLE_WRITE public.p`, `TABLE_WRITE public.tr`, `TABLE_WRITE public.d`,
		`TRUNCATE public.tr`,
		render(&pb.Writeset{Changes: []*pb.Change{ddl}})[0],
	}
	if g := render(s.certified); !slices.Equal(g, wantCertified) {
		t.Errorf("certified on\n %s\nwant\n %s", strings.Join(g, "\n "), strings.Join(wantCertified, "\n "))
	}

	// The span: the replica's version moved to its last version.
	if s.decision.Version != committed+uint64(s.count) {
		t.Errorf("committed as version %d, want %d", s.decision.Version, committed+uint64(s.count))
	}
	if got := f.query(f.conn, `SELECT tashkent.committed_version()::text`)[0]; got != fmt.Sprint(s.decision.Version) {
		t.Errorf("the replica's version is %s after the span up to %d", got, s.decision.Version)
	}

	// Applied fragment after fragment elsewhere: the same rows.
	for _, ws := range fragments {
		entries = append(entries, &pb.LogEntry{Version: uint64(len(entries) + 1), Writeset: ws})
	}
	b := applyTarget(t, schema...)
	applyAll(t, b, entries)
	f.sameRows(b, "k", "u", "p", "c", "nk", "tr", "sp", "d")
}

// firstDifference shows where two renderings first differ.
func firstDifference(got, want []string) string {
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			return fmt.Sprintf(" at %d:\n  got  %.120q\n  want %.120q", i, g, w)
		}
	}
	return " (equal)"
}

// Savepoints around the switch to streaming, a transaction whose streamed
// changes all rolled back, the row limit, and a streamed writeset that
// loses certification.
func TestStreamedSavepointsAndLimits(t *testing.T) {
	f, sa := startStreamed(t, `CREATE TABLE k (id int PRIMARY KEY, v text)`)
	big := `INSERT INTO k SELECT g, repeat('y', 200) FROM generate_series(8000, 8999) AS g`

	// The savepoint was taken before the switch, in the list of events; its
	// rollback cuts the stream back to its place there.
	c, ss := sa.sent(f, `BEGIN; INSERT INTO k VALUES (7000, 'kept'); SAVEPOINT a; `+big+`; ROLLBACK TO a;
		INSERT INTO k VALUES (7001, 'after'); COMMIT`)
	if len(c) != 0 || len(ss) != 1 {
		t.Fatalf("sent %d writesets and %d streamed ones, want 1 streamed", len(c), len(ss))
	}
	var got []string
	for _, ws := range decodeFragments(t, ss[0]) {
		got = append(got, render(ws)...)
	}
	if want := []string{`UPSERT public.k [7000] (7000,kept)`, `UPSERT public.k [7001] (7001,after)`}; !slices.Equal(got, want) {
		t.Errorf("streamed %q, want %q", got, want)
	}
	if got, want := render(ss[0].certified), []string{`TABLE_WRITE public.k`}; !slices.Equal(got, want) {
		t.Errorf("certified on %q, want %q", got, want)
	}

	// Every streamed change rolled back: nothing to send.
	if c, ss := sa.sent(f, `BEGIN; SAVEPOINT a; `+big+`; ROLLBACK TO a; COMMIT`); len(c)+len(ss) != 0 {
		t.Errorf("a transaction whose changes rolled back sent %d writesets and %d streamed ones", len(c), len(ss))
	}

	// Nested savepoints after the switch: the inner rollback keeps the
	// outer part.
	c, ss = sa.sent(f, `BEGIN; `+big+`; SAVEPOINT a; INSERT INTO k VALUES (1, 'a'); SAVEPOINT b;
		DELETE FROM k WHERE id = 8000; ROLLBACK TO b; RELEASE a; COMMIT`)
	if len(c) != 0 || len(ss) != 1 {
		t.Fatalf("sent %d writesets and %d streamed ones, want 1 streamed", len(c), len(ss))
	}
	got = nil
	for _, ws := range decodeFragments(t, ss[0]) {
		got = append(got, render(ws)...)
	}
	if len(got) != 1001 || got[1000] != `UPSERT public.k [1] (1,a)` {
		t.Errorf("streamed %d changes ending %q, want the 1000 inserts and the savepoint's", len(got), got[len(got)-1])
	}

	// The row limit holds for a streamed transaction: 54000, nothing sent.
	f.exec(f.conn, `SET tashkent.writeset_max_rows = 1500`)
	before := len(sa.streams)
	_, err := f.conn.Exec(context.Background(), `INSERT INTO k SELECT g, 'z' FROM generate_series(20000, 22000) AS g`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != pgcode.ProgramLimitExceeded || !strings.Contains(pe.Message, "tashkent.writeset_max_rows") {
		t.Errorf("past the row limit: %v, want SQLSTATE %s naming tashkent.writeset_max_rows", err, pgcode.ProgramLimitExceeded)
	}
	f.exec(f.conn, `RESET tashkent.writeset_max_rows`)

	// A temporary file that could not be written (temp_file_limit: 53400)
	// leaves the stream incomplete: a rollback to a savepoint does not
	// repair it, and the commit fails (25000), nothing sent.
	f.exec(f.conn, `SET temp_file_limit = '1MB'; BEGIN; INSERT INTO k VALUES (30000, 'a'); SAVEPOINT a`)
	_, err = f.conn.Exec(context.Background(), `INSERT INTO k SELECT g, repeat('t', 1000) FROM generate_series(30001, 36000) AS g`)
	if !errors.As(err, &pe) || pe.Code != pgcode.ConfigurationLimitExceeded {
		t.Errorf("past temp_file_limit: %v, want SQLSTATE %s", err, pgcode.ConfigurationLimitExceeded)
	}
	c, ss = sa.sent(f, `ROLLBACK TO a; INSERT INTO k VALUES (30001, 'b')`)
	_, err = f.conn.Exec(context.Background(), `COMMIT`)
	if !errors.As(err, &pe) || pe.Code != pgcode.InvalidTransactionState {
		t.Errorf("the commit after a failed write of the stream: %v, want SQLSTATE %s", err, pgcode.InvalidTransactionState)
	}
	if len(c)+len(ss) != 0 || len(sa.streams) != before {
		t.Errorf("a transaction whose stream failed to be written was sent")
	}
	f.exec(f.conn, `RESET temp_file_limit`)
	if got := f.query(f.conn, `SELECT count(*)::text FROM k WHERE id >= 30000`)[0]; got != "0" {
		t.Errorf("%s rows of the failed transaction", got)
	}

	// Refused: 40001, the replica's version unchanged.
	version := f.query(f.conn, `SELECT tashkent.committed_version()::text`)[0]
	sa.mu.Lock()
	sa.abort = true
	sa.mu.Unlock()
	_, err = f.conn.Exec(context.Background(), `UPDATE k SET v = 'refused' WHERE id >= 8000`)
	if !errors.As(err, &pe) || pe.Code != pgcode.SerializationFailure {
		t.Errorf("a refused streamed writeset: %v, want SQLSTATE %s", err, pgcode.SerializationFailure)
	}
	if got := f.query(f.conn, `SELECT tashkent.committed_version()::text`)[0]; got != version {
		t.Errorf("the replica's version moved from %s to %s", version, got)
	}
	if got := f.query(f.conn, `SELECT count(*)::text FROM k WHERE v = 'refused'`)[0]; got != "0" {
		t.Errorf("%s rows of a refused transaction", got)
	}
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if len(sa.streams) != before+1 {
		t.Errorf("%d streamed writesets, want %d (the refused one)", len(sa.streams), before+1)
	}
}

// Statements nested in a trigger, in a streamed transaction: an upsert
// captured after the nested statement that overwrote it is left out, so
// the stream, applied in order, leaves the rows the table holds (as
// TestNestedStatements checks of a collapsed writeset). A delete that a
// nested statement undid is not settled in a stream (stream.c); that
// case is not here.
func TestStreamedNestedStatements(t *testing.T) {
	schema := append([]string{`CREATE TABLE k (id int PRIMARY KEY, v text)`}, nestedSchema...)
	f, sa := startStreamed(t, schema...)
	var entries []*pb.LogEntry
	log := func(c [][]byte, ss []streamed) {
		for _, b := range c {
			var ws pb.Writeset
			if err := proto.Unmarshal(b, &ws); err != nil {
				t.Fatal(err)
			}
			entries = append(entries, &pb.LogEntry{Version: uint64(len(entries) + 1), Writeset: &ws})
		}
		for _, s := range ss {
			for _, ws := range decodeFragments(t, s) {
				entries = append(entries, &pb.LogEntry{Version: uint64(len(entries) + 1), Writeset: ws})
			}
		}
	}
	big := 0
	for _, c := range []struct {
		name, setup, sql string
		want             []string // the stream after the bulk insert; nil: not checked
	}{
		{"inner delete fired first", `INSERT INTO n VALUES (1, 1)`, `UPDATE n SET v = 99 WHERE id = 1`,
			[]string{`DELETE public.n [1]`}},
		{"inner delete fired last", `INSERT INTO n VALUES (2, 1)`, `UPDATE n SET v = 98 WHERE id = 2`,
			[]string{`UPSERT public.n [2] (2,98) keeps`, `DELETE public.n [2]`}},
		{"inner update fired first", `INSERT INTO n VALUES (3, 1)`, `UPDATE n SET v = 11 WHERE id = 3`,
			[]string{`UPSERT public.n [3] (3,1011) keeps`}},
		{"inner update fired last", `INSERT INTO n VALUES (4, 1)`, `UPDATE n SET v = 21 WHERE id = 4`,
			[]string{`UPSERT public.n [4] (4,21) keeps`, `UPSERT public.n [4] (4,1021) keeps`}},
		{"outer statement in a transaction with others", `INSERT INTO n VALUES (6, 1)`,
			`UPDATE n SET v = 2 WHERE id = 6; UPDATE n SET v = 11 WHERE id = 6; UPDATE n SET v = 3000 WHERE id = 6`, nil},
		{"two levels", `INSERT INTO n VALUES (8, 1)`, `UPDATE n SET v = 12 WHERE id = 8; UPDATE n SET v = 99 WHERE id = 8`,
			[]string{`UPSERT public.n [8] (8,1012) keeps`, `DELETE public.n [8]`}},
		{"before trigger's delete", `INSERT INTO ub VALUES (1, 1)`, `INSERT INTO ub VALUES (1, 2)`,
			[]string{`DELETE public.ub [1]`, `UPSERT public.ub [1] (1,2)`}},
		{"before trigger's delete in a transaction", `INSERT INTO ub VALUES (2, 1)`,
			`UPDATE ub SET v = 5 WHERE id = 2; INSERT INTO ub VALUES (2, 3); UPDATE ub SET v = v + 1 WHERE id = 2`, nil},
		{"function in a statement", `INSERT INTO n VALUES (9, 3)`, `SELECT touch(9); UPDATE n SET v = 17 WHERE id = 9 RETURNING touch(id)`, nil},
	} {
		log(sa.sent(f, c.setup))
		bulk := fmt.Sprintf(`INSERT INTO k SELECT g, repeat('k', 300) FROM generate_series(%d, %d) AS g`, big, big+299)
		big += 300
		cs, ss := sa.sent(f, `BEGIN; `+bulk+`; `+c.sql+`; COMMIT`)
		if len(cs) != 0 || len(ss) != 1 {
			t.Fatalf("%s: sent %d writesets and %d streamed ones, want 1 streamed", c.name, len(cs), len(ss))
		}
		log(cs, ss)
		var got []string
		for _, ws := range decodeFragments(t, ss[0]) {
			got = append(got, render(ws)...)
		}
		if len(got) < 300 {
			t.Fatalf("%s: %d changes streamed", c.name, len(got))
		}
		if c.want != nil && !slices.Equal(got[300:], c.want) {
			t.Errorf("%s: streamed %q, want %q", c.name, got[300:], c.want)
		}
	}
	b := applyTarget(t, schema...)
	applyAll(t, b, entries)
	f.sameRows(b, "n", "ub")
}

// A statement whose changes outgrow the run's memory (4 MiB) spools its
// deletes and its upserts apart: a permutation of every key still streams
// every delete before every upsert, and applies. The temporary files are
// gone once the transactions end.
func TestStreamedLargeStatement(t *testing.T) {
	schema := []string{`CREATE TABLE k (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED, v text)`}
	f, sa := startStreamed(t, schema...)
	const rows = 4500 // of about 1 kB
	var entries []*pb.LogEntry
	var fragments [][]*pb.Change
	for _, sql := range []string{
		fmt.Sprintf(`INSERT INTO k SELECT g, g || repeat('x', 1000) FROM generate_series(1, %d) AS g`, rows),
		fmt.Sprintf(`UPDATE k SET id = %d - id`, rows+1),
	} {
		c, ss := sa.sent(f, sql)
		if len(c) != 0 || len(ss) != 1 {
			t.Fatalf("%s: sent %d writesets and %d streamed ones, want 1 streamed", sql, len(c), len(ss))
		}
		fragments = nil
		for _, ws := range decodeFragments(t, ss[0]) {
			entries = append(entries, &pb.LogEntry{Version: uint64(len(entries) + 1), Writeset: ws})
			fragments = append(fragments, ws.GetChanges())
		}
	}
	var got []*pb.Change
	for _, fr := range fragments {
		got = append(got, fr...)
	}
	if len(got) != 2*rows {
		t.Fatalf("the update streamed %d changes, want %d", len(got), 2*rows)
	}
	for i, c := range got {
		want := pb.Op_OP_DELETE
		if i >= rows {
			want = pb.Op_OP_UPSERT
		}
		if c.GetOp() != want {
			t.Fatalf("change %d is %s, want every delete before every upsert", i, c.GetOp())
		}
	}
	if g, w := len(fragments), len(cutFragments(got)); g != w || g < 2 {
		t.Errorf("%d fragments, want %d (more than one)", g, w)
	}
	if n := f.query(f.conn, `SELECT count(*)::text FROM pg_ls_tmpdir()`)[0]; n != "0" {
		t.Errorf("%s temporary files left", n)
	}
	b := applyTarget(t, schema...)
	applyAll(t, b, entries)
	const digest = `SELECT count(*) || ' rows, md5 ' || md5(string_agg(k::text, ',' ORDER BY id)) FROM k`
	if here, there := f.query(f.conn, digest)[0], f.query(b, digest)[0]; here != there {
		t.Errorf("after apply: %s there, %s here", there, here)
	}
}

// A cancel while the fragments are sent ends the transaction (57014:
// nothing was certified), and the backend closes its connection to the
// agent, which drops what it staged.
func TestStreamedCancelWhileSending(t *testing.T) {
	f, sa := startStreamed(t, `CREATE TABLE k (id int PRIMARY KEY, v text)`)
	stall, release, broken := make(chan struct{}), make(chan struct{}), make(chan struct{})
	sa.mu.Lock()
	sa.stall, sa.release, sa.broken = stall, release, broken
	sa.mu.Unlock()
	version := f.query(f.conn, `SELECT tashkent.committed_version()::text`)[0]
	pid := f.conn.PgConn().PID()
	done := make(chan error, 1)
	go func() {
		// More than the socket holds: the backend waits to send.
		_, err := f.conn.Exec(context.Background(), `INSERT INTO k SELECT g, repeat('c', 1000) FROM generate_series(1, 10000) AS g`)
		done <- err
	}()
	select {
	case <-stall:
	case <-time.After(30 * time.Second):
		t.Fatal("no fragment arrived")
	}
	other := f.agent.Connect("postgres")
	var cancelled bool
	// The backend is in its wait for the socket once the fragments fill it.
	for deadline := time.Now().Add(10 * time.Second); !cancelled && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var waiting bool
		if err := other.QueryRow(context.Background(), `SELECT wait_event IS NOT NULL AND state = 'active' FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			if err := other.QueryRow(context.Background(), `SELECT pg_cancel_backend($1)`, pid).Scan(&cancelled); err != nil {
				t.Fatal(err)
			}
		}
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the cancelled transaction did not end")
	}
	close(release)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != pgcode.QueryCanceled {
		t.Errorf("a cancel while the fragments were sent: %v, want SQLSTATE %s", err, pgcode.QueryCanceled)
	}
	select {
	case <-broken:
	case <-time.After(10 * time.Second):
		t.Error("the backend did not close its connection to the agent")
	}
	if got := f.query(f.conn, `SELECT tashkent.committed_version()::text`)[0]; got != version {
		t.Errorf("the replica's version moved from %s to %s", version, got)
	}
	sa.mu.Lock()
	defer sa.mu.Unlock()
	if len(sa.streams) != 0 {
		t.Errorf("%d streamed writesets certified", len(sa.streams))
	}
}

// A streamed transaction's backend holds at most tashkent.stream_threshold
// of events, a run's buffer and a fragment, however much it writes: here
// 40 MB of rows in one statement.
func TestStreamedMemory(t *testing.T) {
	f, sa := startStreamed(t, `CREATE TABLE k (id int PRIMARY KEY, v text)`)
	const boundBytes = 24 << 20 // the backend's own, a 4 MiB run spilled, its buffers
	f.exec(f.conn, `BEGIN; INSERT INTO k SELECT g, repeat('m', 1000) FROM generate_series(1, 40000) AS g`)
	var held int64
	if err := f.conn.QueryRow(context.Background(), `SELECT sum(total_bytes) FROM pg_backend_memory_contexts`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held > boundBytes {
		t.Errorf("the backend holds %d bytes of memory after writing 40 MB, want at most %d", held, boundBytes)
	}
	c, ss := sa.sent(f, `COMMIT`)
	if len(c) != 0 || len(ss) != 1 || ss[0].count < 10 {
		t.Fatalf("sent %d writesets and %d streamed ones, want 1 streamed of 10 fragments or more", len(c), len(ss))
	}
}
