package proxy

import (
	"testing"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// Each certification abort reaches the client with the SQLSTATE that tells
// it what to do: 40001 (retry) when nothing is wrong with the transaction
// itself, 54000 when it is too large to ever commit.
func TestCertificationAbortsMapToActionableSQLSTATEs(t *testing.T) {
	for reason, want := range map[pb.AbortReason]string{
		pb.AbortReason_ABORT_REASON_CONFLICT:   codeSerializationFailure,
		pb.AbortReason_ABORT_REASON_TOO_OLD:    codeSerializationFailure,
		pb.AbortReason_ABORT_REASON_OVERLOADED: codeSerializationFailure,
		pb.AbortReason_ABORT_REASON_LIMIT:      "54000",
		pb.AbortReason_ABORT_REASON_INVALID:    "XX000",
	} {
		got := certificationAbort(&pb.CertifyReply{Decision: pb.Decision_DECISION_ABORT, AbortReason: reason, Detail: "d"})
		if got.Code != want || got.Detail != "d" {
			t.Errorf("%v: SQLSTATE %s detail %q, want %s with the certifier's detail", reason, got.Code, got.Detail, want)
		}
	}
}
