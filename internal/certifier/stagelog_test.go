package certifier_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

// With TASHKENT_CERTIFIER_STAGES set, closing the service writes every
// reply's timestamps and every group commit's, in the order of the path
// (received <= decided <= send start <= sent; write start <= written <=
// durable), and the reply's version inside a logged batch: what the latency
// analysis joins with the load generator's records.
func TestStageLogRecordsRepliesAndGroupCommitsInPathOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stages.txt")
	t.Setenv("TASHKENT_CERTIFIER_STAGES", path)
	srv, err := certifier.Listen(certifier.Config{DataDir: t.TempDir()}, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	r := connect(t, srv, "a", 0)
	for pk := range 3 {
		if reply := r.certify(t, uint64(pk), upsert("public.t", pk)); reply.Decision != pb.Decision_DECISION_COMMIT {
			t.Fatalf("certify: %v", reply)
		}
	}
	r.client.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	replies, batches := 0, map[uint64]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		n := func(i int) int64 {
			v, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			return v
		}
		switch f[0] {
		case "r": // r origin seq version received decided sendStart sent
			replies++
			if f[1] != "a" || !(n(4) <= n(5) && n(5) <= n(6) && n(6) <= n(7)) {
				t.Errorf("reply line %q: not in path order", line)
			}
		case "b": // b first last writeStart written durable
			if !(n(3) <= n(4) && n(4) <= n(5)) || n(1) > n(2) {
				t.Errorf("batch line %q: not in path order", line)
			}
			for v := n(1); v <= n(2); v++ {
				batches[uint64(v)] = true
			}
		default:
			t.Errorf("unknown line %q", line)
		}
	}
	if replies != 3 || len(batches) != 3 {
		t.Fatalf("%d replies and %d logged versions recorded, want 3 and 3:\n%s", replies, len(batches), data)
	}
}
