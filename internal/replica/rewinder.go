package replica

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Rewinder is what a replica keeps so that it can go back to an earlier
// version by undoing rows, without a rebuild: its pins (Pins) and the
// entries above the oldest one (UndoWindow). Under eventual durability a
// replica may commit versions that later fail (Kashi, "Eventual
// Durability", §2.2.1: committed, then failed rather than durable); it
// must then hold none of them (Def. 2.2.1: only the committed projection
// survives), so it goes back to a durable version k and replays from
// there.
//
// One Rewinder serves a life of the database: it outlives the agent's
// certifier streams (the verdict "rewind to C" comes when a stream opens
// again), and a new one is needed after the database restarted (its pins
// did not survive). The agent:
//
//	ResumeRewind(ctx, conn)              // at start, before anything else
//	r := replica.NewRewinder(replica.RewinderConfig{..., Version: the replica's version})
//	go r.Run(ctx)                        // pins every 100 ms, trims the window
//	r.StreamOpened(v)                    // each stream opens at the replica's version v
//	r.Delivered(entries...)              // every entry delivered, local versions' too, in order
//	r.Advance(durable)                   // every durable version heard in the admitted epoch
//	k, err := r.Rewind(ctx, apply, c, v) // on "rewind to C": gate closed, no backend in the commit order
type Rewinder struct {
	Pins    *Pins
	Window  *UndoWindow
	applier *Applier
	logger  *slog.Logger
}

// RewinderConfig configures a Rewinder.
type RewinderConfig struct {
	Pins PinsConfig
	// Version is the replica's version: the first entry delivered is
	// Version + 1.
	Version uint64
	// WindowBytesMax bounds the undo window; 0: UndoWindowBytesDefault.
	WindowBytesMax int
	// Applier is the agent's (its metadata cache is used and refreshed).
	Applier *Applier
	// Logger hears of pins that could not be taken; nil: nobody does.
	Logger *slog.Logger
}

// NewRewinder returns a Rewinder with no pin yet.
func NewRewinder(cfg RewinderConfig) *Rewinder {
	a := cfg.Applier
	if a == nil {
		a = NewApplier()
	}
	return &Rewinder{Pins: NewPins(cfg.Pins), Window: NewUndoWindow(cfg.Version, cfg.WindowBytesMax), applier: a, logger: cfg.Logger}
}

// Delivered adds entries delivered to the replica (in version order) to
// the undo window.
func (r *Rewinder) Delivered(entries ...logentry.Entry) { r.Window.Append(entries...) }

// StreamOpened says a certifier stream opens at the replica's version v:
// entries delivered above it but not applied are forgotten, since the
// stream delivers them again (from another epoch, perhaps).
func (r *Rewinder) StreamOpened(v uint64) { r.Window.DropAbove(v) }

// Advance tells the pins the durable version (Pins.Advance).
func (r *Rewinder) Advance(durable uint64) { r.Pins.Advance(durable) }

// Run takes and drops pins every Interval and trims the undo window to the
// oldest pin, until ctx ends; then it closes the pins. Failures to pin are
// logged when they start and when they stop.
func (r *Rewinder) Run(ctx context.Context) {
	t := time.NewTicker(r.Pins.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		err := r.Pins.Tick(ctx)
		if ctx.Err() != nil {
			r.Pins.Close(context.WithoutCancel(ctx))
			return
		}
		r.logPinning(err, failing)
		failing = err != nil
		if oldest, ok := r.Pins.Oldest(); ok {
			r.Window.Trim(oldest)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

func (r *Rewinder) logPinning(err error, failing bool) {
	switch {
	case r.logger == nil:
	case err != nil && !failing:
		r.logger.Warn("could not pin a snapshot of the replica; a rewind may have to rebuild it instead", "err", err)
	case err == nil && failing:
		r.logger.Info("pinning snapshots of the replica again")
	}
}

// Rewind takes the replica back from its version v to the newest usable
// pin k at or below c (the highest version its history shares with the
// certifier's log), undoing (k, v] on apply, the registered apply
// connection (Applier.Undo), and finishing the rewind (FinishRewind). It
// returns k: the versions (k, c] are then replayed from the log. The
// caller has closed the gate and ended every backend in the commit order
// (tashkent.rewind_begin refuses otherwise, 55006).
//
// A CannotUndoError (no usable pin, entries the window lost, a version
// that wrote a whole table or the schema, a pin whose connection broke)
// means the replica needs a rebuild; nothing was written. After another
// error the undo may have committed (the finish failed, or the apply
// connection broke on the way): no pin is taken until r.ResumeRewind
// (on a working connection) finishes the rewind or finds none to finish.
func (r *Rewinder) Rewind(ctx context.Context, apply *pgx.Conn, c, v uint64) (uint64, error) {
	if v <= c {
		return 0, fmt.Errorf("replica: rewind: the replica's version %d is not above %d: nothing to undo", v, c)
	}
	pin := r.Pins.Usable(c)
	if pin == nil {
		return 0, &CannotUndoError{Reason: fmt.Sprintf("no pinned snapshot at a durable version at or below %d (pins at versions %v)", c, r.Pins.Versions())}
	}
	defer r.Pins.Return(pin)
	k := pin.Version
	entries, err := r.undoEntries(k, v)
	if err != nil {
		return 0, err
	}
	r.Pins.suspend()
	if err := r.applier.Undo(ctx, apply, pin, entries); err != nil {
		if !apply.IsClosed() { // the database answered: the undo rolled back
			r.Pins.resume()
		}
		return 0, err
	}
	if err := r.finish(ctx, apply, k); err != nil {
		return 0, err
	}
	return k, nil
}

// finish finishes the rewind to k whose undo committed, and lets the pins
// go on from k.
func (r *Rewinder) finish(ctx context.Context, conn *pgx.Conn, k uint64) error {
	if _, err := FinishRewind(ctx, conn, k); err != nil {
		return err
	}
	r.Pins.Rewound(k)
	r.Window.DropAbove(k)
	r.Pins.resume()
	return nil
}

// ResumeRewind finishes a rewind whose undo committed but whose finish
// failed (the package's ResumeRewind), and lets the pins go on, from its
// version, or as they were if no rewind is pending.
func (r *Rewinder) ResumeRewind(ctx context.Context, conn *pgx.Conn) (k uint64, resumed bool, err error) {
	k, pending, err := PendingRewind(ctx, conn)
	if err != nil {
		return 0, false, err
	}
	if !pending {
		r.Pins.resume()
		return 0, false, nil
	}
	if err := r.finish(ctx, conn, k); err != nil {
		return 0, false, err
	}
	return k, true, nil
}

// undoEntries decodes the entries (k, v] of the window.
func (r *Rewinder) undoEntries(k, v uint64) ([]*certifierpb.LogEntry, error) {
	encoded, err := r.Window.Entries(k, v)
	if err != nil {
		return nil, err
	}
	entries := make([]*certifierpb.LogEntry, len(encoded))
	for i, e := range encoded {
		if entries[i], err = e.Decode(); err != nil {
			return nil, fmt.Errorf("replica: rewind: decode version %d: %w", e.Version, err)
		}
	}
	return entries, nil
}
