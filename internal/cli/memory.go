package cli

import (
	"log/slog"
	"os"
	"runtime/debug"
)

// The default soft memory limits. An agent's is its apply backlog
// (--apply-backlog-bytes) plus what it needs besides: a fragment in hand
// decoded with its statements, the certifier stream's window, its
// connections. The certifier's leaves its conflict index room under
// load; a streamed transaction adds a few fragments to it.
const (
	agentMemoryOverhead  = 128 << 20
	certifierMemoryLimit = 1 << 30
)

// setMemoryLimit gives the Go runtime a soft memory limit (Go's
// GOMEMLIMIT): as the process nears it, the garbage collector runs more
// often, so that what a large transaction's fragments leave behind is
// collected before the heap grows past the limit, instead of at the next
// doubling (GOGC). It is soft: memory in use above it is not refused, and
// the collector takes at most about half the CPU to keep to it. The
// GOMEMLIMIT environment variable, if set, wins; limit 0 sets none.
func setMemoryLimit(limit int64) {
	if os.Getenv("GOMEMLIMIT") != "" || limit <= 0 {
		return
	}
	debug.SetMemoryLimit(limit)
	slog.Debug("soft memory limit set", "bytes", limit)
}
