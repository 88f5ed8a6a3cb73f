package certbench

import (
	"bufio"
	"fmt"
	"os"
	"sync"
	"time"
)

// stageLogEnv names a file for every measured request's wall-clock
// timestamps (ns): "c origin seq scheduled called returned", to be joined
// with the certifier's (certifier/stagelog.go, TASHKENT_CERTIFIER_STAGES)
// by transaction id. Off when unset.
const stageLogEnv = "TASHKENT_CERTIFIER_STAGES_BENCH"

type clientStages struct {
	origin                      string
	seq                         uint64
	scheduled, called, returned int64
}

type stageLog struct {
	mu   sync.Mutex
	recs []clientStages
}

var stages = openStageLog()

func openStageLog() *stageLog {
	if os.Getenv(stageLogEnv) == "" {
		return nil
	}
	return &stageLog{}
}

func (l *stageLog) add(origin string, seq uint64, scheduled, called, returned time.Time) {
	l.mu.Lock()
	l.recs = append(l.recs, clientStages{origin, seq, scheduled.UnixNano(), called.UnixNano(), returned.UnixNano()})
	l.mu.Unlock()
}

// flush writes what was recorded, when enabled.
func (l *stageLog) flush() error {
	if l == nil {
		return nil
	}
	f, err := os.Create(os.Getenv(stageLogEnv))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	l.mu.Lock()
	for _, r := range l.recs {
		fmt.Fprintf(w, "c %s %d %d %d %d\n", r.origin, r.seq, r.scheduled, r.called, r.returned)
	}
	l.mu.Unlock()
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
