package certclient

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// DefaultMessageBytesMax is the largest certify request the client sends
// unless Options.MessageBytesMax says otherwise. The certifier's transport
// accepts at least this much (certifier.grpcMessageBytesMax), so a request
// under it reaches certification, which answers a writeset over the
// certifier's own limits with an ordinary LIMIT abort.
const DefaultMessageBytesMax = 256 << 20

// oversized answers a request too large to send at all. Sent, it would
// break the stream at the transport, and after every reconnect the client
// would send it again, holding up every other request on the stream until
// its caller gave up. The transaction certainly did not commit: it is
// aborted here with the reason a certifier limit gets.
//
// changes is the writeset's number of changes, for the message; -1 when the
// writeset came encoded and was not counted.
func (c *Client) oversized(req *pb.CertifyRequestEncoded, changes int) *pb.CertifyReply {
	size := proto.Size(req)
	if size <= c.opts.MessageBytesMax {
		return nil
	}
	counted := ""
	if changes >= 0 {
		counted = fmt.Sprintf(" (%d changes)", changes)
	}
	return &pb.CertifyReply{
		Txn:         req.Txn,
		Decision:    pb.Decision_DECISION_ABORT,
		AbortReason: pb.AbortReason_ABORT_REASON_LIMIT,
		Detail: fmt.Sprintf("the certify request is %d MiB%s, over the %d MiB one request may carry",
			size>>20, counted, c.opts.MessageBytesMax>>20),
	}
}
