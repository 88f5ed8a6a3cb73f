package certifier

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
)

// Certification compares keys only (Tashkent §6.1: the writeset's values
// travel to the replicas, the certifier never looks at them). Requests
// arrive as CertifyRequestEncoded, so the writeset is still its bytes;
// keysOfEncoded reads the keys straight from them, without building a
// message per change, and the same bytes go into the log entry. It accepts
// exactly what KeysOf accepts of the decoded writeset, with the same
// messages, and rejects bytes that protobuf decoding would reject (a
// replica must be able to decode every entry).

// Writeset and Change field numbers (api/certifierpb/certifier.proto).
const (
	writesetChangesField protowire.Number = 1
	changeTableField     protowire.Number = 1
	changeOpField        protowire.Number = 2
	changeKeyField       protowire.Number = 3
	changeRowField       protowire.Number = 4
	changeKeepsRowField  protowire.Number = 5
)

// encodedChange is one change's fields, aliasing the writeset's bytes.
type encodedChange struct {
	table    []byte
	op       pb.Op
	key      []byte
	keepsRow bool
}

// keysOfEncoded appends the certification keys of an encoded writeset to
// dst, one per change, in order.
func keysOfEncoded(dst []certification.Key, ws []byte) ([]certification.Key, error) {
	start := len(dst)
	for len(ws) > 0 {
		num, typ, n := protowire.ConsumeTag(ws)
		if n < 0 {
			return dst, fmt.Errorf("malformed writeset: %w", protowire.ParseError(n))
		}
		ws = ws[n:]
		if num != writesetChangesField {
			m := protowire.ConsumeFieldValue(num, typ, ws)
			if m < 0 {
				return dst, fmt.Errorf("malformed writeset: field %d: %w", num, protowire.ParseError(m))
			}
			ws = ws[m:]
			continue
		}
		if typ != protowire.BytesType {
			return dst, fmt.Errorf("malformed writeset: changes encoded as wire type %d", typ)
		}
		raw, m := protowire.ConsumeBytes(ws)
		if m < 0 {
			return dst, fmt.Errorf("malformed writeset: %w", protowire.ParseError(m))
		}
		ws = ws[m:]
		i := len(dst) - start
		c, err := parseChange(raw)
		if err != nil {
			return dst, fmt.Errorf("change %d: %w", i, err)
		}
		k, err := keyOfEncoded(c)
		if err != nil {
			return dst, fmt.Errorf("change %d: %w", i, err)
		}
		dst = append(dst, k)
	}
	if len(dst) == start {
		return dst, errors.New("empty writeset: read-only transactions commit without certification")
	}
	return dst, nil
}

// parseChange reads a Change's table, op, key and keeps_row; as protobuf
// decoding does, the last occurrence of a field wins. The row is skipped
// unread.
func parseChange(b []byte) (encodedChange, error) {
	var c encodedChange
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return c, fmt.Errorf("malformed change: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var m int
		switch {
		case num == changeTableField && typ == protowire.BytesType:
			c.table, m = protowire.ConsumeBytes(b)
			if m >= 0 && !utf8.Valid(c.table) {
				return c, errors.New("malformed change: the table name is not valid UTF-8")
			}
		case num == changeOpField && typ == protowire.VarintType:
			var op uint64
			op, m = protowire.ConsumeVarint(b)
			c.op = pb.Op(int32(op))
		case num == changeKeyField && typ == protowire.BytesType:
			c.key, m = protowire.ConsumeBytes(b)
		case num == changeKeepsRowField && typ == protowire.VarintType:
			var v uint64
			v, m = protowire.ConsumeVarint(b)
			c.keepsRow = v != 0 // as protobuf decodes a bool
		case num == changeTableField || num == changeOpField || num == changeKeyField ||
			(num == changeRowField && typ != protowire.BytesType):
			return c, fmt.Errorf("malformed change: field %d encoded as wire type %d", num, typ)
		default: // the row, a field this version does not know, or keeps_row
			// in another wire type, which protobuf keeps as an unknown
			// field (KeysOf certifies it as if absent; so did every
			// version before keeps_row)
			m = protowire.ConsumeFieldValue(num, typ, b)
		}
		if m < 0 {
			return c, fmt.Errorf("malformed change: field %d: %w", num, protowire.ParseError(m))
		}
		b = b[m:]
	}
	return c, nil
}

// keyOfEncoded is keyOf for an encoded change: same rules, same messages.
func keyOfEncoded(c encodedChange) (certification.Key, error) {
	switch c.op {
	case pb.Op_OP_UPSERT, pb.Op_OP_DELETE:
		if len(c.table) == 0 || len(c.key) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table and a primary key", c.op)
		}
		if c.op == pb.Op_OP_UPSERT && c.keepsRow {
			// A keeping update (see keyOf).
			return certification.KeepingRowKeyBytes(c.table, c.key), nil
		}
		return certification.RowKeyBytes(c.table, c.key), nil
	case pb.Op_OP_UNIQUE_KEY:
		// A value of a unique index, as a row of its own (see keyOf).
		if len(c.table) == 0 || len(c.key) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table and the index values", c.op)
		}
		return certification.RowKeyBytes(c.table, c.key), nil
	case pb.Op_OP_REFERENCE:
		// A foreign-key reference, a shared key (see keyOf).
		if len(c.table) == 0 || len(c.key) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table and the referenced key", c.op)
		}
		return certification.ReferenceKeyBytes(c.table, c.key), nil
	case pb.Op_OP_INSERT_ROW:
		// A row inserted into a table without a primary key (see keyOf).
		if len(c.table) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table", c.op)
		}
		return certification.KeylessInsertKeyBytes(c.table), nil
	case pb.Op_OP_DELETE_ROW:
		// A row deleted from a table without a primary key (see keyOf).
		if len(c.table) == 0 || len(c.key) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table and the old row", c.op)
		}
		return certification.RowKeyBytes(c.table, c.key), nil
	case pb.Op_OP_TRUNCATE:
		if len(c.table) == 0 {
			return certification.Key{}, fmt.Errorf("TRUNCATE needs a table")
		}
		return certification.TableKeyBytes(c.table), nil
	case pb.Op_OP_TABLE_WRITE:
		// Rows of the table, named as a whole (see keyOf).
		if len(c.table) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table", c.op)
		}
		return certification.TableKeyBytes(c.table), nil
	case pb.Op_OP_DDL:
		if len(c.table) != 0 {
			return certification.TableKeyBytes(c.table), nil
		}
		return certification.SchemaKey, nil
	default:
		return certification.Key{}, fmt.Errorf("unknown operation %v", c.op)
	}
}

// decodedRequest turns an encoded request into a CertifyRequest, for the
// paths that need the changes themselves: the certifier group
// (certifyInGroup) and the description of a conflict.
func decodedRequest(req *pb.CertifyRequestEncoded) (*pb.CertifyRequest, error) {
	ws := &pb.Writeset{}
	if err := proto.Unmarshal(req.Writeset, ws); err != nil {
		return nil, fmt.Errorf("malformed writeset: %w", err)
	}
	return &pb.CertifyRequest{RequestId: req.RequestId, Txn: req.Txn, StartVersion: req.StartVersion, Writeset: ws}, nil
}
