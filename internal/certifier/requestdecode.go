package certifier

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/grpcbuf"
)

// Every certification request is decoded once, on the stream's receiving
// goroutine, and protobuf's generic decoder was a sixth of the certifier's
// CPU under load: a message, a transaction id, a string and a copy of the
// writeset per request, through reflection. streamRequest decodes the
// message as our client encodes it with a few allocations per message: one
// copy of the bytes, which the writesets then point into (certify copies a
// writeset into its log entry, so the copy is garbage once the message is
// certified), the requests and their transaction ids in one slice each, and
// an origin string shared by the requests of one origin. Anything else
// (the session-opening first message, a field it does not know, a field
// repeated where protobuf would merge) goes to proto.Unmarshal, so the
// result is always what protobuf would decode. It embeds the message, so
// it is a proto.Message too: under another codec than grpcbuf.Codec it is
// decoded by protobuf, as before.
type streamRequest struct {
	*pb.CertifyStreamRequestEncoded
}

var (
	_ grpcbuf.RawUnmarshaler = (*streamRequest)(nil)
	_ proto.Message          = (*streamRequest)(nil)
)

// Field numbers: CertifyStreamRequestEncoded, CertifyRequestEncoded, TxnID.
const (
	streamOpenField     protowire.Number = 1
	streamRequestsField protowire.Number = 2
	streamCatchUpField  protowire.Number = 3
	streamPauseField    protowire.Number = 10
	streamAppliedField  protowire.Number = 11

	requestIDField       protowire.Number = 1
	requestTxnField      protowire.Number = 2
	requestStartField    protowire.Number = 3
	requestWritesetField protowire.Number = 4

	txnOriginField protowire.Number = 1
	txnSeqField    protowire.Number = 2
)

// UnmarshalRaw decodes b into a new message.
func (r *streamRequest) UnmarshalRaw(b []byte) error {
	r.CertifyStreamRequestEncoded = &pb.CertifyStreamRequestEncoded{}
	if decodeStreamRequest(r.CertifyStreamRequestEncoded, b) {
		return nil
	}
	r.CertifyStreamRequestEncoded = &pb.CertifyStreamRequestEncoded{}
	return proto.Unmarshal(b, r.CertifyStreamRequestEncoded)
}

// decodeStreamRequest is the fast path; false means "not the common
// shape", and msg is to be thrown away.
func decodeStreamRequest(msg *pb.CertifyStreamRequestEncoded, b []byte) bool {
	n, ok := countRequests(b)
	if !ok {
		return false
	}
	owned := append([]byte(nil), b...)
	reqs := make([]pb.CertifyRequestEncoded, n)
	txns := make([]pb.TxnID, n)
	msg.Requests = make([]*pb.CertifyRequestEncoded, 0, n)
	var origin string
	for b := owned; len(b) > 0; {
		num, _, m := protowire.ConsumeTag(b)
		b = b[m:]
		switch num {
		case streamCatchUpField:
			v, m := protowire.ConsumeVarint(b)
			msg.CatchUp, b = v != 0, b[m:]
			continue
		case streamPauseField:
			v, m := protowire.ConsumeVarint(b)
			msg.Pause, b = v != 0, b[m:]
			continue
		case streamAppliedField:
			v, m := protowire.ConsumeVarint(b)
			msg.AppliedVersion, b = &v, b[m:]
			continue
		}
		raw, m := protowire.ConsumeBytes(b) // a request (countRequests checked the rest)
		b = b[m:]
		i := len(msg.Requests)
		req, txn := &reqs[i], &txns[i]
		if !decodeRequest(req, txn, raw, &origin) {
			return false
		}
		msg.Requests = append(msg.Requests, req)
	}
	return true
}

// countRequests checks that b holds only requests (field 2, length-
// delimited) and at most one of each of catch_up (field 3), pause (field
// 10) and applied_version (field 11), varints, and counts the requests.
func countRequests(b []byte) (int, bool) {
	n, catchUps, pauses, applied := 0, 0, 0, 0
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return 0, false
		}
		b = b[m:]
		switch {
		case num == streamRequestsField && typ == protowire.BytesType:
			_, m = protowire.ConsumeBytes(b)
			n++
		case num == streamCatchUpField && typ == protowire.VarintType:
			_, m = protowire.ConsumeVarint(b)
			catchUps++
		case num == streamPauseField && typ == protowire.VarintType:
			_, m = protowire.ConsumeVarint(b)
			pauses++
		case num == streamAppliedField && typ == protowire.VarintType:
			_, m = protowire.ConsumeVarint(b)
			applied++
		default:
			return 0, false
		}
		if m < 0 || catchUps > 1 || pauses > 1 || applied > 1 {
			return 0, false
		}
		b = b[m:]
	}
	return n, true
}

// decodeRequest decodes one request whose fields each appear at most once.
// origin is the previous request's origin, reused when equal.
func decodeRequest(req *pb.CertifyRequestEncoded, txn *pb.TxnID, b []byte, origin *string) bool {
	var seen [requestWritesetField + 1]bool
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 || num < requestIDField || num > requestWritesetField || seen[num] {
			return false
		}
		seen[num] = true
		b = b[m:]
		switch {
		case num == requestIDField && typ == protowire.VarintType:
			req.RequestId, m = protowire.ConsumeVarint(b)
		case num == requestStartField && typ == protowire.VarintType:
			req.StartVersion, m = protowire.ConsumeVarint(b)
		case num == requestWritesetField && typ == protowire.BytesType:
			req.Writeset, m = protowire.ConsumeBytes(b)
		case num == requestTxnField && typ == protowire.BytesType:
			var raw []byte
			raw, m = protowire.ConsumeBytes(b)
			if m >= 0 && !decodeTxn(txn, raw, origin) {
				return false
			}
			req.Txn = txn
		default:
			return false
		}
		if m < 0 {
			return false
		}
		b = b[m:]
	}
	return true
}

func decodeTxn(txn *pb.TxnID, b []byte, origin *string) bool {
	var seen [txnSeqField + 1]bool
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 || num < txnOriginField || num > txnSeqField || seen[num] {
			return false
		}
		seen[num] = true
		b = b[m:]
		switch {
		case num == txnOriginField && typ == protowire.BytesType:
			var raw []byte
			raw, m = protowire.ConsumeBytes(b)
			if m < 0 || !utf8.Valid(raw) { // protobuf refuses a string that is not UTF-8
				return false
			}
			if string(raw) != *origin {
				*origin = string(raw)
			}
			txn.Origin = *origin
		case num == txnSeqField && typ == protowire.VarintType:
			txn.Seq, m = protowire.ConsumeVarint(b)
		default:
			return false
		}
		if m < 0 {
			return false
		}
		b = b[m:]
	}
	return true
}
