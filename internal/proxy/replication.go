package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/pgwire"
	"github.com/tashkent-db/tashkent/internal/replica"
	"github.com/tashkent-db/tashkent/internal/sequencer"
)

// replication is the replica side of the proxy: it receives the global
// order from the certifier, applies remote writesets in it, and keeps the
// replica's database consistent with it across restarts.
type replication struct {
	p   *Proxy
	seq *sequencer.Sequencer
	// cert is replaced when the database restarted (the stream reopens at
	// the version the database recovered to).
	certPtr atomic.Pointer[certclient.Client]
	cert    certifier

	applier   *replica.Applier
	applyConn *pgx.Conn // remote writesets; owned by the applier goroutine

	controlMu   sync.Mutex
	controlConn *pgx.Conn // lock watch, cancels, health checks

	recovering  atomic.Bool
	needRecover atomic.Bool
	// started is pg_postmaster_start_time() of the database whose state the
	// sequencer holds, as postmasterStartSQL prints it: a session that finds
	// another one is on a restarted database the proxy has not recovered yet.
	started atomic.Pointer[string]
	// recordToken is the database's secret with which client sessions of
	// any role record the version they commit (replica.RecordVersionSQL),
	// read with the administrative connection after every (re)connect.
	recordToken atomic.Pointer[[]byte]
	// builtinFunctions are the names of PostgreSQL's built-in functions
	// (usercode.go), read once when replication starts.
	builtinFunctions map[string]bool
	broken           atomic.Pointer[error] // the applier stopped on an error it cannot get past
}

// certifier is the part of certclient the sessions use.
type certifier struct{ r *replication }

func (c certifier) Certify(ctx context.Context, req *pb.CertifyRequest) (*pb.CertifyReply, error) {
	return c.r.certPtr.Load().Certify(ctx, req)
}

// Application names of the proxy's own connections to its replica, as
// pg_stat_activity (and log_line_prefix's %a) shows them: the apply
// connection's apart from the others', so that an operator (or a test) can
// tell which backend applies remote writesets.
const (
	adminApplicationName = "tashkent-proxy"
	applyApplicationName = "tashkent-proxy-apply"
)

func (p *Proxy) adminDSN(applicationName string) string {
	query := url.Values{"sslmode": {"disable"}, "application_name": {applicationName}}
	u := url.URL{Scheme: "postgres", Host: p.cfg.BackendAddr, Path: "/" + p.cfg.Database}
	if dir, port, ok := socketDirAndPort(p.cfg.BackendAddr); ok {
		u.Host = ""
		query.Set("host", dir)
		query.Set("port", port)
	}
	u.RawQuery = query.Encode()
	if p.cfg.AdminPassword != "" {
		u.User = url.UserPassword(p.cfg.AdminUser, p.cfg.AdminPassword)
	} else {
		u.User = url.User(p.cfg.AdminUser)
	}
	return u.String()
}

// socketDirAndPort splits a PostgreSQL Unix socket path
// (/dir/.s.PGSQL.5432) into what libpq-style DSNs take.
func socketDirAndPort(addr string) (dir, port string, ok bool) {
	if pgwire.BackendNetwork(addr) != "unix" {
		return "", "", false
	}
	dir, file := path.Split(addr)
	port, found := strings.CutPrefix(file, ".s.PGSQL.")
	return strings.TrimSuffix(dir, "/"), port, found
}

func (p *Proxy) connectAdmin(ctx context.Context) (*pgx.Conn, error) {
	return p.connectAdminAs(ctx, adminApplicationName)
}

func (p *Proxy) connectAdminAs(ctx context.Context, applicationName string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.Connect(cctx, p.adminDSN(applicationName))
}

// install installs tashkent in the replica's database with the capture
// Config.Capture asks for, and says which one runs.
func (p *Proxy) install(ctx context.Context, conn *pgx.Conn) error {
	capture := p.cfg.Capture
	if capture == "" {
		capture = replica.CaptureAuto
	}
	if err := replica.InstallCapture(ctx, conn, capture, p.cfg.Logger); err != nil {
		return err
	}
	lang, err := replica.CaptureLanguage(ctx, conn)
	if err != nil {
		return err
	}
	p.cfg.Logger.Info("writeset capture installed", "language", lang)
	return nil
}

// startReplication installs tashkent in the database, reads the version
// its image holds and opens the certifier stream from there.
func (p *Proxy) startReplication(ctx context.Context) (*replication, error) {
	r := &replication{p: p, applier: replica.NewApplier()}
	r.cert = certifier{r}
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	if err := p.install(ctx, r.applyConn); err != nil {
		return nil, err
	}
	if err := replica.SetDDLTrust(ctx, r.applyConn, p.cfg.TrustDDLRoles); err != nil {
		return nil, err
	}
	if err := r.readRecordToken(ctx); err != nil {
		return nil, err
	}
	if err := r.loadBuiltinFunctions(ctx); err != nil {
		return nil, err
	}
	if err := p.checkDurabilitySetting(ctx, r.applyConn); err != nil {
		return nil, err
	}
	version, err := replica.ReadVersion(ctx, r.applyConn)
	if err != nil {
		return nil, err
	}
	r.seq = sequencer.New(p.origin, version)
	if err := r.openStream(version); err != nil {
		return nil, err
	}
	p.cfg.Logger.Info("replica state", "version", version, "origin", p.origin)
	return r, nil
}

func (r *replication) readRecordToken(ctx context.Context) error {
	token, err := replica.ReadRecordToken(ctx, r.applyConn)
	if err != nil {
		return err
	}
	b := []byte(token)
	r.recordToken.Store(&b)
	return nil
}

func (p *Proxy) checkDurabilitySetting(ctx context.Context, conn *pgx.Conn) error {
	var setting string
	if err := conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting); err != nil {
		return err
	}
	want := "on"
	if p.cfg.Mode == ModeMW {
		want = "off"
	}
	if setting != want {
		p.cfg.Logger.Warn("the replica's synchronous_commit does not match the durability mode",
			"mode", p.cfg.Mode, "synchronous_commit", setting, "expected", want)
	}
	return nil
}

func (r *replication) connect(ctx context.Context) error {
	apply, err := r.p.connectAdminAs(ctx, applyApplicationName)
	if err != nil {
		return fmt.Errorf("connect to the replica %s: %w", r.p.cfg.BackendAddr, err)
	}
	var started string
	if err := apply.QueryRow(ctx, `SELECT `+postmasterStartSQL).Scan(&started); err != nil {
		apply.Close(ctx)
		return fmt.Errorf("read the replica's start time: %w", err)
	}
	r.started.Store(&started)
	control, err := r.p.connectAdmin(ctx)
	if err != nil {
		apply.Close(ctx)
		return fmt.Errorf("connect to the replica %s: %w", r.p.cfg.BackendAddr, err)
	}
	r.applyConn = apply
	r.controlMu.Lock()
	if r.controlConn != nil {
		r.controlConn.Close(ctx) // closed already, or one reconnectControl raced in
	}
	r.controlConn = control
	r.controlMu.Unlock()
	return nil
}

// openStream opens the certifier stream from version. It belongs to the
// sequencer's current epoch: after a reset, what it still delivers is
// dropped.
func (r *replication) openStream(version uint64) error {
	epoch := r.seq.Epoch()
	c, err := certclient.New(certclient.Options{
		Target: r.p.cfg.Certifier, Replica: r.p.cfg.Name, ReplicaVersion: version, Push: !r.p.cfg.NoPush,
		Logger: r.p.cfg.Logger, DialOptions: r.p.cfg.CertifierDialOptions,
		OnEntries: func(entries []logentry.Entry, durable uint64) {
			r.deliver(epoch, entries, durable)
		},
	})
	if err != nil {
		return err
	}
	if old := r.certPtr.Swap(c); old != nil {
		old.Close()
	}
	return nil
}

// deliver hands entries from the certifier to the sequencer.
func (r *replication) deliver(epoch uint64, entries []logentry.Entry, durable uint64) {
	if len(entries) == 0 {
		return
	}
	origins := make([]string, len(entries))
	seqs := make([]uint64, len(entries))
	for i, e := range entries {
		h, err := logentry.HeaderOf(e.Bytes)
		if err != nil {
			panic(fmt.Sprintf("proxy: entry %d from the certifier: %v", e.Version, err))
		}
		origins[i], seqs[i] = h.Origin, h.Seq
	}
	r.seq.Deliver(epoch, entries, origins, seqs)
	r.p.metrics.delivered.Set(float64(entries[len(entries)-1].Version))
}

// catchUp waits until the replica holds every version the certifier had
// made durable when it was asked, so that clients are not admitted to a
// replica far behind (a rebuilt one, or one that was down). It shows
// progress. A certifier that does not answer is waited for: a replica that
// cannot learn the global order cannot tell how stale it is.
func (r *replication) catchUp(ctx context.Context) error {
	target, err := r.certifierDurableVersion(ctx)
	if err != nil {
		return err
	}
	start, began := r.seq.Committed(), time.Now()
	if start >= target {
		return nil
	}
	r.p.cfg.Logger.Info("catching up before admitting clients", "version", start, "target", target)
	progress := time.NewTicker(2 * time.Second)
	defer progress.Stop()
	for {
		r.certPtr.Load().RequestCatchUp() // the maintenance loop does not, while recovering
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := r.seq.WaitCommitted(cctx, target)
		cancel()
		if err == nil {
			r.p.cfg.Logger.Info("caught up", "version", r.seq.Committed(), "replayed", target-start,
				"took", time.Since(began).Round(time.Millisecond))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if e := r.broken.Load(); e != nil {
			return *e
		}
		select {
		case <-progress.C:
			done := r.seq.Committed()
			r.p.cfg.Logger.Info("catching up", "version", done, "target", target,
				"percent", 100*(done-start)/(target-start))
		default:
		}
	}
}

// certifierDurableVersion asks the certifier, retrying until it answers.
func (r *replication) certifierDurableVersion(ctx context.Context) (uint64, error) {
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := r.certPtr.Load().API().Status(sctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
		cancel()
		if err == nil {
			return st.DurableVersion, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if attempt%5 == 0 {
			r.p.cfg.Logger.Warn("waiting for the certifier", "certifier", r.p.cfg.Certifier, "err", grpctls.HintPlaintext(err))
		}
	}
}

// applyLoop applies remote versions as their turn comes, until ctx ends.
func (r *replication) applyLoop(ctx context.Context) {
	for ctx.Err() == nil {
		if r.needRecover.Load() {
			r.recover(ctx)
			continue
		}
		batch, err := r.seq.NextRemote(ctx, applyBatchEntriesMax)
		if err != nil {
			continue // reset (recovery) or shutdown
		}
		if err := r.applyBatch(ctx, batch); err != nil {
			r.handleApplyError(ctx, batch, err)
		}
	}
}

func (r *replication) applyBatch(ctx context.Context, batch []logentry.Entry) error {
	entries := make([]*pb.LogEntry, len(batch))
	for i, e := range batch {
		d, err := e.Decode()
		if err != nil {
			return err
		}
		entries[i] = d
	}
	done := make(chan error, 1)
	go func() { done <- r.applier.Apply(ctx, r.applyConn, entries) }()
	watch := time.NewTicker(lockWatchInterval)
	defer watch.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				r.seq.CommitBatch(batch)
				r.p.metrics.applied.Add(float64(len(batch)))
			}
			return err
		case <-watch.C:
			r.preemptBlockers(ctx)
		}
	}
}

// preemptBlockers aborts the local transactions that hold row locks the
// applier waits for. They would fail certification anyway: they wrote rows
// a version they have not seen also wrote (Tashkent §8.2; Postgres-R(SI)
// §4.2: remote transactions abort local ones).
func (r *replication) preemptBlockers(ctx context.Context) {
	pids, err := r.blockers(ctx)
	if err != nil {
		return
	}
	for _, pid := range pids {
		if s := r.p.sessionByPID(uint32(pid)); s != nil {
			s.doom()
			continue
		}
		r.p.cfg.Logger.Warn("a remote writeset waits for a lock held by a session that does not go through the proxy",
			"pid", pid, "hint", "every write to a replicated database must go through its tashkent proxy")
	}
}

func (r *replication) blockers(ctx context.Context) ([]int32, error) {
	r.controlMu.Lock()
	defer r.controlMu.Unlock()
	var pids []int32
	err := r.controlConn.QueryRow(ctx, `SELECT pg_catalog.pg_blocking_pids($1)`, r.applyConn.PgConn().PID()).Scan(&pids)
	return pids, err
}

// cancelBackend cancels the statement a backend is running.
func (r *replication) cancelBackend(pid uint32) {
	r.controlMu.Lock()
	defer r.controlMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r.controlConn.Exec(ctx, `SELECT pg_catalog.pg_cancel_backend($1)`, int32(pid))
}

func (r *replication) handleApplyError(ctx context.Context, batch []logentry.Entry, err error) {
	var pgErr *pgconn.PgError
	switch {
	case ctx.Err() != nil:
	case r.applyConn.IsClosed() && r.reconnectApplier(ctx):
		r.p.cfg.Logger.Warn("lost the applier's database connection; reconnected (the database did not restart)", "err", err)
	case r.applyConn.IsClosed() || !errors.As(err, &pgErr):
		r.p.cfg.Logger.Warn("lost the replica's database while applying; recovering", "err", err)
		r.needRecover.Store(true)
	case replica.IsVersionGap(pgErr.Code, pgErr.SchemaName, pgErr.TableName):
		r.requestRecovery("the database lacks versions below the ones to apply")
	case pgErr.Code == "40P01" || pgErr.Code == "40001" || pgErr.Code == "55P03" || pgErr.Code == codeQueryCanceled:
		r.p.cfg.Logger.Info("remote apply interrupted; retrying", "first_version", batch[0].Version, "code", pgErr.Code)
	case r.skipRecorded(ctx, batch):
	default:
		r.p.cfg.Logger.Error("the replica cannot apply a committed version; it stops applying and needs to be rebuilt",
			"first_version", batch[0].Version, "err", err)
		wrapped := fmt.Errorf("apply versions from %d: %w", batch[0].Version, err)
		r.broken.Store(&wrapped)
		r.seq.Halt(wrapped) // sessions waiting for their turn are told, not left hanging
		<-ctx.Done()
	}
}

// maintainLoop bounds staleness (Tashkent §6.2) and notices a database
// that went away while nothing was being applied.
func (r *replication) maintainLoop(ctx context.Context) {
	tick := time.NewTicker(r.p.cfg.Staleness)
	defer tick.Stop()
	lastPrune := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if r.recovering.Load() {
			continue
		}
		r.certPtr.Load().RequestCatchUp()
		if time.Since(lastPrune) > appliedPruneInterval {
			r.pruneApplied(ctx)
			lastPrune = time.Now()
		}
		if err := r.ping(ctx); err != nil && ctx.Err() == nil && !r.needRecover.Load() {
			if r.reconnectControl(ctx) {
				r.p.cfg.Logger.Warn("lost the proxy's control connection to the database; reconnected (the database did not restart)", "err", err)
				continue
			}
			r.requestRecovery("the replica's database does not answer: " + err.Error())
		}
	}
}

// pruneApplied keeps tashkent.applied small: only the highest version is
// needed to know what the database holds; a few more help debugging.
func (r *replication) pruneApplied(ctx context.Context) {
	r.controlMu.Lock()
	defer r.controlMu.Unlock()
	if _, err := replica.PruneApplied(ctx, r.controlConn, appliedVersionsKept); err != nil {
		r.p.cfg.Logger.Warn("prune tashkent.applied", "err", err)
	}
}

// postmasterStartSQL is the database's start time as text that every
// session prints alike: seconds since the epoch. A timestamptz printed as
// text follows the session's TimeZone and DateStyle, which a client sets
// in its startup packet (JDBC sends the JVM's zone): its session would
// find another start time than the proxy's and be taken for one on a
// restarted database (TestASessionInItsOwnTimeZoneIsServed).
const postmasterStartSQL = `(EXTRACT(EPOCH FROM pg_catalog.pg_postmaster_start_time()))::pg_catalog.text`

func (r *replication) postmasterStart() string {
	if p := r.started.Load(); p != nil {
		return *p
	}
	return ""
}

// skipRecorded handles remote versions the database holds already, and
// reports whether it could. A session whose connection to the database
// broke after its COMMIT was sent cannot tell whether the database
// committed; it hands its version to the applier (Sequencer.Abandon), as
// if not. If the database did commit it, the version's writes and its
// record in tashkent.applied are there (record_version commits with them),
// and applying it again fails: on that record, or before it, on DDL that
// cannot run twice (CREATE TABLE: 42P07). The record is the truth: the
// versions it covers are marked committed and the rest are applied next,
// instead of halting the replica for a commit it holds. The certifier
// never delivers a version at or below the committed one, so only such a
// version can be found recorded; any other error leaves the record below
// the batch, and the replica stops as before.
func (r *replication) skipRecorded(ctx context.Context, batch []logentry.Entry) bool {
	recorded, err := replica.ReadVersion(ctx, r.applyConn)
	if err != nil {
		r.p.cfg.Logger.Warn("could not read the database's version after an apply failed", "err", err)
		return false
	}
	held := 0
	for held < len(batch) && batch[held].Version <= recorded {
		held++
	}
	if held == 0 {
		return false // the record does not explain it: stop, as for any refused version
	}
	r.p.cfg.Logger.Info("the database holds versions the applier was given (a local commit whose answer was lost); they count as applied",
		"first_version", batch[0].Version, "recorded", recorded)
	r.seq.CommitBatch(batch[:held])
	r.p.metrics.applied.Add(float64(held))
	return true
}

// reconnectApplier replaces the applier's connection after it was lost
// while the database stayed up: its backend was terminated
// (pg_terminate_backend, a timeout, an operator), but every commit is still
// there, so the sessions go on and nothing is replayed. The batch being
// applied is applied again next; if its COMMIT had gone through, the
// record says so (skipRecorded). It reports false, leaving the old
// connection, when the database restarted meanwhile or cannot be reached:
// the caller then recovers the replica.
func (r *replication) reconnectApplier(ctx context.Context) bool {
	conn, ok := r.connectUnrestarted(ctx, applyApplicationName)
	if !ok {
		return false
	}
	if err := replica.PrepareApplySession(ctx, conn); err != nil {
		conn.Close(ctx)
		return false
	}
	r.applyConn.Close(ctx)
	r.applyConn = conn
	r.applier.Invalidate()
	return true
}

// reconnectControl is reconnectApplier for the control connection (lock
// watch, cancels, health checks).
func (r *replication) reconnectControl(ctx context.Context) bool {
	conn, ok := r.connectUnrestarted(ctx, adminApplicationName)
	if !ok {
		return false
	}
	r.controlMu.Lock()
	if r.needRecover.Load() || r.recovering.Load() {
		// The replica is being recovered, which connects anew.
		r.controlMu.Unlock()
		conn.Close(ctx)
		return false
	}
	old := r.controlConn
	r.controlConn = conn
	r.controlMu.Unlock()
	old.Close(ctx)
	return true
}

// connectUnrestarted opens a connection to the database if it still holds
// the state the sequencer counts on: the same postmaster (its start time
// is the one recorded at the last (re)connect), and every version the
// sequencer counts as committed. The second check catches what the first
// cannot: after a backend crashed, PostgreSQL reinitializes and replays
// its WAL under the same postmaster, and commits not yet flushed
// (synchronous_commit=off) are gone.
func (r *replication) connectUnrestarted(ctx context.Context, applicationName string) (*pgx.Conn, bool) {
	committed := r.seq.Committed() // before the database's record is read
	conn, err := r.p.connectAdminAs(ctx, applicationName)
	if err != nil {
		return nil, false
	}
	qctx, cancel := context.WithTimeout(ctx, reconnectCheckTimeout)
	defer cancel()
	var started string
	if err := conn.QueryRow(qctx, `SELECT `+postmasterStartSQL).Scan(&started); err != nil || started != r.postmasterStart() {
		conn.Close(ctx)
		return nil, false
	}
	if recorded, err := replica.ReadVersion(qctx, conn); err != nil || recorded < committed {
		conn.Close(ctx)
		return nil, false
	}
	return conn, true
}

// reconnectCheckTimeout bounds connectUnrestarted's questions to a
// database that accepted the connection: as long as the health check's
// ping may take.
const reconnectCheckTimeout = 5 * time.Second

// requestRecovery makes the applier recover the replica (recover) at once:
// waiters are woken, and nothing commits until the recorded version is
// read back and the stream reopened from it.
func (r *replication) requestRecovery(why string) {
	if r.needRecover.Swap(true) {
		return
	}
	r.p.cfg.Logger.Warn("recovering the replica", "why", why)
	r.seq.Reset(r.seq.Committed()) // wakes the applier and every waiting session
}

func (r *replication) ping(ctx context.Context) error {
	r.controlMu.Lock()
	defer r.controlMu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.controlConn.Ping(pctx)
}

// recover brings the replica back after its database restarted (Tashkent
// §7.1 case 2, §7.2): PostgreSQL recovered its own consistent state, which
// may lack the last commits (synchronous_commit=off); the version recorded
// with them says where it stands, and the certifier's log supplies the rest.
func (r *replication) recover(ctx context.Context) {
	r.recovering.Store(true)
	r.p.closeSessions("the replica's database restarted; reconnect")
	delay := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := r.reconnectAndResume(ctx)
		if err == nil {
			return
		}
		r.p.cfg.Logger.Warn("waiting for the replica's database", "err", err, "retry_in", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		delay = min(2*delay, reconnectDelayMax)
	}
}

func (r *replication) reconnectAndResume(ctx context.Context) error {
	r.closeConns(ctx)
	if err := r.connect(ctx); err != nil {
		return err
	}
	version, err := replica.ReadVersion(ctx, r.applyConn)
	if err != nil {
		return err
	}
	if err := r.readRecordToken(ctx); err != nil {
		return err
	}
	if err := replica.PrepareApplySession(ctx, r.applyConn); err != nil {
		return err
	}
	r.applier.Invalidate()
	lost := r.seq.Committed() - min(version, r.seq.Committed())
	r.seq.Reset(version)
	if err := r.openStream(version); err != nil {
		return err
	}
	r.p.cfg.Logger.Info("replica recovered; catching up from the certifier", "version", version, "versions_to_replay", lost)
	r.needRecover.Store(false)
	go func() {
		// Clients stay out (57P03) until the lost versions are back.
		r.catchUp(ctx)
		r.recovering.Store(false)
	}()
	return nil
}

func (r *replication) close(ctx context.Context) {
	if c := r.certPtr.Load(); c != nil {
		c.Close()
	}
	r.closeConns(ctx)
}

func (r *replication) closeConns(ctx context.Context) {
	if r.applyConn != nil {
		r.applyConn.Close(ctx)
	}
	r.controlMu.Lock()
	if r.controlConn != nil {
		r.controlConn.Close(ctx)
	}
	r.controlMu.Unlock()
}
