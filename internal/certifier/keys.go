package certifier

import (
	"fmt"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// KeysOf turns a writeset into the keys certification compares. It rejects
// changes it cannot interpret rather than guessing.
func KeysOf(ws *pb.Writeset) ([]certification.Key, error) {
	if ws == nil || len(ws.Changes) == 0 {
		return nil, fmt.Errorf("empty writeset: read-only transactions commit without certification")
	}
	keys := make([]certification.Key, 0, len(ws.Changes))
	for i, c := range ws.Changes {
		k, err := keyOf(c)
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", i, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func keyOf(c *pb.Change) (certification.Key, error) {
	switch c.Op {
	case pb.Op_OP_UPSERT, pb.Op_OP_DELETE:
		if c.Table == "" || len(c.Key) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table and a primary key", c.Op)
		}
		if c.Op == pb.Op_OP_UPSERT && c.KeepsRow {
			// A keeping update: a write that references do not conflict
			// with (certification.KeepingWrite).
			return certification.KeepingRowKey(c.Table, c.Key), nil
		}
		return certification.RowKey(c.Table, c.Key), nil
	case pb.Op_OP_UNIQUE_KEY:
		// A value of a unique index, as a row of its own: the table name
		// "<table>#<index>" keeps it apart from the table's row keys, so two
		// transactions conflict when they write or free the same value of
		// the same index, whatever rows hold it.
		if c.Table == "" || len(c.Key) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table and the index values", c.Op)
		}
		return certification.RowKey(c.Table, c.Key), nil
	case pb.Op_OP_REFERENCE:
		// A parent row a new row references through a foreign key: a
		// shared key, named as the parent row (or the unique index value)
		// it references (certification.Reference).
		if c.Table == "" || len(c.Key) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table and the referenced key", c.Op)
		}
		return certification.ReferenceKey(c.Table, c.Key), nil
	case pb.Op_OP_INSERT_ROW:
		// A row inserted into a table without a primary key: no identity,
		// it conflicts only with writes of the whole table and the schema
		// (certification.KeylessInsert).
		if c.Table == "" {
			return certification.Key{}, fmt.Errorf("%v needs a table", c.Op)
		}
		return certification.KeylessInsertKey(c.Table), nil
	case pb.Op_OP_DELETE_ROW:
		// A row deleted from a table without a primary key, named by its
		// whole old row: a write of that row.
		if c.Table == "" || len(c.Key) == 0 {
			return certification.Key{}, fmt.Errorf("%v needs a table and the old row", c.Op)
		}
		return certification.RowKey(c.Table, c.Key), nil
	case pb.Op_OP_TRUNCATE:
		if c.Table == "" {
			return certification.Key{}, fmt.Errorf("TRUNCATE needs a table")
		}
		return certification.TableKey(c.Table), nil
	case pb.Op_OP_TABLE_WRITE:
		// A streamed transaction wrote rows of the table, named as a
		// whole: a write of the whole table, as TRUNCATE is.
		if c.Table == "" {
			return certification.Key{}, fmt.Errorf("%v needs a table", c.Op)
		}
		return certification.TableKey(c.Table), nil
	case pb.Op_OP_DDL:
		if c.Table != "" {
			return certification.TableKey(c.Table), nil
		}
		return certification.SchemaKey, nil
	default:
		return certification.Key{}, fmt.Errorf("unknown operation %v", c.Op)
	}
}

func txnOf(id *pb.TxnID) certification.TxnID {
	return certification.TxnID{Origin: id.GetOrigin(), Seq: id.GetSeq()}
}

// DecodeEntryKeys reads an encoded log entry's transaction id and
// certification keys: how a member of a certifier group restores a
// committed version it did not certify itself (certgroup.DecodeFunc).
// An entry of a span has no keys but on its last entry, which has those
// the transaction was certified on (LogEntry.certified): a group, which
// restores entries one version at a time, records the span's keys at its
// last version, as the single certifier that wrote it did.
func DecodeEntryKeys(b []byte) (certification.TxnID, []certification.Key, error) {
	e, err := logentry.Decode(b)
	if err != nil {
		return certification.TxnID{}, nil, err
	}
	if e.SpanLast != 0 {
		if e.Version != e.SpanLast {
			return txnOf(e.Txn), nil, nil
		}
		keys, err := KeysOf(e.Certified)
		if err != nil {
			return certification.TxnID{}, nil, fmt.Errorf("log entry %d (the last of span %d..%d): %w", e.Version, e.SpanFirst, e.SpanLast, err)
		}
		return txnOf(e.Txn), keys, nil
	}
	keys, err := KeysOf(e.Writeset)
	if err != nil {
		return certification.TxnID{}, nil, fmt.Errorf("log entry %d: %w", e.Version, err)
	}
	return txnOf(e.Txn), keys, nil
}
