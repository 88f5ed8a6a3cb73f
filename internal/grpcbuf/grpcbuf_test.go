package grpcbuf

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

func TestGetGivesTheLengthAskedAndReusesTiers(t *testing.T) {
	p := &Pool{}
	for _, size := range []int{0, 1, 255, 256, 257, 4096, 20000, 1 << 20, 1<<20 + 1} {
		b := p.Get(size)
		if len(*b) != size {
			t.Fatalf("Get(%d) gave %d bytes", size, len(*b))
		}
		if c := cap(*b); size <= 1<<tierMaxShift && (c < size || c&(c-1) != 0) {
			t.Fatalf("Get(%d): capacity %d is not the tier's", size, c)
		}
		p.Put(b)
	}
	b := p.Get(3000)
	(*b)[0] = 42
	p.Put(b)
	again := p.Get(4000) // same 4 KiB tier
	if cap(*again) != 4096 {
		t.Fatalf("capacity %d, want the 4 KiB tier", cap(*again))
	}
	p.Put(&[]byte{1, 2, 3}) // not from the pool: dropped, no panic
}

func TestCodecRoundTripsSmallAndPooledMessages(t *testing.T) {
	for _, n := range []int{0, 10, 1 << 16} {
		in := &pb.CertifyStreamReply{DurableVersion: 7, Entries: [][]byte{make([]byte, n)}}
		data, err := Codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		out := &pb.CertifyStreamReply{}
		if err := (Codec{}).Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		data.Free()
		if !proto.Equal(in, out) {
			t.Fatalf("%d-byte entry: decoded %d entries, version %d", n, len(out.Entries), out.DurableVersion)
		}
	}
	if _, err := (Codec{}).Marshal("not a message"); err == nil {
		t.Fatal("marshalled a string")
	}
}
