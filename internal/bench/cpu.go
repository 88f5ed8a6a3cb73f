package bench

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/tashkent-db/tashkent/internal/process"
)

// postgresCPU is the CPU time used so far by one PostgreSQL server: its
// postmaster, every live child (backends, walwriter, checkpointer, ...)
// and the children that already exited (the postmaster's cutime+cstime:
// a backend's CPU is counted there once its connection ends).
func postgresCPU(postmaster int) (time.Duration, error) {
	pm, ok := process.ReadStat(postmaster)
	if !ok {
		return 0, fmt.Errorf("postmaster %d: no /proc/%d/stat", postmaster, postmaster)
	}
	total := pm.CPU + pm.ChildrenCPU
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		st, ok := process.ReadStat(pid)
		if !ok || st.PPID != postmaster {
			continue // gone meanwhile, or not a child of this server
		}
		total += st.CPU
	}
	return total, nil
}
