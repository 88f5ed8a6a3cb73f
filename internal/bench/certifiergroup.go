package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

// A tashkent system's certifier group (Config.Certifiers 3 or 5): N
// `tashkent certifier --id K --peers ...` processes on loopback, as
// `tashkent up --certifiers N` runs them. Member K keeps its log in
// <system>/certifier-K and writes certifier-K.log. Every member keeps
// every CPU (no --shares-host, no --max-procs: see
// cluster.certifierSettings), and gets every --certifier-arg.

// groupPollInterval is how often the bench asks the members whether one
// of them leads.
const groupPollInterval = 50 * time.Millisecond

// checkCertifiers checks the certifier group size of the tashkent
// systems, and that nothing else asked for rules a group out.
func checkCertifiers(n int, delay time.Duration) error {
	switch n {
	case 0, 1, 3, 5:
	default:
		return fmt.Errorf("--certifiers %d: must be 1 (a single certifier), 3 or 5 (a certifier group: a majority survives one failure with 3, two with 5)", n)
	}
	if n > 1 && delay > 0 {
		return errors.New("a delay between hosts (--delay) relays the agents' link to a single certifier; a group member " +
			"would send the agents to the leader's own address, around the relay. To delay the links between the members, " +
			"give --certifier-arg=--unsafe-fault-peer-delay=D")
	}
	return nil
}

// certifierGroupNote is the group's part of a report's header; "" for a
// single certifier.
func certifierGroupNote(n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(", tashkent certifier group of %d", n)
}

// startCertifierGroup starts the n members of the system's certifier
// group and returns once one of them leads. Every member is told every
// member's address, so all n ports are picked before the first starts;
// when one was taken meanwhile, every member is stopped and the group
// starts again on other ports.
func (s *system) startCertifierGroup(ctx context.Context, r *runner, n int) error {
	what := s.label + " certifier group"
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(n)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		err = s.runCertifierGroup(ctx, r, ports)
		if err == nil {
			return nil
		}
		if !slices.ContainsFunc(s.certifiers, (*proc).addrInUse) || attempt >= startAttempts {
			return err
		}
		if serr := s.stopCertifiers(); serr != nil {
			return errors.Join(err, serr)
		}
	}
}

// runCertifierGroup starts one member on each port, recording each in
// s.certifiers as it runs, waits until each serves its Status, then until
// one leads.
func (s *system) runCertifierGroup(ctx context.Context, r *runner, ports []int) error {
	addrs := make([]string, len(ports))
	peers := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		peers[i] = fmt.Sprintf("%d=%s", i+1, addrs[i])
	}
	r.mu.Lock()
	s.certifiers = nil
	s.certAddr = strings.Join(addrs, ",")
	r.mu.Unlock()
	for i, addr := range addrs {
		p, err := s.startMember(r, i+1, addr, strings.Join(peers, ","))
		if err != nil {
			return err
		}
		r.mu.Lock()
		s.certifiers = append(s.certifiers, p)
		r.mu.Unlock()
	}
	for i, p := range s.certifiers {
		if err := p.waitReady(ctx, readyTimeout, servedBy(addrs[i], p.pid())); err != nil {
			return err
		}
	}
	return s.awaitLeader(ctx, readyTimeout)
}

// startMember starts member id of the group, listening on addr.
func (s *system) startMember(r *runner, id int, addr, peers string) (*proc, error) {
	name := "certifier-" + strconv.Itoa(id)
	dataDir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	args := append(r.profileArgs(s.fileName()+"-"+name), "--log-level=warn", "certifier",
		"--id", strconv.Itoa(id), "--peers", peers,
		"--data-dir", dataDir, "--listen", addr, "--metrics-listen", "")
	args = append(args, r.certifierFsyncDelayArgs()...)
	args = append(args, r.cfg.CertifierArgs...)
	return startProc(fmt.Sprintf("%s certifier %d", s.label, id), r.cfg.Binary, args, filepath.Join(s.dir, name+".log"))
}

// servedBy checks that the certifier at addr is the process pid, not one
// that held the port before it.
func servedBy(addr string, pid int) func(context.Context) error {
	return func(ctx context.Context) error {
		st, err := cluster.QueryCertifier(ctx, addr)
		if err != nil {
			return err
		}
		if int(st.Pid) != pid {
			return fmt.Errorf("%s is served by pid %d, not by the certifier just started", addr, st.Pid)
		}
		return nil
	}
}

// awaitLeader waits until a member of the group answers as its leader;
// it fails at once when a member exits.
func (s *system) awaitLeader(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		for _, p := range s.certifiers {
			if p.exited() {
				return fmt.Errorf("%s (pid %d) exited while the group elected a leader\n--- %s (tail) ---\n%s",
					p.what, p.pid(), p.child.LogPath, p.logTail())
			}
		}
		st, err := cluster.QueryCertifier(ctx, s.certAddr)
		if err == nil && st.Role == "leader" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("no member leads (member %d answers as %q, leader %d)", st.MemberId, st.Role, st.LeaderId)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s certifier group: no leader after %s (last check: %v)", s.label, timeout, last)
		case <-time.After(groupPollInterval):
		}
	}
}

// stopCertifiers stops the certifier, or every member of the group at
// once, by the PIDs the bench started them with.
func (s *system) stopCertifiers() error {
	errs := make([]error, len(s.certifiers))
	var wg sync.WaitGroup
	for i, p := range s.certifiers {
		wg.Go(func() { errs[i] = p.stop(certGrace) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
