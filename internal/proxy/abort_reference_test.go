package proxy

import (
	"strings"
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// A foreign-key reference conflict is a serialization failure (40001,
// retry), and a certifier too old to know OP_REFERENCE (it answers
// "unknown operation 6") gets the operator a hint at the upgrade order.
func TestReferenceAbortsAndOldCertifierRejections(t *testing.T) {
	got := certificationAbort(&pb.CertifyReply{AbortReason: pb.AbortReason_ABORT_REASON_REFERENCE_CONFLICT, Detail: "d"})
	if got.Code != codeSerializationFailure || got.Detail != "d" || got.Hint == "" {
		t.Errorf("reference conflict: %+v, want 40001 with the detail and a hint", got)
	}
	got = certificationAbort(&pb.CertifyReply{AbortReason: pb.AbortReason_ABORT_REASON_INVALID, Detail: "change 1: unknown operation 6"})
	if got.Code != "XX000" || !strings.Contains(got.Hint, "upgrade every certifier before the proxies") {
		t.Errorf("old certifier: %+v, want XX000 with the upgrade hint", got)
	}
	if got := certificationAbort(&pb.CertifyReply{AbortReason: pb.AbortReason_ABORT_REASON_INVALID, Detail: "missing transaction id"}); got.Hint != "" {
		t.Errorf("other rejection: hint %q, want none", got.Hint)
	}
}
