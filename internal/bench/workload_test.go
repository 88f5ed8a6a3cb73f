package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/pgtest"
)

// The contention level c of ED §4.4: a share c of the updates goes to the
// first (1-c) of the 250 rows; c = 0.5 is uniform.
func TestContentionLevelsAreTheThesis(t *testing.T) {
	for _, tc := range []struct {
		c        float64
		hot      int
		hotdraws string
	}{{0.5, 125, "5000"}, {0.8, 50, "8000"}, {0.95, 13, "9500"}, {0.999, 1, "9990"}, {0.001, 249, "10"}} {
		if got := contentionHotRows(tc.c); got != tc.hot {
			t.Errorf("c=%v: %d hot rows, want %d", tc.c, got, tc.hot)
		}
		d := contentionDefines(tc.c)
		if d["hotdraws"] != tc.hotdraws || d["hot"] != strconv.Itoa(tc.hot) {
			t.Errorf("c=%v: defines %v", tc.c, d)
		}
	}
	for _, iso := range []string{"repeatable read", "serializable"} {
		if s := contentionScript(iso); !strings.Contains(s, "BEGIN ISOLATION LEVEL "+strings.ToUpper(iso)+";") {
			t.Errorf("%s: script\n%s", iso, s)
		}
	}
}

// The mixed workload's two scripts differ only in synchronous_commit, and
// the fast share becomes their pgbench weights.
func TestMixedScriptsAndWeights(t *testing.T) {
	dir := t.TempDir()
	args, err := Mixed.scripts(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 2 || filepath.Base(args[0]) != "fast.sql" || filepath.Base(args[1]) != "safe.sql" {
		t.Fatalf("scripts %v", args)
	}
	fast, _ := os.ReadFile(args[0])
	safe, _ := os.ReadFile(args[1])
	if !strings.Contains(string(fast), "SET LOCAL synchronous_commit = off;") || !strings.Contains(string(safe), "SET LOCAL synchronous_commit = on;") {
		t.Fatalf("fast.sql:\n%s\nsafe.sql:\n%s", fast, safe)
	}
	if strings.Replace(string(fast), "= off;", "= on;", 1) != string(safe) {
		t.Fatalf("the scripts differ beyond synchronous_commit:\n%s\n%s", fast, safe)
	}
	for share, want := range map[float64][2]string{0: {"@0", "@100"}, 25: {"@25", "@75"}, 100: {"@100", "@0"}} {
		w := weightedScripts(args, share)
		if w[0] != args[0]+want[0] || w[1] != args[1]+want[1] {
			t.Errorf("share %v: %v", share, w)
		}
	}
}

// The contention script, run by the real pgbench at c = 0.95 and 0.5,
// sends the share c of its updates to the first (1-c) of the 250 rows and
// never leaves the table.
func TestContentionScriptHitsTheHotRowsWithProbabilityC(t *testing.T) {
	srv := pgtest.Start(t, pgtest.SynchronousCommitOff())
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	scripts, err := Contention.scripts(dir, "repeatable read")
	if err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, srv, "postgres")
	for _, c := range []float64{0.95, 0.5} {
		conn.Exec(ctx, "DROP TABLE IF EXISTS contention")
		if err := Contention.setup(ctx, srv.DSN("postgres"), 1); err != nil {
			t.Fatal(err)
		}
		res, err := newPgbench(binDir).run(ctx, []load{{dsn: srv.DSN("postgres"), clients: 1}},
			runOpts{seconds: 2, protocol: "prepared", scripts: scripts, defines: contentionDefines(c), maxTries: 1})
		if err != nil {
			t.Fatal(err)
		}
		var hot, all, rows int64
		if err := conn.QueryRow(ctx, `SELECT coalesce(sum(v) FILTER (WHERE id <= $1), 0), sum(v), count(*) FROM contention`,
			contentionHotRows(c)).Scan(&hot, &all, &rows); err != nil {
			t.Fatal(err)
		}
		if rows != contentionRows || all != res.Processed || all < 500 {
			t.Fatalf("c=%v: %d rows, %d updates, pgbench processed %d", c, rows, all, res.Processed)
		}
		if share := float64(hot) / float64(all); math.Abs(share-c) > 0.04 {
			t.Errorf("c=%v: %.3f of %d updates on the first %d rows", c, share, all, contentionHotRows(c))
		}
	}
}

// The real pgbench runs the mixed workload's scripts at their weights,
// the per-script statistics are parsed, and a load's session options
// reach its sessions (what makes every transaction of mw-fast fast).
func TestMixedRunReportsEachScriptAndSessionOptionsApply(t *testing.T) {
	srv := pgtest.Start(t)
	binDir, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Mixed.setup(ctx, srv.DSN("postgres"), 2); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	scripts, err := Mixed.scripts(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	pb := newPgbench(binDir)
	loads := spread([]string{srv.DSN("postgres"), srv.DSN("postgres")}, 2)
	res, err := pb.run(ctx, loads, runOpts{seconds: 2, protocol: "prepared", scripts: weightedScripts(scripts, 25)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Scripts) != 2 || res.Scripts[0].Name != "fast" || res.Scripts[1].Name != "safe" {
		t.Fatalf("scripts %+v", res.Scripts)
	}
	fast, safe := res.Scripts[0], res.Scripts[1]
	if fast.Processed+safe.Processed != res.Processed || res.Processed < 100 {
		t.Fatalf("fast %d + safe %d transactions, the run %d", fast.Processed, safe.Processed, res.Processed)
	}
	if share := float64(fast.Processed) / float64(res.Processed); math.Abs(share-0.25) > 0.08 {
		t.Errorf("%.2f of the transactions fast at weight 25", share)
	}
	if !(fast.LatencyMs > 0) || !(safe.LatencyMs > 0) || math.Abs(fast.TPS+safe.TPS-res.TPS) > 0.01*res.TPS {
		t.Errorf("per script %+v, run tps %v", res.Scripts, res.TPS)
	}

	probe := filepath.Join(dir, "probe.sql")
	if err := os.WriteFile(probe, []byte("INSERT INTO seen VALUES (current_setting('synchronous_commit'));\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, srv, "postgres")
	if _, err := conn.Exec(ctx, "CREATE TABLE seen (setting text)"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []System{MWFast, MWSafe} {
		if _, err := pb.run(ctx, withOptions(spread([]string{srv.DSN("postgres")}, 1), k.sessionOptions()),
			runOpts{seconds: 1, protocol: "simple", scripts: []string{probe}}); err != nil {
			t.Fatal(err)
		}
		var settings []string
		rows, _ := conn.Query(ctx, "SELECT DISTINCT setting FROM seen")
		for rows.Next() {
			var s string
			rows.Scan(&s)
			settings = append(settings, s)
		}
		want := map[System]string{MWFast: "off", MWSafe: "on"}[k]
		if rows.Err() != nil || len(settings) != 1 || settings[0] != want {
			t.Errorf("%s: sessions ran with synchronous_commit %v (%v), want %s", k, settings, rows.Err(), want)
		}
		conn.Exec(ctx, "TRUNCATE seen")
	}
}
