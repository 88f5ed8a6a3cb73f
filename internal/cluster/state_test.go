package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func testState(dir string) *State {
	st, err := newState(dir, Options{Replicas: 2, Mode: ModeBase, CertifierPort: 7400, BasePort: 6000})
	if err != nil {
		panic(err)
	}
	st.Binary = "/usr/local/bin/tashkent"
	st.Certifier.PID, st.Certifier.MetricsPort = 101, 7401
	for i, r := range st.Replicas {
		r.Postgres.PID = 200 + i
		r.Agent.PID, r.Agent.MetricsPort = 300+i, 6100+i
	}
	return st
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	st := testState(dir)
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip changed the state:\nsaved  %+v\nloaded %+v", st, got)
	}
	r2 := got.Replicas[1]
	if r2.Postgres.Port != 6001 || r2.Name != "replica2" || r2.Postgres.DataDir != filepath.Join(dir, "replica2", "pgdata") ||
		r2.Agent.Socket != filepath.Join(dir, "replica2", "pgdata", "tashkent_agent.sock") || r2.Agent.Log != filepath.Join(dir, "replica2", "agent.log") {
		t.Fatalf("unexpected layout: %+v", r2)
	}
	if want := "host=" + r2.Postgres.DataDir + " port=6001 user=postgres"; r2.AgentPostgres() != want {
		t.Fatalf("the agent's --postgres is %q, want %q", r2.AgentPostgres(), want)
	}
	if u := got.Replicas[0].URI(); u != "postgres://postgres@127.0.0.1:6000/postgres" {
		t.Fatalf("URI = %q", u)
	}
	// Saving again replaces the file and leaves no temporary file behind.
	st.Certifier.PID = 0
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != StateFile {
		t.Fatalf("directory holds %v, want only %s", ents, StateFile)
	}
	if got, _ := Load(dir); got.Certifier.PID != 0 {
		t.Fatalf("second save not visible: pid %d", got.Certifier.PID)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("Load of an empty dir: %v, want ErrNoCluster", err)
	}
	for name, content := range map[string]string{
		"garbage":     "{not json",
		"format":      `{"format": 99}`,
		"mode":        `{"format": 2, "mode": "api", "replicas": [{"name": "r", "postgres": {"data_dir": "/x"}, "agent": {"socket": "/x/s"}}], "certifier": {"data_dir": "/c"}}`,
		"no replicas": `{"format": 2, "mode": "mw", "certifier": {"data_dir": "/c"}}`,
		"no socket":   `{"format": 2, "mode": "mw", "replicas": [{"name": "r", "postgres": {"data_dir": "/x"}}], "certifier": {"data_dir": "/c"}}`,
	} {
		if err := os.WriteFile(StatePath(dir), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil || errors.Is(err, ErrNoCluster) {
			t.Errorf("%s: Load accepted %s (err %v)", name, content, err)
		}
	}
}

// A cluster.json of the format whose replicas sat behind proxies is
// refused with what to do about it.
func TestLoadRefusesAClusterOfProxies(t *testing.T) {
	dir := t.TempDir()
	old := `{"format": 1, "binary": "/opt/old/tashkent", "mode": "mw", "certifier": {"data_dir": "/c"},
		"replicas": [{"name": "replica1", "postgres": {"data_dir": "/x"}, "proxy": {"port": 6432, "pid": 7}}]}`
	if err := os.WriteFile(StatePath(dir), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	if err == nil || errors.Is(err, ErrNoCluster) {
		t.Fatalf("Load accepted a cluster of proxies: %v", err)
	}
	for _, want := range []string{"format 1", "proxy per replica", "/opt/old/tashkent down --data-dir " + dir, "another directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

func TestAgentPostgresFallsBackToTCP(t *testing.T) {
	r := &Replica{Postgres: Postgres{DataDir: "/" + strings.Repeat("d", 100), Port: 5432}}
	if got := r.AgentPostgres(); got != "host=127.0.0.1 port=5432 user=postgres" {
		t.Errorf("a data directory too long for a socket: %q", got)
	}
	r.Postgres.DataDir = "/tmp/with space/pgdata"
	if got := r.AgentPostgres(); got != `host='/tmp/with space/pgdata' port=5432 user=postgres` {
		t.Errorf("a data directory with a space: %q", got)
	}
}

func TestNewStateChecksOptions(t *testing.T) {
	for _, o := range []Options{{Replicas: -1}, {Replicas: replicasMax + 1}, {Mode: "api"}, {BasePort: 65535, Replicas: 2}} {
		if _, err := newState("/tmp/x", o); err == nil {
			t.Errorf("newState accepted %+v", o)
		}
	}
	if _, err := newState("/tmp/"+strings.Repeat("x", 80), Options{}); err == nil || !strings.Contains(err.Error(), "shorter path") {
		t.Errorf("newState accepted a directory too long for the agents' sockets: %v", err)
	}
	st, err := newState("/tmp/x", Options{})
	if err != nil || len(st.Replicas) != DefaultReplicas || st.Mode != ModeMW {
		t.Fatalf("defaults: %+v, %v", st, err)
	}
	if st, err := newState("/tmp/x", Options{Mode: ModeED, Certifiers: 3}); err != nil || len(st.CertifierMembers()) != 3 {
		t.Errorf("mode ed with a certifier group of 3: %v", err)
	}
	if st, err := newState("/tmp/x", Options{Mode: ModeED}); err != nil || !st.Mode.synchronousCommit() || postgresSettings(st.Mode)["wal_writer_flush_after"] != "0" {
		t.Errorf("mode ed: %v; replicas' synchronous_commit on: %v, settings %v", err, st != nil && st.Mode.synchronousCommit(), postgresSettings(ModeED))
	}
}

func TestCheckCompatible(t *testing.T) {
	st := testState("/tmp/x")
	if err := checkCompatible(st, Options{}); err != nil {
		t.Fatal(err)
	}
	if err := checkCompatible(st, Options{Replicas: 2, Mode: ModeBase, CertifierPort: 7400, BasePort: 6000}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{Replicas: replicasMax + 1}, {Mode: ModeMW}, {CertifierPort: 1}, {BasePort: 1}} {
		if err := checkCompatible(st, o); err == nil {
			t.Errorf("checkCompatible accepted %+v", o)
		}
	}
}

func TestMakeClusterDirRefusesForeignContent(t *testing.T) {
	dir := t.TempDir()
	if err := makeClusterDir(dir); err != nil {
		t.Fatalf("empty dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := makeClusterDir(dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("dir with foreign content: %v", err)
	}
	sub := filepath.Join(dir, "new", "cluster")
	if err := makeClusterDir(sub); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(sub); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("new dir: %v %v", st.Mode(), err)
	}
}

func TestLockDirExcludes(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDir(dir); err == nil {
		t.Fatal("a second lock of the same directory succeeded")
	}
	unlock()
	unlock2, err := lockDir(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

func TestReplicaIndexes(t *testing.T) {
	dir := t.TempDir()
	st := testState(dir)
	st.Replicas = append(st.Replicas, mustNewReplica(t, dir, 3, 6000))
	if k, err := st.nextFreeIndex(); err != nil || k != 4 {
		t.Fatalf("next free index of 1..3: %d, %v", k, err)
	}
	st.dropReplica(st.ReplicaByIndex(2))
	if k, _ := st.nextFreeIndex(); k != 2 {
		t.Fatalf("next free index after removing replica2: %d, want 2", k)
	}
	r := mustNewReplica(t, dir, 2, 6000)
	st.addReplica(r)
	if names := []string{st.Replicas[0].Name, st.Replicas[1].Name, st.Replicas[2].Name}; names[1] != "replica2" || r.Postgres.Port != 6001 {
		t.Fatalf("replicas after adding index 2: %v, port %d", names, r.Postgres.Port)
	}
	for len(st.Replicas) < replicasMax {
		k, _ := st.nextFreeIndex()
		st.addReplica(mustNewReplica(t, dir, k, 0))
	}
	if _, err := st.nextFreeIndex(); err == nil || !strings.Contains(err.Error(), "sequence-stride") {
		t.Fatalf("an index past %d: %v", replicasMax, err)
	}

	// A record without indexes numbers its replicas by position; two
	// replicas with one index are refused.
	st = testState(dir)
	for _, r := range st.Replicas {
		r.Index = 0
	}
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || got.Replicas[0].Index != 1 || got.Replicas[1].Index != 2 {
		t.Fatalf("loaded without indexes: %+v, %v", got, err)
	}
	got.Replicas[1].Index = 1
	if err := got.Save(); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "not unique") {
		t.Fatalf("two replicas with index 1: %v", err)
	}
}

func mustNewReplica(t *testing.T, dir string, k, basePort int) *Replica {
	t.Helper()
	r, err := newReplica(dir, k, basePort)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A single certifier of mode ed runs two Go threads, so that a log flush
// does not hold back the decisions (and fast commits) behind it; in the
// other modes it runs one, beside the replicas.
func TestASingleCertifierOfModeEDRunsTwoThreads(t *testing.T) {
	for _, mode := range []Mode{ModeMW, ModeBase, ModeED} {
		u := &upper{st: &State{Mode: mode}}
		procs := int64(0)
		for _, s := range u.certifierSettings(&Certifier{}) {
			if s.Key == "max-procs" {
				procs = int64(s.Value.(int))
			}
		}
		if want := map[Mode]int64{ModeED: EDCertifierThreads}[mode]; procs != want {
			t.Errorf("mode %s: the certifier's max-procs is %d, want %d (0: its default, one beside the replicas)", mode, procs, want)
		}
	}
}
