package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"text/tabwriter"

	"google.golang.org/grpc"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// The certifier group of `tashkent up --certifiers N` (Tashkent §7.3): N
// `tashkent certifier --id K --peers ...` processes, member 1 recorded as
// State.Certifier (in <dir>/certifier, as a single certifier would be) and
// members 2..N in State.MoreCertifiers (<dir>/certifier-K). Agents are
// given every member and follow the leader.

// groupSizes are the supported group sizes: a majority survives one
// failure with 3 members, two with 5.
var groupSizes = map[int]bool{0: true, 1: true, 3: true, 5: true}

func addCertifierMembers(st *State, dir string, o Options) error {
	if !groupSizes[o.Certifiers] {
		return fmt.Errorf("--certifiers must be 1, 3 or 5, not %d", o.Certifiers)
	}
	if o.Certifiers <= 1 {
		return nil
	}
	st.Certifier.ID = 1
	for k := 2; k <= o.Certifiers; k++ {
		cd := filepath.Join(dir, "certifier-"+strconv.Itoa(k))
		st.MoreCertifiers = append(st.MoreCertifiers, &Certifier{ID: k, DataDir: cd, Log: filepath.Join(cd, "certifier.log")})
	}
	return nil
}

// startCertifierGroup starts every member not running. Their gRPC ports are
// picked first: every member is told every member's address.
func (u *upper) startCertifierGroup(ctx context.Context) error {
	for _, c := range u.st.CertifierMembers() {
		if c.Port == 0 {
			p, err := u.freePort()
			if err != nil {
				return err
			}
			u.mu.Lock()
			c.Port = p
			u.mu.Unlock()
		}
	}
	if err := u.save(); err != nil {
		return err
	}
	for _, c := range u.st.CertifierMembers() {
		if err := u.startMember(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (u *upper) startMember(ctx context.Context, c *Certifier) error {
	what := fmt.Sprintf("certifier %d", c.ID)
	if c.PID != 0 && certifierIdentity(c).check(c.PID) == nil {
		u.progress("%s: already running (pid %d, %s)", what, c.PID, hostPort(c.Port))
		return nil
	}
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return err
	}
	err := u.startDetached(ctx, what, c.Log, []*int{&c.Port, &c.MetricsPort},
		func() ([]string, error) {
			return u.certifierCommand(c, fmt.Sprintf("Member %d of the certifier group", c.ID))
		},
		func(pid int) { c.PID = pid },
		u.certifierServes(&c.Port))
	if err != nil {
		return err
	}
	u.progress("%s: started (pid %d, %s, log %s)", what, c.PID, hostPort(c.Port), c.Log)
	return nil
}

// groupStatus fills in every member and judges the group: running and
// reachable when every member runs and a leader answers.
func groupStatus(ctx context.Context, st *State, c *CertifierStatus) {
	c.Members = make([]MemberStatus, 0, len(st.MoreCertifiers)+1)
	allUp := true
	dial, dialErr := st.CertifierDialOptions()
	var group []*pb.Member // the members as the group knows them
	for _, m := range st.CertifierMembers() {
		ms := MemberStatus{ID: m.ID, Addr: hostPort(m.Port), Process: ProcStatus{PID: m.PID, Port: m.Port, Log: m.Log}}
		ms.Process.Running, ms.Process.Detail = tashkentRunning(certifierIdentity(m), m.PID)
		if ms.Process.Running {
			cctx, cancel := context.WithTimeout(ctx, statusTimeout)
			rep, err := QueryCertifier(cctx, ms.Addr, dial...)
			cancel()
			err = errors.Join(dialErr, err)
			if err != nil {
				ms.Error = err.Error()
			} else {
				ms.Reachable = true
				ms.Role, ms.Term, ms.RaftIndex, ms.AppliedIndex, ms.DurableVersion = rep.Role, rep.Term, rep.RaftIndex, rep.AppliedIndex, rep.DurableVersion
				if group == nil || rep.Role == "leader" {
					group = rep.Members
				}
			}
		}
		allUp = allUp && ms.Process.Running && ms.Reachable
		c.Members = append(c.Members, ms)
	}
	if len(group) > 0 {
		allUp = addOnlineMembers(ctx, c, group, dial)
	}
	c.Process.Running = allUp
	c.Process.Detail = ""
	if !allUp {
		c.Process.Detail = "not every member of the certifier group is up"
	}
}

func writeMembers(w io.Writer, c CertifierStatus) {
	fmt.Fprintf(w, "certifier group of %d members\n", len(c.Members))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MEMBER\tROLE\tTERM\tRAFT INDEX\tAPPLIED\tDURABLE VERSION\tPROCESS\tADDR")
	for _, m := range c.Members {
		role := m.Role
		if !m.Reachable {
			role = "unreachable"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", m.ID, role, m.Term, m.RaftIndex, m.AppliedIndex, m.DurableVersion, procWord(m.Process), m.Addr)
	}
	tw.Flush()
}

// addOnlineMembers reconciles the members `tashkent up` started with the
// group's own configuration, which `tashkent certifier members add|remove`
// changes online: a member the group no longer has is shown as removed
// (and does not count against the group being up), and a member added
// online, which cluster.json does not know, is listed and asked for its
// status. It reports whether every member of the group answered.
func addOnlineMembers(ctx context.Context, c *CertifierStatus, group []*pb.Member, dial []grpc.DialOption) bool {
	inGroup := map[int]string{}
	for _, m := range group {
		inGroup[int(m.Id)] = m.Addr
	}
	allUp := true
	for i := range c.Members {
		ms := &c.Members[i]
		if _, ok := inGroup[ms.ID]; !ok {
			ms.Role = "removed"
			continue
		}
		delete(inGroup, ms.ID)
		allUp = allUp && ms.Process.Running && ms.Reachable
	}
	for id, addr := range inGroup {
		ms := MemberStatus{ID: id, Addr: addr, Process: ProcStatus{Detail: "added online (not started by tashkent up)"}}
		cctx, cancel := context.WithTimeout(ctx, statusTimeout)
		rep, err := QueryCertifier(cctx, addr, dial...)
		cancel()
		if err != nil {
			ms.Error = err.Error()
		} else {
			ms.Reachable, ms.Process.Running, ms.Process.PID = true, true, int(rep.Pid)
			ms.Role, ms.Term, ms.RaftIndex, ms.AppliedIndex, ms.DurableVersion = rep.Role, rep.Term, rep.RaftIndex, rep.AppliedIndex, rep.DurableVersion
		}
		allUp = allUp && ms.Reachable
		c.Members = append(c.Members, ms)
	}
	sort.Slice(c.Members, func(i, j int) bool { return c.Members[i].ID < c.Members[j].ID })
	return allUp
}
