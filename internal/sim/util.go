package sim

import (
	"fmt"
	"strconv"

	"github.com/tashkent-db/tashkent/internal/certification"
)

func uitoa(v uint64) string { return strconv.FormatUint(v, 10) }

func boolStr(b bool) string { return strconv.FormatBool(b) }

func txnStr(id certification.TxnID) string { return fmt.Sprintf("%s/%d", id.Origin, id.Seq) }

// describe is a replica's state in a failure report.
func (r *replica) describe() string {
	pending := 0
	if r.client != nil {
		pending = len(r.client.pending)
	}
	phases := ""
	for _, s := range r.sessions {
		phases += strconv.Itoa(int(s.phase))
	}
	return fmt.Sprintf("[r%d up=%t db=%t version=%d recovering=%t target=%d busy=%t pending=%d sessions=%s]",
		r.id, r.up, r.dbUp, r.db.version, r.recovering, r.target, r.busy, pending, phases)
}
