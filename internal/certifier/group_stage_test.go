package certifier

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A member's connections to the others go with the members: retain
// closes those to addresses no member has.
func TestMemberConnsRetainClosesRemovedMembers(t *testing.T) {
	m := &memberConns{dial: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, conns: map[string]*grpc.ClientConn{}}
	defer m.close()
	for _, addr := range []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"} {
		if _, err := m.client(addr); err != nil {
			t.Fatal(err)
		}
	}
	m.retain(map[uint64]string{1: "127.0.0.1:1", 3: "127.0.0.1:3"})
	if len(m.conns) != 2 || m.conns["127.0.0.1:2"] != nil {
		t.Fatalf("connections after member 2 left: %v", m.conns)
	}
}
