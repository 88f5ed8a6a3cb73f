package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/pgcode"
)

// history is the replica's history: the runs of its versions by the epoch
// that certified them (LogEntry.epoch), as tashkent.history records them.
// The certifier admits a stream only if it is a prefix of its log
// (certifier.Admit). A row is written, durably, when the first entry of a
// new epoch is delivered and before it goes to the order, so a run is
// recorded before any of its versions commits here; rows above the
// replica's version are deleted at start.
//
// It also answers tashkent.txn_state (txnstate.go): the runs say which
// epoch holds each version up to through, the last version the history
// covers.
type history struct {
	mu   sync.Mutex
	runs []*pb.EpochRun
	// recorded: the database has tashkent.history (an extension
	// installed before it existed has not; the replica then sends no
	// history and is judged by its version alone).
	recorded bool
	// loaded: the runs were read from the database (loadHistory); until
	// then the history cannot answer.
	loaded bool
	// through is the highest version whose run is known: the version kept
	// at load, then the last entry delivered.
	through uint64
}

// historyRetryInterval paces the attempts to write a run while the
// database does not answer.
const historyRetryInterval = 200 * time.Millisecond

// loadHistory deletes the runs above keep (historyKeptThrough) and reads
// the rest into the run's history.
func (r *run) loadHistory(keep uint64) error {
	var runs []*pb.EpochRun
	recorded := true
	err := r.control.use(r.ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, historyTxnSettingsSQL); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `DELETE FROM tashkent.history WHERE first_version OPERATOR(pg_catalog.>) $1`, int64(keep)); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT epoch, first_version FROM tashkent.history ORDER BY first_version`)
			if err != nil {
				return err
			}
			var epoch, first int64
			_, err = pgx.ForEachRow(rows, []any{&epoch, &first}, func() error {
				runs = append(runs, &pb.EpochRun{Epoch: uint64(epoch), FirstVersion: uint64(first)})
				return nil
			})
			return err
		})
	})
	if pgcode.MissingObject(err) {
		r.a.log.Warn("the database has no tashkent.history (an extension installed before it existed): the certifier judges this replica by its version alone")
		runs, recorded, err = nil, false, nil
	}
	if err != nil {
		return fmt.Errorf("read the replica's history: %w", err)
	}
	h := r.history
	h.mu.Lock()
	h.runs, h.recorded, h.loaded, h.through = runs, recorded, true, keep
	h.mu.Unlock()
	r.a.log.Info("replica history", "runs", len(runs), "top_epoch", h.top())
	return nil
}

// historyTxnSettingsSQL: the rows are this replica's own (never
// replicated), and durable when the transaction commits, whatever the
// server's synchronous_commit.
const historyTxnSettingsSQL = `SET LOCAL tashkent.maintenance = on; SET LOCAL synchronous_commit = on`

// top is the epoch of the last run (0: none).
func (h *history) top() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.runs) == 0 {
		return 0
	}
	return h.runs[len(h.runs)-1].GetEpoch()
}

// toSend is what the stream opens with (certclient.Options.History).
func (h *history) toSend() []*pb.EpochRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.recorded {
		return nil
	}
	return append([]*pb.EpochRun(nil), h.runs...)
}

// changesIn returns the runs that entries start: each entry whose epoch
// is not the one before it.
func (h *history) changesIn(entries []logentry.Entry) ([]*pb.EpochRun, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	h.mu.Lock()
	have := len(h.runs) > 0
	current := uint64(0)
	if have {
		current = h.runs[len(h.runs)-1].GetEpoch()
	}
	h.mu.Unlock()
	last, err := entryEpoch(entries[len(entries)-1])
	if err != nil || (have && last == current) {
		return nil, err // epochs never decrease along a log: all of them are the current one
	}
	var started []*pb.EpochRun
	for _, e := range entries {
		epoch, err := entryEpoch(e)
		if err != nil {
			return nil, err
		}
		if !have || epoch != current {
			started = append(started, &pb.EpochRun{Epoch: epoch, FirstVersion: e.Version})
			have, current = true, epoch
		}
	}
	return started, nil
}

func entryEpoch(e logentry.Entry) (uint64, error) {
	hdr, err := logentry.RawHeaderOf(e.Bytes)
	return hdr.Epoch, err
}

// recordRuns makes the runs that delivered entries start durable, before
// the entries go to the order. It retries while the database does not
// answer; an error if the run ended first, or if an entry's epoch does not
// read: the stream ends with the entries not delivered (the next stream
// delivers them again).
func (r *run) recordRuns(entries []logentry.Entry) error {
	h := r.history
	started, err := h.changesIn(entries)
	if err != nil {
		return fmt.Errorf("an entry from the certifier does not read: %w", err)
	}
	if len(started) == 0 {
		h.extend(nil, entries)
		return nil
	}
	if h.recorded {
		for attempt := 0; ; attempt++ {
			err := r.insertRuns(started)
			if err == nil {
				break
			}
			if attempt%25 == 0 {
				r.a.log.Warn("could not record the replica's history; retrying", "epoch", started[0].Epoch, "first_version", started[0].FirstVersion, "err", err)
			}
			if err := ctxtime.Sleep(r.ctx, historyRetryInterval); err != nil {
				return fmt.Errorf("record the replica's history: %w", err)
			}
		}
	}
	h.extend(started, entries)
	for _, s := range started {
		r.a.log.Info("a new epoch starts in the replica's history", "epoch", s.Epoch, "first_version", s.FirstVersion)
	}
	return nil
}

// extend adds the runs that delivered entries start, and moves through
// to the last of them.
func (h *history) extend(started []*pb.EpochRun, entries []logentry.Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs = append(h.runs, started...)
	if len(entries) > 0 {
		h.through = max(h.through, entries[len(entries)-1].Version)
	}
}

func (r *run) insertRuns(runs []*pb.EpochRun) error {
	return r.control.use(r.ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, historyTxnSettingsSQL); err != nil {
				return err
			}
			for _, s := range runs {
				if _, err := tx.Exec(ctx, `INSERT INTO tashkent.history (first_version, epoch) VALUES ($1, $2)
					ON CONFLICT (first_version) DO UPDATE SET epoch = EXCLUDED.epoch`, int64(s.FirstVersion), int64(s.Epoch)); err != nil {
					return err
				}
			}
			return nil
		})
	})
}
