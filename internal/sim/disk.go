package sim

import (
	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// disk is the certifier's data directory: its log device and its
// generation file. Entries are written, then synced; only synced entries
// are sure to survive a crash. entries[i] holds version i+1 (the simulated
// log is never compacted). Entries are encoded as the real log holds them
// (internal/logentry).
type disk struct {
	entries []logentry.Entry
	epochs  []uint64 // epochs[i] is entries[i]'s LogEntry.epoch
	synced  int      // entries[:synced] are on stable storage
	// generation is the last generation a start of the certifier wrote
	// (and synced) into its generation file.
	generation uint64
}

// durable is the highest version that survives any crash.
func (d *disk) durable() uint64 { return uint64(d.synced) }

// last is the highest version written (synced or not).
func (d *disk) last() uint64 { return uint64(len(d.entries)) }

// first is the oldest version the log holds, 0 if it is empty.
func (d *disk) first() uint64 { return min(1, d.last()) }

// startsAfter is the version before the first one the log holds
// (certifier.Admit).
func (d *disk) startsAfter() uint64 { return max(d.first(), 1) - 1 }

func (d *disk) write(es []logentry.Entry) {
	for _, e := range es {
		if e.Version != d.last()+1 {
			panic("sim: the certifier wrote a log entry out of order")
		}
		h, err := logentry.RawHeaderOf(e.Bytes)
		if err != nil {
			panic("sim: the certifier wrote a log entry it cannot read: " + err.Error())
		}
		d.entries = append(d.entries, e)
		d.epochs = append(d.epochs, h.Epoch)
	}
}

// read is a certifier.EntryReader over the disk: delivery reads what it
// sends from here, and in mode ed from the batch not yet written too
// (certProcess.read).
func (d *disk) read(dst [][]byte, after, upTo uint64, _ int) ([][]byte, error) {
	for _, e := range d.entries[after:min(upTo, d.last())] {
		dst = append(dst, e.Bytes)
	}
	return dst, nil
}

// sync makes the first upTo entries stable.
func (d *disk) sync(upTo int) { d.synced = max(d.synced, upTo) }

// crash loses unsynced writes. The log's records are checksummed and
// recovery stops at the first bad one (internal/wal), so what survives is
// the synced part plus some prefix of the unsynced tail: keep is how many
// unsynced entries made it to the platter anyway.
func (d *disk) crash(keep int) (lost int) {
	survive := min(d.synced+keep, len(d.entries))
	lost = len(d.entries) - survive
	d.entries = d.entries[:survive:survive]
	d.epochs = d.epochs[:survive:survive]
	d.synced = survive
	return lost
}

// runs are the log's runs, (epoch, first version), over the versions up
// to upTo: what the service's logRuns.view gives admission
// (certifier.LogHistory.Runs).
func (d *disk) runs(upTo uint64) []*pb.EpochRun {
	return runsOf(d.epochs[:min(upTo, d.last())])
}

// epochAt is the epoch of the entry at version v (0: none).
func (d *disk) epochAt(v uint64) uint64 {
	if v == 0 || v > d.last() {
		return 0
	}
	return d.epochs[v-1]
}

// topEpoch is the epoch of the log's last entry (0: empty).
func (d *disk) topEpoch() uint64 {
	if len(d.epochs) == 0 {
		return 0
	}
	return d.epochs[len(d.epochs)-1]
}

// runsOf turns the epochs of versions 1, 2, ... into runs.
func runsOf(epochs []uint64) []*pb.EpochRun {
	var runs []*pb.EpochRun
	for i, e := range epochs {
		if len(runs) == 0 || runs[len(runs)-1].Epoch != e {
			runs = append(runs, &pb.EpochRun{Epoch: e, FirstVersion: uint64(i + 1)})
		}
	}
	return runs
}

// epochInRuns is the epoch runs give version v (0: none, v is below them).
func epochInRuns(runs []*pb.EpochRun, v uint64) uint64 {
	epoch := uint64(0)
	for _, r := range runs {
		if r.FirstVersion > v {
			break
		}
		epoch = r.Epoch
	}
	return epoch
}
