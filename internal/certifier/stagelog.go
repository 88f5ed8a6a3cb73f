package certifier

import (
	"bufio"
	"fmt"
	"os"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"time"
)

// Diagnostics for latency work, off unless an environment variable names a
// file (nothing is recorded otherwise; the cost is a nil check and a
// time.Now per message and per batch, tens of nanoseconds):
//
//   - TASHKENT_CERTIFIER_STAGES: every reply's and every group commit's
//     wall-clock timestamps (ns), written when the service closes, to be
//     joined with the load generator's (certbench, the same variable
//     name with _BENCH) by transaction id and version. Lines:
//     "r origin seq version received decided sendStart sent" and
//     "b first last writeStart written durable zeroedBefore zeroedAfter".
//   - TASHKENT_CERTIFIER_TRACE: a runtime/trace of the whole process life
//     (`go tool trace FILE`).
//
// Wall clocks are used because the two processes share the machine's
// clock; monotonic readings are not comparable across processes.
const (
	stageLogEnv = "TASHKENT_CERTIFIER_STAGES"
	traceEnv    = "TASHKENT_CERTIFIER_TRACE"
)

type replyStages struct {
	origin                           string
	seq, version                     uint64
	received, decided, sendStart, at int64
}

type batchStages struct {
	first, last                  uint64
	writeStart, written, durable int64
	// The log's zeroed chunks (wal.Stats.ZeroedChunks) before the write
	// and once durable: a background preallocation that finished during
	// the batch's fsync shows as a difference.
	zeroedBefore, zeroedAfter uint64
}

// stageLog collects the records in memory until the service closes.
type stageLog struct {
	path    string
	mu      sync.Mutex
	replies []replyStages
	batches []batchStages
}

func openStageLog() *stageLog {
	path := os.Getenv(stageLogEnv)
	if path == "" {
		return nil
	}
	return &stageLog{path: path, replies: make([]replyStages, 0, 1<<20)}
}

func (l *stageLog) reply(r replyStages) {
	l.mu.Lock()
	l.replies = append(l.replies, r)
	l.mu.Unlock()
}

func (l *stageLog) batch(b batchStages) {
	l.mu.Lock()
	l.batches = append(l.batches, b)
	l.mu.Unlock()
}

func (l *stageLog) write() error {
	f, err := os.Create(l.path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	l.mu.Lock()
	for _, r := range l.replies {
		fmt.Fprintf(w, "r %s %d %d %d %d %d %d\n", r.origin, r.seq, r.version, r.received, r.decided, r.sendStart, r.at)
	}
	for _, b := range l.batches {
		fmt.Fprintf(w, "b %d %d %d %d %d %d %d\n", b.first, b.last, b.writeStart, b.written, b.durable, b.zeroedBefore, b.zeroedAfter)
	}
	l.mu.Unlock()
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startTrace starts a runtime/trace when traceEnv names a file, and returns
// the function that stops it.
func startTrace() func() {
	path := os.Getenv(traceEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { trace.Stop(); f.Close() }
}

func unixNano(t time.Time) int64 { return t.UnixNano() }

// stageLogStreamsWait bounds how long Close waits for the Certify handlers
// to end before it writes the stage log (Server.Close stops gRPC first,
// which ends them at once; a Service closed on its own may still have
// streams open, which then lose their last replies' lines).
const stageLogStreamsWait = time.Second

// waitForNone waits until n is 0, or d.
func waitForNone(n *atomic.Int64, d time.Duration) {
	for deadline := time.Now().Add(d); n.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}
