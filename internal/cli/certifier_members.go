package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/grpctls"
)

// newCertifierMembersCommand lists the members of a certifier group as
// each member sees itself; its subcommands add and remove members
// (certifier_members_change.go, docs/OPERATIONS.md).
func newCertifierMembersCommand() *cobra.Command {
	var (
		targets string
		certTLS grpctls.Files
	)
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the members of a certifier group: role, term, Raft index, applied index, durable version, pid",
		Long: `Asks every member named in --certifier (and every member they know of)
for its Status and prints one line per member. The subcommands add and
remove change the membership online (docs/OPERATIONS.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if targets == "" {
				return fmt.Errorf("--certifier is required: one or more member addresses, comma-separated")
			}
			dial, err := certifierDial(certTLS)
			if err != nil {
				return err
			}
			return listMembers(cmd.Context(), targets, cmd.OutOrStdout(), dial)
		},
	}
	cmd.Flags().StringVar(&targets, "certifier", "", "member addresses, host:port,... (one is enough: it names the others)")
	certTLS.AddFlags(cmd.Flags())
	cmd.AddCommand(newCertifierMembersAddCommand(), newCertifierMembersRemoveCommand())
	return cmd
}

func listMembers(ctx context.Context, targets string, out interface{ Write([]byte) (int, error) }, dial grpc.DialOption) error {
	seen := map[string]bool{}
	queue := strings.Split(targets, ",")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tADDR\tROLE\tTERM\tLEADER\tRAFT INDEX\tAPPLIED\tDURABLE VERSION\tPID")
	for len(queue) > 0 {
		addr := strings.TrimSpace(queue[0])
		queue = queue[1:]
		if addr == "" || seen[addr] {
			continue
		}
		seen[addr] = true
		st, err := memberStatus(ctx, addr, dial)
		if err != nil {
			fmt.Fprintf(tw, "?\t%s\tunreachable: %v\t\t\t\t\t\t\n", addr, err)
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", st.MemberId, addr, st.Role, st.Term, st.LeaderId,
			st.RaftIndex, st.AppliedIndex, st.DurableVersion, st.Pid)
		for _, m := range st.Members {
			queue = append(queue, m.Addr)
		}
	}
	return tw.Flush()
}

func memberStatus(ctx context.Context, addr string, dial grpc.DialOption) (*pb.StatusReply, error) {
	conn, err := grpc.NewClient(addr, dial)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := pb.NewCertifierClient(conn).Status(ctx, &pb.StatusRequest{})
	return st, grpctls.HintPlaintext(err)
}
