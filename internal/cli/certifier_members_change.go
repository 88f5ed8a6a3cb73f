package cli

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/grpctls"
)

// `tashkent certifier members add|remove`: online membership of a
// certifier group (internal/certgroup/members.go; docs/OPERATIONS.md).

// memberChangeAttempts bounds how often a change follows a new leader (an
// election, or the leader handing over before removing itself).
const memberChangeAttempts = 10

// memberChangeTimeout bounds one change, a learner's catch-up included.
const memberChangeTimeout = 3 * time.Minute

func newCertifierMembersAddCommand() *cobra.Command {
	var (
		targets, addr string
		id            uint64
		certTLS       grpctls.Files
	)
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add a member to a certifier group: as a learner, promoted to voter once caught up",
		Long: `Adds member --id at --addr to the certifier group that --certifier reaches.
Start the new member first, with --join, its own --id and --listen, and --peers
listing the members it can reach (itself included). It is added as a learner,
catches up by the leader's snapshot plus the log, and is then promoted to a
voter. The id must never have been used in this group before.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if targets == "" || id == 0 || addr == "" {
				return fmt.Errorf("--certifier, --id (above 0) and --addr are required")
			}
			dial, err := certifierDial(certTLS)
			if err != nil {
				return err
			}
			return changeMember(cmd.Context(), targets, dial, cmd.OutOrStdout(), func(ctx context.Context, c pb.CertifierGroupClient) (*pb.MemberChangeReply, error) {
				return c.AddMember(ctx, &pb.AddMemberRequest{Id: id, Addr: addr})
			})
		},
	}
	cmd.Flags().StringVar(&targets, "certifier", "", "addresses of current members, host:port,...")
	cmd.Flags().Uint64Var(&id, "id", 0, "the new member's id (never used in this group before)")
	cmd.Flags().StringVar(&addr, "addr", "", "the new member's address, host:port (its --listen)")
	certTLS.AddFlags(cmd.Flags())
	return cmd
}

func newCertifierMembersRemoveCommand() *cobra.Command {
	var (
		targets string
		id      uint64
		certTLS grpctls.Files
	)
	cmd := &cobra.Command{
		Use:   "remove",
		Short: "Remove a member from a certifier group (the leader hands its leadership over first)",
		Long: `Removes member --id from the certifier group that --certifier reaches. Removing
the leader works: it hands its leadership to the most up-to-date voter first.
Stop the removed member's process afterwards; its id must not be reused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if targets == "" || id == 0 {
				return fmt.Errorf("--certifier and --id (above 0) are required")
			}
			dial, err := certifierDial(certTLS)
			if err != nil {
				return err
			}
			return changeMember(cmd.Context(), targets, dial, cmd.OutOrStdout(), func(ctx context.Context, c pb.CertifierGroupClient) (*pb.MemberChangeReply, error) {
				return c.RemoveMember(ctx, &pb.RemoveMemberRequest{Id: id})
			})
		},
	}
	cmd.Flags().StringVar(&targets, "certifier", "", "addresses of current members, host:port,...")
	cmd.Flags().Uint64Var(&id, "id", 0, "the member to remove")
	certTLS.AddFlags(cmd.Flags())
	return cmd
}

// leaderAddress is in a member's refusal (certgroup.AdminServer.rpcError).
var leaderAddress = regexp.MustCompile(`leader address "([^"]+)"`)

// changeMember runs change at the group's leader, following it when it
// moves, and prints the resulting configuration.
func changeMember(ctx context.Context, targets string, dial grpc.DialOption, out io.Writer,
	change func(context.Context, pb.CertifierGroupClient) (*pb.MemberChangeReply, error)) error {
	ctx, cancel := context.WithTimeout(ctx, memberChangeTimeout)
	defer cancel()
	leader := findLeader(ctx, targets, dial)
	var last error
	for attempt := 0; attempt < memberChangeAttempts; attempt++ {
		if leader == "" {
			time.Sleep(300 * time.Millisecond)
			leader = findLeader(ctx, targets, dial)
			continue
		}
		reply, err := changeAt(ctx, leader, dial, change)
		if err == nil {
			fmt.Fprintf(out, "voters %v, learners %v, leader %d\n", reply.Voters, reply.Learners, reply.LeaderId)
			return nil
		}
		last = err
		if !redirected(err) {
			return err
		}
		next := ""
		if m := leaderAddress.FindStringSubmatch(err.Error()); m != nil {
			next = m[1]
		}
		if next == "" || next == leader {
			time.Sleep(300 * time.Millisecond)
			next = findLeader(ctx, targets+","+leader, dial)
		}
		leader = next
	}
	if last == nil {
		return fmt.Errorf("no leader of the certifier group found at %s", targets)
	}
	return last
}

func changeAt(ctx context.Context, addr string, dial grpc.DialOption,
	change func(context.Context, pb.CertifierGroupClient) (*pb.MemberChangeReply, error)) (*pb.MemberChangeReply, error) {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	reply, err := change(ctx, pb.NewCertifierGroupClient(conn))
	return reply, grpctls.HintPlaintext(err)
}

// findLeader asks the members for the leader's address ("" if none knows).
func findLeader(ctx context.Context, targets string, dial grpc.DialOption) string {
	for _, addr := range strings.Split(targets, ",") {
		if addr = strings.TrimSpace(addr); addr == "" {
			continue
		}
		st, err := memberStatus(ctx, addr, dial)
		if err != nil {
			continue
		}
		if st.Role == "leader" {
			return addr
		}
		if st.LeaderAddr != "" {
			return st.LeaderAddr
		}
	}
	return ""
}

// redirected reports a refusal that another member may accept: this one
// does not lead (it names the leader, or an empty address during an
// election) or cannot be reached. Other refusals (the last voter, a
// removal that would leave no reachable majority) are final.
func redirected(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.FailedPrecondition:
		return strings.Contains(err.Error(), `leader address "`)
	}
	return false
}
