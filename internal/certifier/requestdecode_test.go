package certifier

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// randomStreamRequest builds a message as the client sends it, or, one time
// in three, with something the fast path leaves to protobuf: an open
// session, an unknown field, applied_version repeated, a transaction id
// field repeated (protobuf merges them), a string that is not UTF-8, a
// truncated tail.
func randomStreamRequest(rng *rand.Rand) []byte {
	msg := &pb.CertifyStreamRequestEncoded{CatchUp: rng.IntN(4) == 0, Pause: rng.IntN(4) == 0}
	if rng.IntN(2) == 0 {
		applied := rng.Uint64N(1 << 40)
		msg.AppliedVersion = &applied
	}
	origins := []string{"r1", "r2", "bench-client-7-123"}
	for range rng.IntN(5) {
		req := &pb.CertifyRequestEncoded{RequestId: rng.Uint64N(1000), StartVersion: rng.Uint64N(50)}
		if rng.IntN(8) > 0 {
			req.Txn = &pb.TxnID{Origin: origins[rng.IntN(len(origins))], Seq: rng.Uint64N(9)}
		}
		if rng.IntN(8) > 0 {
			req.Writeset = []byte{0x0a, 0x02, 0x0a, byte(rng.IntN(3))}[:2+rng.IntN(3)]
		}
		msg.Requests = append(msg.Requests, req)
	}
	b, _ := proto.Marshal(msg)
	switch rng.IntN(9) {
	case 0:
		open, _ := proto.Marshal(&pb.CertifyStreamRequestEncoded{Open: &pb.OpenSession{Replica: "r1", ReplicaVersion: 3}})
		b = append(open, b...)
	case 1:
		b = protowire.AppendTag(b, 9, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	case 2: // a request with its transaction id in two pieces
		var req []byte
		req = protowire.AppendTag(req, requestTxnField, protowire.BytesType)
		req = protowire.AppendBytes(req, []byte{0x0a, 0x01, 'a'})
		req = protowire.AppendTag(req, requestTxnField, protowire.BytesType)
		req = protowire.AppendBytes(req, []byte{0x10, 0x05})
		b = protowire.AppendTag(b, streamRequestsField, protowire.BytesType)
		b = protowire.AppendBytes(b, req)
	case 3: // an origin that is not UTF-8
		var txn, req []byte
		txn = protowire.AppendTag(txn, txnOriginField, protowire.BytesType)
		txn = protowire.AppendBytes(txn, []byte{0xff})
		req = protowire.AppendTag(req, requestTxnField, protowire.BytesType)
		req = protowire.AppendBytes(req, txn)
		b = protowire.AppendTag(b, streamRequestsField, protowire.BytesType)
		b = protowire.AppendBytes(b, req)
	case 4:
		if len(b) > 0 {
			b = b[:len(b)-1]
		}
	case 5: // applied_version twice: protobuf keeps the last
		b = protowire.AppendTag(b, streamAppliedField, protowire.VarintType)
		b = protowire.AppendVarint(b, rng.Uint64N(100))
	}
	return b
}

func TestStreamRequestDecodesAsProtobufDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20000 {
		b := randomStreamRequest(rng)
		want := &pb.CertifyStreamRequestEncoded{}
		wantErr := proto.Unmarshal(b, want)
		got := &streamRequest{}
		gotErr := got.UnmarshalRaw(b)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("message %d %x: protobuf error %v, fast decoder error %v", i, b, wantErr, gotErr)
		}
		if wantErr == nil && !proto.Equal(got.CertifyStreamRequestEncoded, want) {
			t.Fatalf("message %d %x: decoded\n%v\nprotobuf decodes\n%v", i, b, got.CertifyStreamRequestEncoded, want)
		}
	}
}

// The writesets must not point into the caller's bytes: gRPC reuses its
// buffer once the message is decoded.
func TestStreamRequestOwnsItsBytes(t *testing.T) {
	b, _ := proto.Marshal(&pb.CertifyStreamRequestEncoded{Requests: []*pb.CertifyRequestEncoded{
		{RequestId: 1, Txn: &pb.TxnID{Origin: "r1", Seq: 1}, Writeset: []byte("abc")}}})
	r := &streamRequest{}
	if err := r.UnmarshalRaw(b); err != nil {
		t.Fatal(err)
	}
	clear(b)
	if ws := r.Requests[0].Writeset; string(ws) != "abc" {
		t.Fatalf("writeset changed with the input buffer: %q", ws)
	}
}

func BenchmarkStreamRequestDecode(b *testing.B) {
	msg := &pb.CertifyStreamRequestEncoded{}
	for i := range 64 {
		msg.Requests = append(msg.Requests, &pb.CertifyRequestEncoded{RequestId: uint64(i), StartVersion: 1000,
			Txn: &pb.TxnID{Origin: "replica-1", Seq: uint64(i)}, Writeset: make([]byte, 230)})
	}
	enc, _ := proto.Marshal(msg)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := &streamRequest{}
			if err := r.UnmarshalRaw(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("protobuf", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(enc, &pb.CertifyStreamRequestEncoded{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
