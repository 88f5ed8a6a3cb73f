package certifier_test

import (
	"context"
	"errors"
	"io"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// compactedBelow reads the version a member's versioned log starts after
// from its refusal (the group orderer's checkFetch).
var compactedBelow = regexp.MustCompile(`versions up to (\d+) are compacted on this member`)

// fetchMemberLog fetches a group member's versioned log: all of it, or, for
// a member that caught up by snapshot, what it holds after the snapshot
// (base is then the snapshot's version).
func fetchMemberLog(t *testing.T, addr string) (base uint64, log []*pb.LogEntry) {
	t.Helper()
	log, err := fetchAfter(addr, 0)
	if status.Code(err) == codes.FailedPrecondition {
		m := compactedBelow.FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("member %s refused Fetch: %v", addr, err)
		}
		base, _ = strconv.ParseUint(m[1], 10, 64)
		log, err = fetchAfter(addr, base)
	}
	if err != nil {
		t.Fatalf("fetch from %s: %v", addr, err)
	}
	return base, log
}

func fetchAfter(addr string, after uint64) ([]*pb.LogEntry, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(certclient.DefaultMessageBytesMax)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := pb.NewCertifierClient(conn).Fetch(ctx, &pb.FetchRequest{AfterVersion: after})
	if err != nil {
		return nil, err
	}
	var all []*pb.LogEntry
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return all, nil
		}
		if err != nil {
			return nil, err
		}
		for _, b := range msg.Entries {
			e, err := logentry.Decode(b)
			if err != nil {
				return nil, err
			}
			all = append(all, e)
		}
	}
}

// checkGroupLogs: at least one member holds the whole log, which has every
// acknowledged commit (checkLog); every member ends at the same version
// and holds exactly the whole log's entries from where its log starts.
// It returns the whole log.
func checkGroupLogs(t *testing.T, members []*groupMember, acks *acknowledgements) []*pb.LogEntry {
	t.Helper()
	bases := make([]uint64, len(members))
	logs := make([][]*pb.LogEntry, len(members))
	var whole []*pb.LogEntry
	for i, m := range members {
		bases[i], logs[i] = fetchMemberLog(t, m.addr)
		if bases[i] == 0 && whole == nil {
			whole = logs[i]
		}
	}
	if whole == nil {
		t.Fatalf("no member holds the whole log (starts after: %v)", bases)
	}
	checkLog(t, whole, acks)
	for i, m := range members {
		if bases[i]+uint64(len(logs[i])) != uint64(len(whole)) {
			t.Fatalf("member %d holds versions %d..%d, the whole log ends at %d", m.id, bases[i]+1, bases[i]+uint64(len(logs[i])), len(whole))
		}
		for j, e := range logs[i] {
			w := whole[bases[i]+uint64(j)]
			if e.Version != w.Version || e.Txn.Origin != w.Txn.Origin || e.Txn.Seq != w.Txn.Seq {
				t.Fatalf("member %d holds %v at version %d, the whole log %v", m.id, e.Txn, e.Version, w.Txn)
			}
		}
		if bases[i] > 0 {
			t.Logf("member %d caught up by snapshot: its versioned log starts after version %d", m.id, bases[i])
		}
	}
	return whole
}
