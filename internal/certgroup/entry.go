package certgroup

import (
	"encoding/binary"
	"fmt"

	"github.com/tashkent-db/tashkent/internal/logentry"
)

// A Raft entry of the group carries one certified log entry:
//
//	kindCertified | version (uvarint) | log entry bytes (logentry encoding)
//
// The version is repeated in front of the entry so that rebuilding the
// state after a lost leadership can skip old entries without decoding them.
// Raft's own empty entries (a new leader's barrier) and configuration
// changes carry no such payload.
const kindCertified byte = 1

func encodeCertified(e logentry.Entry) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(e.Bytes))
	b = append(b, kindCertified)
	b = binary.AppendUvarint(b, e.Version)
	return append(b, e.Bytes...)
}

func decodeCertified(data []byte) (logentry.Entry, error) {
	if len(data) < 2 || data[0] != kindCertified {
		return logentry.Entry{}, fmt.Errorf("certifier group: raft entry of unknown kind (%d bytes)", len(data))
	}
	v, n := binary.Uvarint(data[1:])
	if n <= 0 || v == 0 {
		return logentry.Entry{}, fmt.Errorf("certifier group: raft entry with a bad version")
	}
	return logentry.Entry{Version: v, Bytes: data[1+n:]}, nil
}

// versionOfData reads only the version (0 for a payload of another kind).
func versionOfData(data []byte) uint64 {
	if len(data) < 2 || data[0] != kindCertified {
		return 0
	}
	v, n := binary.Uvarint(data[1:])
	if n <= 0 {
		return 0
	}
	return v
}
