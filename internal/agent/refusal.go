package agent

import (
	"context"
	"fmt"
	"time"
)

// writeRefusal refuses the replica's client writes while its apply makes
// no progress although versions wait (its database's applier stopped, a
// lock that is not let go, a long DDL), for longer than
// Config.RefuseWritesAfter: a write certified then would wait at COMMIT
// for versions the replica cannot apply, for as long as that lasts, while
// on another replica it commits. Writes are refused at their first
// statement (tashkent.set_write_refusal, extension causal.c) and at
// certification (certify.go); reads go on. The refusal ends with the next
// progress. watchApply steps it.
type writeRefusal struct {
	r        *run
	after    time.Duration
	refusing bool
	told     bool // the database has the current state
}

// step decides on one sample: how long the apply has made no progress
// while versions wait (0: it progresses, or none waits). A state the
// database did not take is told again at the next sample.
func (w *writeRefusal) step(stalled time.Duration, waiting, applied uint64) {
	want := stalled > w.after
	if want != w.refusing {
		w.refusing, w.told = want, false
		if want {
			w.r.a.log.Warn("the replica's apply is stuck; its clients' writes are refused until it moves", "stalled_for", stalled, "waiting", waiting, "version", applied)
		} else {
			w.r.a.log.Info("the replica applies again; its clients' writes are taken", "version", applied)
		}
	}
	if w.told {
		return
	}
	why := ""
	if w.refusing {
		since := time.Now().Add(-stalled).UTC().Format(time.TimeOnly)
		why = fmt.Sprintf("it has applied nothing since %s UTC; it is at version %d and %d later versions wait", since, applied, waiting)
	}
	w.told = w.r.setWriteRefusal(why) == nil
}

// stop lifts a refusal when the run ends (the next run lifts it too, at
// its start, in case the database could not be told now).
func (w *writeRefusal) stop() {
	if w.refusing {
		w.r.setWriteRefusal("")
	}
}

// setWriteRefusal records why client writes are refused ("": they are
// not), for certify and for the extension.
func (r *run) setWriteRefusal(why string) error {
	r.refusal.Store(&why)
	r.a.metrics.writesRefused.Set(boolGauge(why != ""))
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	err := r.control.exec(ctx, `SELECT tashkent.set_write_refusal($1)`, why)
	if err != nil && r.ctx.Err() == nil {
		r.a.log.Warn("could not tell the replica to refuse or take writes; telling it again", "err", err)
	}
	return err
}

// writeRefusal is why client writes are refused now, "" if they are not.
func (r *run) writeRefusal() string {
	if why := r.refusal.Load(); why != nil {
		return *why
	}
	return ""
}
