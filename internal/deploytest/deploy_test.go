package deploytest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/cluster"
	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/verify"
)

const (
	// Ports of the guide (deploy/config/*.toml).
	certifierPort        = 7400
	certifierMetricsPort = 7401
	agentMetricsPort     = 7410

	// readyTimeout bounds the wait for a process, or a replica, to serve.
	readyTimeout = 60 * time.Second
	// quietPhase is how long the workload runs between faults;
	// downtime how long a killed host stays down and a partition lasts.
	quietPhase = 3 * time.Second
	downtime   = 4 * time.Second
	// commitAgainTimeout bounds the wait for a host's clients to commit
	// again after it serves again. After a partition heals, connections
	// opened before it are stuck in TCP's retransmission backoff for a
	// few seconds.
	commitAgainTimeout = 30 * time.Second
	// convergeTimeout bounds the wait for every replica to hold the
	// group's last version once the workload stopped.
	convergeTimeout = 60 * time.Second
	pollInterval    = 100 * time.Millisecond
)

// TestThreeHostsOfTheDeploymentGuide builds the cluster of
// docs/DEPLOYMENT.md, each host in its own network namespace, starts it in
// the guide's order from the guide's files, checks what the guide says to
// check, and runs a workload with clients on every host while one host's
// processes are killed with SIGKILL and restarted and another host is cut
// off the network and healed. Then every replica must hold the same rows
// at one version (verify, as `tashkent verify` on host 1), every
// acknowledged transaction, none that was refused, and no half-applied
// one.
func TestThreeHostsOfTheDeploymentGuide(t *testing.T) {
	start := time.Now()
	if err := checkGuideListsPerHostKeys(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLab(t)
	l.startCluster(ctx)
	t.Logf("three hosts serving after %s", time.Since(start).Round(time.Millisecond))
	l.checkMonitoring(ctx)
	l.checkChannelsRequireTLS(ctx)
	l.createSchema(ctx)

	lg := newLedger()
	w := l.startWorkload(ctx, lg)
	defer w.stop()

	phaseStart := time.Now()
	sleep(ctx, quietPhase)
	l.requireAcks("before the faults", lg, phaseStart, time.Now(), l.hosts)

	killed := l.hostOf(l.leader(ctx, l.hosts[0]))
	l.killAndRestart(ctx, killed, lg)
	sleep(ctx, quietPhase)

	cut := l.hostOf(l.leader(ctx, l.other(killed)))
	l.partitionAndHeal(ctx, cut, lg)

	after := time.Now()
	sleep(ctx, quietPhase)
	l.requireAcks("after the faults", lg, after, time.Now(), l.hosts)
	w.stop()
	t.Logf("workload: %s", lg.summary())

	l.awaitConvergence(ctx)
	l.checkEveryReplica(ctx, lg)
	l.verifyFromHostOne(ctx)
	t.Logf("deployment test took %s", time.Since(start).Round(time.Millisecond))
}

// startCluster starts every host in the guide's order: PostgreSQL, then
// the certifier group's members, then the agents.
func (l *lab) startCluster(ctx context.Context) {
	t := l.t
	l.eachHost(func(h *host) error {
		if err := l.initPostgres(ctx, h); err != nil {
			return fmt.Errorf("%s: %w", h, err)
		}
		return l.startPostgres(ctx, h)
	})
	l.eachHost(l.startMember)
	l.leader(ctx, l.hosts[0])
	l.eachHost(l.startAgent)
	l.eachHost(func(h *host) error { return l.awaitServing(ctx, h) })
	if t.Failed() {
		t.FailNow()
	}
}

// eachHost runs f for every host at once and fails the test on an error.
func (l *lab) eachHost(f func(*host) error) {
	var wg sync.WaitGroup
	errs := make([]error, len(l.hosts))
	for i, h := range l.hosts {
		wg.Go(func() { errs[i] = f(h) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			l.t.Fatal(err)
		}
	}
}

// awaitServing waits until host h's agent says it serves (/healthz, from
// the monitoring host) and the replica's gate lets clients in.
func (l *lab) awaitServing(ctx context.Context, h *host) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		health, err := l.healthz(ctx, h)
		if err == nil {
			var g cluster.Gate
			if g, err = cluster.ReadGate(ctx, h.socketDSN()); err == nil && !g.Admitting {
				err = fmt.Errorf("gate closed: %s", g.Reason)
			}
			if err == nil {
				l.t.Logf("%s serves: %s", h, health)
				return nil
			}
		}
		if h.agent.exited() {
			return fmt.Errorf("%s: the agent exited; see %s", h, h.agent.log)
		}
		if time.Now().After(deadline) || !sleep(ctx, pollInterval) {
			return fmt.Errorf("%s does not serve after %s: %v", h, readyTimeout, err)
		}
	}
}

// healthz asks host h's agent for /healthz, as a monitoring host does.
func (l *lab) healthz(ctx context.Context, h *host) (string, error) {
	code, body, err := httpGet(ctx, fmt.Sprintf("http://%s/healthz", hostPort(h.addr, agentMetricsPort)))
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("/healthz answers %d: %s", code, body)
	}
	return body, err
}

func httpGet(ctx context.Context, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// adminTLS are the tools' certifier TLS files (make-certs.sh's admin/).
func (l *lab) adminTLS() grpctls.Files {
	dir := filepath.Join(l.certs, "admin")
	return grpctls.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "admin.crt"), Key: filepath.Join(dir, "admin.key")}
}

// memberStatus asks host h's member for its Status from host via, with
// the tools' certificate: what `tashkent certifier members` does there.
func (l *lab) memberStatus(ctx context.Context, via, h *host) (*pb.StatusReply, error) {
	opts, err := l.adminTLS().DialOptions()
	if err != nil {
		return nil, err
	}
	dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return via.ns.DialContext(ctx, "tcp", addr)
	})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return cluster.QueryCertifier(ctx, hostPort(h.addr, certifierPort), append(opts, dial)...)
}

// leader waits until a member leads, asking from host via, and returns
// its Status.
func (l *lab) leader(ctx context.Context, via *host) *pb.StatusReply {
	deadline := time.Now().Add(readyTimeout)
	for {
		var errs []string
		for _, h := range l.hosts {
			st, err := l.memberStatus(ctx, via, h)
			if err == nil && st.Role == "leader" {
				return st
			}
			if err != nil {
				errs = append(errs, err.Error())
			}
		}
		if time.Now().After(deadline) || !sleep(ctx, pollInterval) {
			l.t.Fatalf("no certifier member leads after %s (asked from %s): %s", readyTimeout, via, strings.Join(errs, "; "))
		}
	}
}

// hostOf is the host of the member st describes.
func (l *lab) hostOf(st *pb.StatusReply) *host {
	return l.hosts[st.MemberId-1]
}

// other is a host other than h.
func (l *lab) other(h *host) *host {
	return l.hosts[h.k%len(l.hosts)]
}

// requireAcks fails the test unless every host in hosts acknowledged a
// transaction in [from, to).
func (l *lab) requireAcks(when string, lg *ledger, from, to time.Time, hosts []*host) {
	got := lg.acksBetween(from, to)
	l.t.Logf("acknowledged %s (%s): %v", when, to.Sub(from).Round(time.Millisecond), got)
	for _, h := range hosts {
		if got[h.k] == 0 {
			l.t.Errorf("%s: no transaction on %s was acknowledged %s", when, h, when)
		}
	}
}

// except lists the hosts other than h.
func (l *lab) except(h *host) []*host {
	var out []*host
	for _, o := range l.hosts {
		if o != h {
			out = append(out, o)
		}
	}
	return out
}

// killAndRestart kills every process of host h (the leader's host) with
// SIGKILL; the other two hosts go on committing; then it restarts them in
// the guide's order, as systemd would, and waits until h serves.
func (l *lab) killAndRestart(ctx context.Context, h *host, lg *ledger) {
	t := l.t
	t.Logf("%s killing every process of %s, whose member leads: PostgreSQL %d, certifier %d, agent %d", clock(), h, h.pg.PID(), h.member.pid(), h.agent.pid())
	if err := l.killHost(h); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	sleep(ctx, downtime)
	l.requireAcks("while "+h.String()+" was down", lg, down, time.Now(), l.except(h))
	if err := l.startPostgres(ctx, h); err != nil {
		t.Fatal(err)
	}
	if err := l.startMember(h); err != nil {
		t.Fatal(err)
	}
	if err := l.startAgent(h); err != nil {
		t.Fatal(err)
	}
	if err := l.awaitServing(ctx, h); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s serves again, %s after the kill", clock(), h, time.Since(down).Round(time.Millisecond))
	l.awaitCommits(ctx, lg, h, down, "the kill")
}

// partitionAndHeal cuts host h (the leader's host) off the bridge: its
// member loses the group, its agent the certifier, its remote clients the
// host. The other two go on committing. Then the link comes back, and h
// must serve again.
func (l *lab) partitionAndHeal(ctx context.Context, h *host, lg *ledger) {
	t := l.t
	t.Logf("%s cutting %s, whose member leads, off the network", clock(), h)
	if err := l.partition(ctx, h, true); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	sleep(ctx, downtime)
	l.requireAcks("while "+h.String()+" was cut off", lg, cut, time.Now(), l.except(h))
	if err := l.partition(ctx, h, false); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	t.Logf("%s %s is back on the network", clock(), h)
	if err := l.awaitServing(ctx, h); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s serves again, %s after the heal", clock(), h, time.Since(healed).Round(time.Millisecond))
	l.awaitCommits(ctx, lg, h, healed, "the heal")
}

// awaitCommits waits until a client of host h has a transaction
// acknowledged after since, the time of event.
func (l *lab) awaitCommits(ctx context.Context, lg *ledger, h *host, since time.Time, event string) {
	deadline := time.Now().Add(commitAgainTimeout)
	for lg.acksBetween(since, time.Now())[h.k] == 0 {
		if time.Now().After(deadline) || !sleep(ctx, pollInterval) {
			l.t.Fatalf("no transaction on %s was acknowledged within %s of %s", h, commitAgainTimeout, event)
		}
	}
	now := time.Now()
	l.t.Logf("%s %s commits again, %s after %s (meanwhile %d of its transactions refused, %d unknown)", clock(), h,
		now.Sub(since).Round(time.Millisecond), event, lg.between(refused, since, now)[h.k], lg.between(unknown, since, now)[h.k])
}

// clock is the time of day for the test's log, to line it up with the
// processes' logs.
func clock() string { return time.Now().UTC().Format("15:04:05.000") }

// awaitConvergence waits until every replica holds the group's last
// version.
func (l *lab) awaitConvergence(ctx context.Context) {
	deadline := time.Now().Add(convergeTimeout)
	for {
		st := l.leader(ctx, l.hosts[0])
		versions, err := l.versions(ctx)
		done := err == nil
		for _, v := range versions {
			done = done && v == st.Version
		}
		if done {
			l.t.Logf("every replica holds version %d", st.Version)
			return
		}
		if time.Now().After(deadline) || !sleep(ctx, pollInterval) {
			l.t.Fatalf("the replicas did not converge within %s: versions %v (%v), the group's %d", convergeTimeout, versions, err, st.Version)
		}
	}
}

func (l *lab) versions(ctx context.Context) ([]uint64, error) {
	var out []uint64
	for _, h := range l.hosts {
		g, err := cluster.ReadGate(ctx, h.socketDSN())
		if err != nil {
			return out, fmt.Errorf("%s: %w", h, err)
		}
		out = append(out, g.Version)
	}
	return out, nil
}

// checkEveryReplica checks each replica's rows against the ledger.
func (l *lab) checkEveryReplica(ctx context.Context, lg *ledger) {
	for _, h := range l.hosts {
		r, err := readRows(ctx, h)
		if err != nil {
			l.t.Fatalf("%s: %v", h, err)
		}
		for _, err := range lg.checkRows(h.String(), r) {
			l.t.Error(err)
		}
		l.t.Logf("%s: %d rows, counters sum to %d", h, len(r.ids), r.counter)
	}
}

// verifyFromHostOne compares the replicas as the guide does: `tashkent
// verify` on host 1 as the postgres user, its own replica through the
// Unix socket, the others over TLS as postgres with a password.
func (l *lab) verifyFromHostOne(ctx context.Context) {
	t := l.t
	first := l.hosts[0]
	args := []string{"verify", "--json", "--replica", "replica1=" + first.loc.apply("postgres:///postgres?host=/var/run/postgresql&user=postgres")}
	for _, h := range l.hosts[1:] {
		args = append(args, "--replica", fmt.Sprintf("replica%d=%s", h.k, h.loc.apply(fmt.Sprintf(
			"postgres://postgres@10.0.0.%d/postgres?sslmode=verify-full&sslrootcert=/etc/tashkent/tls/ca.crt", h.k))))
	}
	// As the postgres user, whom the socket's peer authentication admits
	// as postgres; the password for the network comes from the
	// environment here, from ~/.pgpass in the guide.
	cmd := exec.Command(l.bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + first.dir, "PGPASSWORD=" + postgresPassword}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: l.postgresUser}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	var out []byte
	err := first.ns.Do(func() error {
		var err error
		out, err = cmd.Output()
		return err
	})
	if err != nil {
		t.Fatalf("tashkent %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	var report verify.Report
	if err := json.Unmarshal(out, &report); err != nil {
		t.Fatalf("tashkent verify --json: %v\n%s", err, out)
	}
	compared := map[string]bool{}
	for _, tr := range report.Tables {
		compared[tr.Name] = tr.Equal()
		if !tr.Equal() {
			t.Errorf("tashkent verify: %s differs: rows %v, %d differing rows, e.g. %v", tr.Name, tr.Rows, tr.DiffsFound, tr.Diffs)
		}
	}
	for _, table := range []string{"public.deploy_rows", "public.deploy_counters"} {
		if _, ok := compared[table]; !ok {
			t.Errorf("tashkent verify did not compare %s: %v", table, compared)
		}
	}
	t.Logf("tashkent verify: %d tables equal on %v at version %d (commits held %s)", len(report.Tables), report.Replicas, report.Version, report.Held)
}

// postgresPassword is the postgres role's password for connections over
// the network (pg_hba.conf asks for one); the agent and the test's own
// checks use the Unix socket.
const postgresPassword = "postgres-secret"

// createSchema creates the workload's tables and the application role on
// host 1, and waits until every replica has them.
func (l *lab) createSchema(ctx context.Context) {
	t := l.t
	conn, err := pgx.Connect(ctx, l.hosts[0].socketDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	stmts := strings.Split(strings.TrimSpace(schemaSQL), ";\n")
	stmts = append(stmts,
		fmt.Sprintf("INSERT INTO deploy_counters SELECT g, 0 FROM generate_series(1, %d) g", counterRows),
		fmt.Sprintf("ALTER ROLE postgres PASSWORD '%s'", postgresPassword))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	var v int64
	if err := conn.QueryRow(ctx, "SELECT tashkent.last_commit_version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	for _, h := range l.hosts[1:] {
		c, err := pgx.Connect(ctx, h.socketDSN())
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Exec(ctx, "SELECT tashkent.wait_for_version($1, 30000)", v)
		c.Close(context.Background())
		if err != nil {
			t.Fatalf("%s: wait for version %d: %v", h, v, err)
		}
	}
}
