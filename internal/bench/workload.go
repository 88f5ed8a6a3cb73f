package bench

// The workloads of `tashkent bench WORKLOAD`. All but sysbench's are
// pgbench scripts, so that every system is driven by the same client, with
// the same protocol, the same retry rule and the same accounting.

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Workload names one workload of the suite.
type Workload string

const (
	// AllUpdates is Tashkent §9.1: back-to-back short update transactions
	// that do not conflict. Every client updates one row of its own 100
	// per transaction (autocommit UPDATE by primary key).
	AllUpdates Workload = "allupdates"
	// TPCB is pgbench's built-in TPC-B-like script (Tashkent §9.2 used
	// TPC-B too); pgbench_history gets a primary key.
	TPCB Workload = "tpcb"
	// OLTPReadWrite and OLTPReadOnly are sysbench's scripts (Debian
	// sysbench, pgsql driver), 2 tables of 10,000 rows.
	OLTPReadWrite Workload = "oltp_read_write"
	OLTPReadOnly  Workload = "oltp_read_only"
	// Contention is ED §4.4 (Kashi, Fig. 4.4-4.6): single-row update
	// transactions on a table of 250 rows, where the contention level c
	// sends a transaction to the first (1-c) of the rows with probability
	// c and to the other rows otherwise (c = 0.5 is uniform; at 0.95, 95%
	// of the transactions update one of the first 13 rows). REPEATABLE
	// READ by default, SERIALIZABLE with SuiteConfig.Isolation. Aborts are
	// not retried (pgbench --max-tries 1): the abort rate is what the
	// table reports.
	Contention Workload = "contention"
	// Mixed is ED §4.3 (Fig. 4.2-4.3): one INSERT into a table of two
	// integer columns per transaction, a share of them fast (SET LOCAL
	// synchronous_commit = off) and the rest safe (= on): two pgbench
	// scripts, fast.sql and safe.sql, weighted by the share, whose
	// latencies pgbench reports apart.
	Mixed Workload = "mixed"
	// ReadMostly is an 80/20 mix: 80% single-row reads, 20% single-row
	// updates (pgbench -f read@80 -f write@20), for read scaling.
	ReadMostly Workload = "readmostly"
	// SelectOnly is pgbench's built-in select-only script (pgbench -S: one
	// SELECT of pgbench_accounts by key) on the TPC-B data of --scale, with
	// every client of a replicated system on its first server: what
	// reading from one replica of a running cluster costs against the
	// same PostgreSQL alone.
	SelectOnly Workload = "select-only"
)

// Workloads are all workloads, in the order the docs list them.
var Workloads = []Workload{AllUpdates, TPCB, SelectOnly, OLTPReadWrite, OLTPReadOnly, Contention, Mixed, ReadMostly}

// ParseWorkload checks a workload name.
func ParseWorkload(s string) (Workload, error) {
	for _, w := range Workloads {
		if string(w) == s {
			return w, nil
		}
	}
	return "", fmt.Errorf("unknown workload %q (want allupdates, tpcb, select-only, oltp_read_write, oltp_read_only, contention, mixed or readmostly)", s)
}

// WriteFraction is w of the scale-out model (Jiménez-Peris et al. §2.1):
// the fraction of transactions that write.
func (w Workload) WriteFraction() float64 {
	switch w {
	case OLTPReadOnly, SelectOnly:
		return 0
	case ReadMostly:
		return 0.2
	}
	return 1
}

func (w Workload) sysbench() bool { return w == OLTPReadWrite || w == OLTPReadOnly }

// tpcb reports whether the workload runs on pgbench's TPC-B tables.
func (w Workload) tpcb() bool { return w == TPCB || w == SelectOnly }

// builtin is the pgbench -b script of a workload without scripts.
func (w Workload) builtin() string {
	if w == SelectOnly {
		return "select-only"
	}
	return "tpcb-like"
}

// oneServer reports whether every client of a replicated system goes to
// its first server (the question is one replica's speed, not the
// cluster's).
func (w Workload) oneServer() bool { return w == SelectOnly }

// paramName is what a point's param means in the workload: the
// contention level c, or the fast share; "" where a point is only a
// client count.
func (w Workload) paramName() string {
	switch w {
	case Contention:
		return "c"
	case Mixed:
		return "fast %"
	}
	return ""
}

const (
	// rowsPerClient is how many rows of its own an AllUpdates client
	// updates (so that no two clients ever touch the same row).
	rowsPerClient = 100
	// contentionRows is the size of the contention table (ED §4.4: 250
	// rows of integer keys and values).
	contentionRows = 250
	// contentionDraws is the resolution of c in the contention script:
	// a transaction draws r in [1, contentionDraws] and goes to the hot
	// rows when r <= c*contentionDraws.
	contentionDraws = 10000
	// readMostlyRows is the size of the 80/20 table.
	readMostlyRows = 10000
	// sysbenchTables, sysbenchTableRows: sysbench --tables, --table-size.
	sysbenchTables    = 2
	sysbenchTableRows = 10000
	// insertChunkRows bounds one INSERT of the setup (one writeset).
	insertChunkRows = 2000
)

// scripts writes the workload's pgbench scripts into dir and returns the
// -f arguments (FILE@WEIGHT; mixed: FILE, weighted per point by
// weightedScripts). isolation is the contention transactions' level.
func (w Workload) scripts(dir, isolation string) ([]string, error) {
	files := map[string]string{}
	var args []string
	switch w {
	case AllUpdates:
		files["allupdates.sql"] = fmt.Sprintf("\\set id (:client_id + :coff) * %d + random(1, %d)\n"+
			"UPDATE allupdates SET v = v + 1 WHERE id = :id;\n", rowsPerClient, rowsPerClient)
		args = []string{"allupdates.sql"}
	case Contention:
		files["contention.sql"] = contentionScript(isolation)
		args = []string{"contention.sql"}
	case Mixed:
		files["fast.sql"] = mixedScript("off")
		files["safe.sql"] = mixedScript("on")
		args = []string{"fast.sql", "safe.sql"}
	case ReadMostly:
		files["read.sql"] = fmt.Sprintf("\\set id random(1, %d)\nSELECT v FROM kv WHERE id = :id;\n", readMostlyRows)
		files["write.sql"] = fmt.Sprintf("\\set id random(1, %d)\nUPDATE kv SET v = v + 1 WHERE id = :id;\n", readMostlyRows)
		args = []string{"read.sql@80", "write.sql@20"}
	default:
		return nil, nil
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	for i, a := range args {
		args[i] = filepath.Join(dir, a)
	}
	return args, nil
}

// contentionScript is one update of the contention table: with
// probability c (pgbench -D hotdraws=c*contentionDraws) one of the first
// hot rows (-D hot=contentionHotRows(c)), else one of the others.
func contentionScript(isolation string) string {
	return fmt.Sprintf("\\set r random(1, %d)\n"+
		"\\if :r <= :hotdraws\n\\set id random(1, :hot)\n\\else\n\\set id random(:hot + 1, %d)\n\\endif\n"+
		"BEGIN ISOLATION LEVEL %s;\nUPDATE contention SET v = v + 1 WHERE id = :id;\nEND;\n",
		contentionDraws, contentionRows, strings.ToUpper(isolation))
}

// contentionHotRows is how many of the first rows take the share c of the
// transactions: the first (1-c) of the table, rounded, at least one row
// and at most all but one.
func contentionHotRows(c float64) int {
	return min(max(int(math.Round(float64(contentionRows)*(1-c))), 1), contentionRows-1)
}

// contentionDefines are the pgbench -D values of the contention script at
// level c.
func contentionDefines(c float64) map[string]string {
	return map[string]string{
		"hotdraws": strconv.Itoa(int(math.Round(c * contentionDraws))),
		"hot":      strconv.Itoa(contentionHotRows(c)),
	}
}

// mixedScript is one transaction of the mixed workload, fast
// (synchronous_commit off) or safe (on). Both scripts set it, so that
// both pay the same statement and the system's session default decides
// nothing.
func mixedScript(synchronousCommit string) string {
	return "\\set k random(1, 1000000)\n\\set v :client_id + :coff\nBEGIN;\nSET LOCAL synchronous_commit = " + synchronousCommit + ";\n" +
		"INSERT INTO mixed (k, v) VALUES (:k, :v);\nEND;\n"
}

// weightedScripts gives the mixed workload's scripts (fast, safe) their
// pgbench weights for a fast share in percent.
func weightedScripts(scripts []string, fastPercent float64) []string {
	fast := int(math.Round(fastPercent))
	return []string{scripts[0] + "@" + strconv.Itoa(fast), scripts[1] + "@" + strconv.Itoa(100-fast)}
}

// tableFor is the table a pgbench-script workload creates, and its rows.
func (w Workload) tableFor(maxClients int) (string, int) {
	switch w {
	case AllUpdates:
		return "allupdates", (maxClients + 1) * rowsPerClient
	case Contention:
		return "contention", contentionRows
	case ReadMostly:
		return "kv", readMostlyRows
	}
	return "", 0
}

// setup creates the table of a pgbench-script workload through dsn.
func (w Workload) setup(ctx context.Context, dsn string, maxClients int) error {
	if w == Mixed {
		return createMixedTable(ctx, dsn)
	}
	table, rows := w.tableFor(maxClients)
	return setupTable(ctx, dsn, table, rows)
}

// createMixedTable creates the mixed workload's table: two integer
// columns, as ED §4.3 has it, and no key: an insert into it conflicts
// with nothing (GUARANTEES.md, tables without a primary key), so every
// abort-free run measures commit latency alone.
func createMixedTable(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE mixed (k int NOT NULL, v int NOT NULL)"); err != nil {
		return fmt.Errorf("create mixed: %w", err)
	}
	return nil
}

// setupTable creates the workload's table through dsn (a system's first
// endpoint, or every replica of a tashkent system before its agents
// start: seed.go) and fills it in chunks.
func setupTable(ctx context.Context, dsn, table string, rows int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE "+table+" (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0, pad text NOT NULL)"); err != nil {
		return fmt.Errorf("create %s: %w", table, err)
	}
	for lo := 1; lo <= rows; lo += insertChunkRows {
		hi := min(lo+insertChunkRows-1, rows)
		q := "INSERT INTO " + table + " (id, pad) SELECT g, repeat('x', 80) FROM generate_series(" +
			strconv.Itoa(lo) + ", " + strconv.Itoa(hi) + ") g"
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("fill %s: %w", table, err)
		}
	}
	return nil
}
