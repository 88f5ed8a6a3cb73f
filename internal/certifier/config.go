package certifier

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// Limits bound what one request may cost. A request over a writeset limit
// is aborted with ABORT_REASON_LIMIT, one past the in-flight limit with
// ABORT_REASON_OVERLOADED, each with a detail naming the limit; nothing of it
// is logged.
type Limits struct {
	// WritesetBytesMax bounds the encoded size of one writeset. The whole
	// writeset travels in one gRPC message, is logged as one entry and is
	// applied in one database transaction on every replica. It must leave
	// room for the entry around it under the log's wal.EntryBytesMax (64
	// MiB); the default leaves 1 MiB.
	WritesetBytesMax int
	// WritesetKeysMax bounds the rows of one writeset: the conflict index
	// keeps about 100 bytes per key for the whole window.
	WritesetKeysMax int
	// InFlightRequestsMax bounds the requests certified but not yet answered,
	// over all streams: past it the certifier is not keeping up with fsyncs
	// and queueing more only adds latency and memory.
	InFlightRequestsMax int
}

// DefaultLimits are the limits used when a field is zero.
var DefaultLimits = Limits{
	WritesetBytesMax:    wal.EntryBytesMax - entryOverheadBytesMax,
	WritesetKeysMax:     1 << 20,
	InFlightRequestsMax: 1 << 16,
}

// Config configures a Service.
type Config struct {
	DataDir string
	// WindowVersions: see certification.Config.
	WindowVersions uint64
	// RecentEntriesMax is how many of the latest entries stay in memory for
	// delivery to replicas; older ones are read back from the log.
	RecentEntriesMax int
	// SegmentBytes is the size at which the log starts a new segment file.
	SegmentBytes int64
	Limits       Limits
	// NoSync skips fsync. Only for benchmarks that say so: it voids durability.
	NoSync bool
	// SyncDelay sleeps this long after every sync of the log: an emulated
	// slow disk for benchmarks (`--unsafe-fault-fsync-delay`, wal.Options).
	SyncDelay time.Duration
	// Group, when set, makes the service one member of a certifier group
	// (Tashkent §7.3): the group's Raft log is the durable log, the leader
	// certifies, and every member applies committed versions and serves
	// them (group.go). Nil: a single certifier with its own log.
	Group    *certgroup.Node
	Logger   *slog.Logger
	Registry prometheus.Registerer // nil: metrics are not registered

	// StageBytesMax bounds the bytes of streamed writesets held in the
	// data directory's stage/ at once (stage.go); a Stage past it fails
	// with ResourceExhausted naming --stage-bytes-max. 0: the default.
	StageBytesMax int64

	// Retention bounds the versioned log and says how long a replica that
	// is away holds it (retention.go). Zero fields: the defaults.
	Retention RetentionPolicy

	// UnsafeSkipConflictCheck: see certification.Config. Only for the fault
	// harness's detector self-test.
	UnsafeSkipConflictCheck bool

	// UnsafeDeliverBeforeDurable delivers entries to every stream before
	// they are durable (early.go), replies still once durable. A single
	// certifier only. Fault tests only: a replica that applied versions
	// the certifier then lost must be rebuilt.
	UnsafeDeliverBeforeDurable bool
	// UnsafeFaultWriteDelay sleeps this long before writing each batch,
	// whose entries were delivered as they were decided, so that a kill -9
	// fails versions replicas applied. Only with UnsafeDeliverBeforeDurable.
	UnsafeFaultWriteDelay time.Duration
}

// entryOverheadBytesMax bounds what a log entry adds to its writeset: the
// version, the transaction id (its origin is a replica name) and tags.
const entryOverheadBytesMax = 1 << 20

func (c Config) validate() error {
	if c.UnsafeDeliverBeforeDurable && c.Group != nil {
		return fmt.Errorf("delivery before durability is implemented for a single certifier only, not for a member of a certifier group")
	}
	if c.UnsafeFaultWriteDelay > 0 && !c.UnsafeDeliverBeforeDurable {
		return fmt.Errorf("--unsafe-fault-write-delay needs --unsafe-deliver-before-durable")
	}
	if c.Limits.WritesetBytesMax > wal.EntryBytesMax-entryOverheadBytesMax {
		return fmt.Errorf("writeset bytes max %d is over the log's entry limit of %d bytes minus %d for the entry's header",
			c.Limits.WritesetBytesMax, wal.EntryBytesMax, entryOverheadBytesMax)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.WindowVersions == 0 {
		c.WindowVersions = certification.DefaultWindowVersions
	}
	if c.RecentEntriesMax == 0 {
		c.RecentEntriesMax = 1 << 16
	}
	if c.Limits.WritesetBytesMax == 0 {
		c.Limits.WritesetBytesMax = DefaultLimits.WritesetBytesMax
	}
	if c.Limits.WritesetKeysMax == 0 {
		c.Limits.WritesetKeysMax = DefaultLimits.WritesetKeysMax
	}
	if c.Limits.InFlightRequestsMax == 0 {
		c.Limits.InFlightRequestsMax = DefaultLimits.InFlightRequestsMax
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.StageBytesMax == 0 {
		c.StageBytesMax = DefaultStageBytesMax
	}
	c.Retention = c.Retention.withDefaults()
	return c
}
