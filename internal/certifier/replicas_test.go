package certifier

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

func TestKnownReplicasListConnectedAndGone(t *testing.T) {
	now := time.Unix(1000, 0)
	k := newKnownReplicas(func() time.Time { return now })
	a := k.opened("a", "10.0.0.1:9000", 0)
	b := k.opened("b", "", 0)
	now = now.Add(time.Second)
	a2 := k.opened("a", "10.0.0.1:9000", 0) // a reconnects before its old stream ended

	got := k.list()
	if len(got) != 2 || got[0].Name != "a" || !got[0].Connected || got[0].StatusAddr != "10.0.0.1:9000" || got[0].SinceUnixMs != 1000_000 ||
		got[1].Name != "b" || !got[1].Connected {
		t.Fatalf("both connected: %v", got)
	}
	a.close()
	if got := k.list(); !got[0].Connected {
		t.Fatalf("a has a session still: %v", got[0])
	}
	now = now.Add(time.Second)
	a2.close()
	a2.close() // once only
	b.close()
	got = k.list()
	if len(got) != 1 || got[0].Name != "a" || got[0].Connected || got[0].SinceUnixMs != 1002_000 {
		t.Fatalf("a gone (listed, disconnected since its last session ended), b forgotten (no status address): %v", got)
	}
	k.opened("a", "10.0.0.1:9000", 0)
	if got := k.list(); !got[0].Connected {
		t.Fatalf("a is back: %v", got[0])
	}
}

// A replica that left the cluster is forgotten once its session ended,
// not while one is open.
func TestKnownReplicasForgetAReplicaThatLeft(t *testing.T) {
	s := &Service{replicas: newKnownReplicas(time.Now)}
	ctx := context.Background()
	a := s.replicas.opened("a", "10.0.0.1:9000", 0)
	s.replicas.opened("b", "10.0.0.2:9000", 0)
	if _, err := s.ForgetReplica(ctx, &pb.ForgetReplicaRequest{Name: "a"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("forget a replica with a session open: %v, want FailedPrecondition", err)
	}
	a.close()
	if r, err := s.ForgetReplica(ctx, &pb.ForgetReplicaRequest{Name: "a"}); err != nil || !r.Known {
		t.Fatalf("forget a replica whose session ended: %v, %v", r, err)
	}
	if got := s.replicas.list(); len(got) != 1 || got[0].Name != "b" {
		t.Fatalf("listed after a was forgotten: %v", got)
	}
	if r, err := s.ForgetReplica(ctx, &pb.ForgetReplicaRequest{Name: "a"}); err != nil || r.Known {
		t.Fatalf("forget a replica not listed: %v, %v", r, err)
	}
}

func TestKnownReplicasAreBounded(t *testing.T) {
	now := time.Unix(0, 0)
	k := newKnownReplicas(func() time.Time { now = now.Add(time.Second); return now })
	for i := range knownReplicasMax {
		k.opened(fmt.Sprintf("r%03d", i), "h:1", 0).close() // each gone at once
	}
	k.opened("new", "h:1", 0)
	got := k.list()
	if len(got) != knownReplicasMax || got[0].Name != "new" || got[1].Name != "r001" {
		t.Fatalf("the oldest gone replica (r000) makes room: %d listed, first %v %v", len(got), got[0], got[1])
	}
	full := newKnownReplicas(time.Now)
	for i := range knownReplicasMax {
		full.opened(fmt.Sprintf("r%03d", i), "h:1", 0) // all connected
	}
	full.opened("more", "h:1", 0).close()
	if n := len(full.list()); n != knownReplicasMax {
		t.Fatalf("%d listed, want %d: connected replicas are never forgotten", n, knownReplicasMax)
	}
}

func TestSessionStatusAddrFillsAnUnspecifiedHost(t *testing.T) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 51234}})
	for given, want := range map[string]string{
		"":               "",
		"10.1.1.1:9101":  "10.1.1.1:9101",
		"db1:9101":       "db1:9101",
		"0.0.0.0:9101":   "192.0.2.7:9101",
		"[::]:9101":      "192.0.2.7:9101",
		":9101":          "192.0.2.7:9101",
		"not an address": "not an address",
	} {
		if got := sessionStatusAddr(ctx, given); got != want {
			t.Errorf("%q: %q, want %q", given, got, want)
		}
	}
	if got := sessionStatusAddr(context.Background(), ":9101"); got != ":9101" {
		t.Errorf("without a peer: %q", got)
	}
}
