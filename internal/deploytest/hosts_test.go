package deploytest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/netns"
	"github.com/tashkent-db/tashkent/internal/pgext"
	"github.com/tashkent-db/tashkent/internal/pgserver"
	"github.com/tashkent-db/tashkent/internal/process"
	"github.com/tashkent-db/tashkent/internal/testbin"
)

// The hosts. Each is a network namespace joined to a bridge by a veth
// pair, with the address 10.214.N.K (the guide's 10.0.0.K); the test
// itself sits on the bridge at 10.214.N.10, the guide's monitoring host.
// Names carry this process's PID, so that concurrent runs do not collide
// and a later run can remove what a killed one left (sweepStale).

const (
	hostCount = 3
	// namePrefix starts the names of namespaces and directories; link
	// names (15 bytes at most) start with linkPrefix.
	namePrefix = "tashkent-deploy-"
	linkPrefix = "tkd"
	// pgPort is every host's PostgreSQL port, as in the guide: each host
	// has its own addresses.
	pgPort = 5432
	// processStopTimeout bounds a process's exit after SIGTERM.
	processStopTimeout = 20 * time.Second
	// logTailBytes is how much of each log a failed test prints.
	logTailBytes = 3000
)

// lab is the test's three hosts and what they share.
type lab struct {
	t      *testing.T
	dir    string // every host's files, the CA and the binary
	prefix string // the test's network, standing in for 10.0.0.
	bridge string
	bin    string // tashkent, where the hosts' users can run it
	pgBin  string // PostgreSQL with the extension (internal/pgext)
	certs  string // deploy/make-certs.sh's output
	hosts  []*host

	// The guide's users: PostgreSQL and the agent run as postgres; the
	// certifier as its own unprivileged user (tashkent in the guide; the
	// test uses nobody, as it adds no users to the machine).
	postgresUser, certifierUser *syscall.Credential
}

// host is one host: its namespace, its link to the bridge, its files and
// its three processes.
type host struct {
	k      int
	ns     *netns.Namespace
	veth   netns.Veth
	addr   string
	dir    string // stands in for the host's /
	loc    localizer
	pg     *pgserver.Server
	agent  *proc
	member *proc
}

func (h *host) String() string { return fmt.Sprintf("host%d (%s)", h.k, h.addr) }

func (h *host) path(p string) string { return filepath.Join(h.dir, p) }

// socketDSN is the host's PostgreSQL as the superuser through its Unix
// socket: the test's own way in, which no partition cuts.
func (h *host) socketDSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", h.pg.DataDir(), pgPort)
}

// proc is a process the test started on a host, by PID.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// newLab makes the network, the directories and the TLS files; cleanups
// stop every process by PID and remove everything, also when the test
// fails.
func newLab(t *testing.T) *lab {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if os.Geteuid() != 0 {
		t.Fatal("the deployment test makes network namespaces and runs PostgreSQL as postgres: it needs root (CI runs as root)")
	}
	sweepStale(t)
	pid := os.Getpid()
	l := &lab{t: t, prefix: fmt.Sprintf("10.214.%d.", pid%250), bridge: fmt.Sprintf("%s%dbr", linkPrefix, pid)}
	l.postgresUser = credential(t, "postgres")
	l.certifierUser = credential(t, "nobody")
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", namePrefix, pid))
	if err != nil {
		t.Fatal(err)
	}
	l.dir = dir
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the hosts' files and logs stay in %s until the next run", dir)
			return
		}
		os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l.bin = installBinary(t, filepath.Join(dir, "bin"))
	if l.pgBin, err = pgext.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := netns.AddBridge(ctx, l.bridge, l.prefix+"10/24"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.DeleteLink(context.Background(), l.bridge) })
	var addrs []string
	for k := 1; k <= hostCount; k++ {
		h := l.addHost(ctx, k)
		addrs = append(addrs, h.addr)
	}
	l.certs = filepath.Join(dir, "tls")
	run(t, exec.CommandContext(ctx, "sh", append([]string{filepath.Join(repoRoot, "deploy", "make-certs.sh"), l.certs}, addrs...)...))
	for _, h := range l.hosts {
		l.installHostFiles(ctx, h)
	}
	return l
}

// addHost makes host k's namespace and link, and its directories.
func (l *lab) addHost(ctx context.Context, k int) *host {
	t := l.t
	pid := os.Getpid()
	ns, err := netns.Add(ctx, fmt.Sprintf("%s%d-h%d", namePrefix, pid, k))
	if err != nil {
		t.Fatal(err)
	}
	h := &host{k: k, ns: ns, addr: l.prefix + strconv.Itoa(k), dir: filepath.Join(l.dir, fmt.Sprintf("host%d", k))}
	l.hosts = append(l.hosts, h)
	t.Cleanup(func() { l.removeHost(h) })
	h.veth = netns.Veth{
		Outside: fmt.Sprintf("%s%dh%d", linkPrefix, pid, k), Inside: fmt.Sprintf("%s%dn%d", linkPrefix, pid, k),
		InsideAddr: h.addr + "/24", Bridge: l.bridge,
	}
	if err := netns.AddVeth(ctx, ns, h.veth); err != nil {
		t.Fatal(err)
	}
	h.loc = localizer{prefix: l.prefix, root: h.dir, socket: h.path("pgdata")}
	for _, d := range []string{"etc/tashkent/tls", "var/lib/tashkent", "log"} {
		if err := os.MkdirAll(h.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The certifier's state directory belongs to its user, as systemd's
	// StateDirectory= makes it.
	if err := chown(h.path("var/lib/tashkent"), l.certifierUser, 0o700); err != nil {
		t.Fatal(err)
	}
	return h
}

// installHostFiles puts onto host h what the guide installs: its TLS
// files with their owners, its config files, and its firewall.
func (l *lab) installHostFiles(ctx context.Context, h *host) {
	t := l.t
	tls := h.path("etc/tashkent/tls")
	owners := map[string]*syscall.Credential{
		"ca.crt": nil, "postgresql.crt": nil, "postgresql.key": l.postgresUser,
		fmt.Sprintf("replica%d.crt", h.k): nil, fmt.Sprintf("replica%d.key", h.k): l.postgresUser,
		fmt.Sprintf("certifier-%d.crt", h.k): nil, fmt.Sprintf("certifier-%d.key", h.k): l.certifierUser,
	}
	for name, owner := range owners {
		mode := os.FileMode(0o644)
		if owner != nil {
			mode = 0o600
		}
		if err := copyFile(filepath.Join(l.certs, fmt.Sprintf("host%d", h.k), name), filepath.Join(tls, name), owner, mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, sub := range []string{"agent", "certifier"} {
		if err := renderConfig(sub, h.k, h.loc, h.path("etc/tashkent/"+sub+".toml")); err != nil {
			t.Fatal(err)
		}
	}
	rules, err := localizedFile("config/nftables.conf", h.loc)
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := h.path("etc/tashkent.nft")
	if err := os.WriteFile(rulesFile, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.ns.Run(ctx, "nft", "-f", rulesFile); err != nil {
		t.Fatalf("%s: load the guide's firewall (deploy/config/nftables.conf; nft is in Debian's nftables package): %v", h, err)
	}
}

// initPostgres makes host h's PostgreSQL cluster with the guide's
// settings (deploy/config/postgresql.conf) and pg_hba.conf lines.
func (l *lab) initPostgres(ctx context.Context, h *host) error {
	settings, err := postgresSettings(h.loc)
	if err != nil {
		return err
	}
	h.pg, err = pgserver.Init(ctx, pgserver.Config{
		DataDir: h.path("pgdata"), Port: pgPort, Settings: settings, BinDir: l.pgBin, NoSync: true,
	})
	if err != nil {
		return err
	}
	hba, err := localizedFile("config/pg_hba.conf", h.loc)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(h.pg.DataDir(), "pg_hba.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, "\n"+hba)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// startPostgres starts host h's PostgreSQL inside its namespace and waits
// until it accepts connections.
func (l *lab) startPostgres(ctx context.Context, h *host) error {
	if err := h.ns.Do(func() error { return h.pg.Start(ctx) }); err != nil {
		return fmt.Errorf("%s: start PostgreSQL: %w", h, err)
	}
	return nil
}

// startMember starts host h's certifier group member from its config
// file, as tashkent-certifier.service does.
func (l *lab) startMember(h *host) error {
	p, err := l.start(h, "certifier", l.certifierUser, "certifier", "--config", h.path("etc/tashkent/certifier.toml"))
	h.member = p
	return err
}

// startAgent starts host h's agent from its config file, as
// tashkent-agent.service does.
func (l *lab) startAgent(h *host) error {
	p, err := l.start(h, "agent", l.postgresUser, "agent", "--config", h.path("etc/tashkent/agent.toml"))
	h.agent = p
	return err
}

// start starts tashkent with args inside host h's namespace as user,
// output appended to the host's log/<name>.log.
func (l *lab) start(h *host, name string, user *syscall.Credential, args ...string) (*proc, error) {
	logPath := h.path("log/" + name + ".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- %s: %s %s\n", time.Now().Format(time.RFC3339Nano), l.bin, strings.Join(args, " "))
	cmd := exec.Command(l.bin, args...)
	cmd.Dir = h.dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + h.dir}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: user, Setsid: true}
	if err := h.ns.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", h, name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// killHost kills every process of host h with SIGKILL, as a power cut
// would, and waits until they are gone.
func (l *lab) killHost(h *host) error {
	var errs []error
	for _, p := range []*proc{h.agent, h.member} {
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, h.pg.Kill9())
	for _, p := range []*proc{h.agent, h.member} {
		select {
		case <-p.done:
		case <-time.After(processStopTimeout):
			errs = append(errs, fmt.Errorf("%s's %s (pid %d) did not exit after SIGKILL", h, p.name, p.pid()))
		}
	}
	return errors.Join(errs...)
}

// stop ends p with SIGTERM, then SIGKILL, by its PID.
func (p *proc) stop() {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(processStopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// removeHost stops host h's processes (agent, certifier member,
// PostgreSQL: the guide's stop order), printing their logs' ends if the
// test failed, and removes its namespace and link.
func (l *lab) removeHost(h *host) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range []*proc{h.agent, h.member} {
		if p == nil {
			continue
		}
		p.stop()
		if l.t.Failed() {
			l.t.Logf("%s: tail of %s:\n%s", h, p.log, process.LogTail(p.log, 0, logTailBytes))
		}
	}
	if h.pg != nil {
		if l.t.Failed() {
			l.t.Logf("%s: tail of %s:\n%s", h, h.pg.LogPath(), h.pg.LogTail(logTailBytes))
		}
		if err := h.pg.Stop(ctx); err != nil {
			l.t.Errorf("%s: stop PostgreSQL: %v", h, err)
		}
	}
	_ = netns.DeleteLink(ctx, h.veth.Outside)
	_ = h.ns.Delete(ctx)
}

// partition cuts host h from the bridge (its link down), or heals it.
func (l *lab) partition(ctx context.Context, h *host, cut bool) error {
	return netns.SetLink(ctx, h.veth.Outside, !cut)
}

// sweepStale removes what runs that a killed earlier run left: the
// processes in its namespaces (by the PIDs `ip netns pids` lists), the
// namespaces, their links and directories.
func sweepStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, err := netns.List(ctx, namePrefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		owner, ok := ownerPID(strings.TrimPrefix(name, namePrefix))
		if !ok || process.Alive(owner) {
			continue
		}
		ns := &netns.Namespace{Name: name}
		pids, _ := ns.PIDs(ctx)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Logf("removing network namespace %s of a run that ended (pid %d), and its %d process(es)", name, owner, len(pids))
		_ = ns.Delete(ctx)
		_ = netns.DeleteLink(ctx, fmt.Sprintf("%s%dbr", linkPrefix, owner))
		for k := 1; k <= hostCount; k++ {
			_ = netns.DeleteLink(ctx, fmt.Sprintf("%s%dh%d", linkPrefix, owner, k))
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), namePrefix+"*"))
	for _, d := range dirs {
		if owner, ok := ownerPID(strings.TrimPrefix(filepath.Base(d), namePrefix)); ok && !process.Alive(owner) {
			os.RemoveAll(d)
		}
	}
}

// ownerPID reads the PID at the start of "PID-...".
func ownerPID(s string) (int, bool) {
	head, _, _ := strings.Cut(s, "-")
	pid, err := strconv.Atoi(head)
	return pid, err == nil && pid > 0
}

// installBinary puts the test's tashkent binary where the hosts' users
// can run it (the build's own directory is private to root).
func installBinary(t *testing.T, dir string) string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "tashkent")
	if err := copyFile(testbin.Path(t), dst, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// copyFile copies src to dst with mode, owned by owner (root if nil).
func copyFile(src, dst string, owner *syscall.Credential, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return chown(dst, owner, mode)
}

func chown(path string, owner *syscall.Credential, mode os.FileMode) error {
	if owner != nil {
		if err := os.Chown(path, int(owner.Uid), int(owner.Gid)); err != nil {
			return err
		}
	}
	return os.Chmod(path, mode)
}

func credential(t *testing.T, name string) *syscall.Credential {
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("the deployment test runs processes as %s: %v", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
}

func run(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// hostPort joins an address and a port.
func hostPort(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }
