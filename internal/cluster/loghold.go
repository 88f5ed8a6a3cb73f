package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tashkent-db/tashkent/internal/certclient"
)

// A state transfer's copy holds the donor's version and needs the
// certifier's log from there on to catch up. The log's retention waits for
// the replicas it knows (internal/certifier retention.go); a copy in the
// making is none of them, and the donor's own progress lets go of what it
// has applied. So, for as long as a transfer runs, a session under the
// target replica's name, opened at the donor's version and reporting it,
// holds the log there, as a connected replica does (its size bound,
// --log-retention-bytes, still applies). The replica's agent, once it runs
// on the copy, reports its own progress under the same name.

// logHoldOpenWaitMax bounds the wait for the certifier to accept the hold.
const logHoldOpenWaitMax = 10 * time.Second

// logHold is an open hold; release ends it.
type logHold struct {
	client  *certclient.Client
	refused atomic.Pointer[error]
}

// holdLog opens a hold of the certifier's log at version for replica
// name. It fails if the certifier's log no longer holds the versions
// after version: the copy could not catch up.
func (u *upper) holdLog(ctx context.Context, name string, version uint64) (*logHold, error) {
	dial, err := u.st.CertifierDialOptions()
	if err != nil {
		return nil, err
	}
	h := &logHold{}
	applied := version
	h.client, err = certclient.New(certclient.Options{
		Target: u.st.CertifierAddr(), Replica: name, ReplicaVersion: version, AppliedVersion: &applied,
		DialOptions: dial, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnRefused: func(err error) { h.refused.CompareAndSwap(nil, &err) },
	})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(logHoldOpenWaitMax)
	for !h.client.Connected() {
		if p := h.refused.Load(); p != nil {
			h.release()
			return nil, fmt.Errorf("%s: the certifier's log cannot serve a copy at version %d: %w", name, version, *p)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			h.release()
			return nil, fmt.Errorf("%s: the certifier did not accept a session to hold its log at version %d within %s", name, version, logHoldOpenWaitMax)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return h, nil
}

func (h *logHold) release() { h.client.Close() }

// holdLogForCopy holds the certifier's log for a copy of donor that will
// become replica r, from the donor's version now: the copy holds at least
// that.
func (u *upper) holdLogForCopy(ctx context.Context, r, donor *Replica) (*logHold, error) {
	v, err := donorVersion(ctx, donor)
	if err != nil {
		return nil, fmt.Errorf("%s cannot be the donor: %w", donor.Name, err)
	}
	return u.holdLog(ctx, r.Name, v)
}
