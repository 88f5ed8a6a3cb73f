package sim

import "github.com/tashkent-db/tashkent/internal/logentry"

// disk is the certifier's log device. Entries are written, then synced;
// only synced entries are sure to survive a crash. entries[i] holds version
// i+1 (the simulated log is never compacted). Entries are encoded as the
// real log holds them (internal/logentry).
type disk struct {
	entries []logentry.Entry
	synced  int // entries[:synced] are on stable storage
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
		d.entries = append(d.entries, e)
	}
}

// read is the certifier's certifier.EntryReader over the disk: delivery
// reads what it sends from here.
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
	d.synced = survive
	return lost
}
