package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// The replica's progress, for the certifier's log retention, and what the
// agent does when the certifier's log can no longer catch it up.
//
// The agent reports the replica's durable version: every version up to it
// is committed and would survive a crash of the database. In mw the
// database commits with synchronous_commit=off, and a crash loses the
// last commits (Tashkent §7.1 case 2), which the replica then replays from
// the log: the committed version would be too high. The durable version is
// the progress of the replication origin "tashkent" read with flush: it
// flushes the WAL up to the commit that recorded it (replorigin_get_progress),
// at most once a progressReportInterval.

// progressReportInterval is how often the agent reads and reports the
// durable version: often enough that retention never waits long for a
// version it could let go, rarely enough that the WAL flush it asks for
// costs nothing.
const progressReportInterval = time.Second

// durableVersionSQL reads the replica's version after flushing the WAL up
// to the commit that recorded it. A database with no commit yet has no
// progress: version 0.
const durableVersionSQL = `SELECT COALESCE((pg_catalog.pg_replication_origin_progress('tashkent', true)
	OPERATOR(pg_catalog.-) '0/0'::pg_catalog.pg_lsn)::pg_catalog.int8, 0)`

func (c *control) durableVersion(ctx context.Context) (uint64, error) {
	var v int64
	if err := c.queryRow(ctx, durableVersionSQL, nil, &v); err != nil {
		return 0, fmt.Errorf("read the replica's durable version: %w", err)
	}
	return uint64(v), nil
}

// reportProgress tells the certifier the replica's durable version.
func (r *run) reportProgress() {
	v, err := r.control.durableVersion(r.ctx)
	if err != nil {
		if r.ctx.Err() == nil {
			r.a.log.Debug("could not read the durable version to report", "err", err)
		}
		return
	}
	r.cert.SetAppliedVersion(v)
}

// refused is certclient's OnRefused: the certifier cannot catch this
// replica up. If the replica holds versions its log does not (a verdict
// "rewind to C"), the run ends and the next one rewinds (rewind.go).
// Otherwise the log no longer holds the versions the replica needs: it
// halts, its gate closed, with a reason that starts with
// pb.NeedsStateTransfer, and the supervisor rebuilds it from a peer.
func (r *run) refused(err error) {
	if r.ctx.Err() != nil {
		return // a stream of a run that ended: the next run opens its own
	}
	if rw, ok := pb.RewindOf(err); ok {
		r.askRewind(rw, status.Convert(err).Message())
		return
	}
	why := status.Convert(err).Message()
	if !strings.HasPrefix(why, pb.NeedsStateTransfer) {
		why = pb.NeedsStateTransfer + ": " + why
	}
	r.haltForStateTransfer(why)
}

// haltForStateTransfer halts the replica, its gate closed, with a reason
// that starts with pb.NeedsStateTransfer: the supervisor rebuilds it.
func (r *run) haltForStateTransfer(why string) {
	r.admission.refuse(why)
	r.a.durable.suspend()
	if !r.a.transition(StateHalted, why, true) {
		return // already halted
	}
	r.a.log.Error("the certifier cannot catch this replica up from its log; it halts and must be rebuilt from a peer (state transfer)", "err", why)
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if err := r.control.exec(ctx, `SELECT tashkent.set_admitting(false, $1)`, "this replica must be rebuilt from a peer: "+why); err != nil {
		r.a.log.Warn("could not close the admission gate", "err", err)
	}
}
