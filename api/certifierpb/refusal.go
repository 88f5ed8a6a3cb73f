package certifierpb

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NeedsStateTransfer starts the message of a Certify stream the certifier
// refuses with FAILED_PRECONDITION because the replica cannot catch up from
// its log: the log no longer holds the versions the replica needs (log
// retention), or the replica holds versions the certifier never made
// durable. The agent halts with a reason that starts with it, and the
// supervisor rebuilds such a replica from a peer (state transfer).
const NeedsStateTransfer = "needs state transfer"

// NeedsRewind starts the message of a Certify stream the certifier refuses
// with FAILED_PRECONDITION because the replica holds versions after the
// last one its history shares with the log (failed versions). The status
// carries a RewindRequired detail naming that version; a replica that
// cannot go back to it must be rebuilt from a peer.
const NeedsRewind = "needs rewind"

// RewindOf reads the RewindRequired detail of a refusal; ok is false if
// err is not a refusal to rewind.
func RewindOf(err error) (*RewindRequired, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil, false
	}
	for _, d := range st.Details() {
		if r, ok := d.(*RewindRequired); ok {
			return r, true
		}
	}
	return nil, false
}
