package bench

// Which PostgreSQL processes used the CPU. A server's total is exact
// (postgresCPU: the postmaster, its live children and its reaped ones),
// but a backend's CPU moves into the postmaster's cutime when it exits,
// and pgbench's connections end with the run, before the breakdown's
// last look. So the breakdown samples every child of the system's
// postmasters every pgSampleEvery during the run, classifies it by its
// process title (update_process_title, on by default on Linux:
// "postgres: USER DB HOST(PORT) STATE" for a session, "postgres:
// walwriter" for a background process) and keeps the last CPU it saw. A
// backend's CPU after its last sample (at most pgSampleEvery of it) is
// missed by its class and falls to the rest.

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tashkent-db/tashkent/internal/process"
)

// pgSampleEvery is how often the servers' processes are sampled.
const pgSampleEvery = 100 * time.Millisecond

// pgProc is one sampled process: its class, and its CPU when first and
// last seen.
type pgProc struct {
	class       string
	first, last time.Duration
}

// pgSampler tracks the children of a set of postmasters.
type pgSampler struct {
	postmasters map[int]bool
	// exclude are the backends of the bench's own sessions: counted with
	// the rest, never as a client's.
	exclude map[int]bool
	procs   map[int]*pgProc
	sampled bool
}

func newPgSampler(postmasters []int) *pgSampler {
	s := &pgSampler{postmasters: map[int]bool{}, exclude: map[int]bool{}, procs: map[int]*pgProc{}}
	for _, pid := range postmasters {
		s.postmasters[pid] = true
	}
	return s
}

// sample reads the CPU and title of every child of the postmasters. A
// process first seen after the first sample was born during the run: all
// its CPU counts.
func (s *pgSampler) sample() {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || s.postmasters[pid] {
			continue
		}
		st, ok := process.ReadStat(pid)
		if !ok || !s.postmasters[st.PPID] {
			continue
		}
		own := st.CPU
		p := s.procs[pid]
		if p == nil {
			p = &pgProc{}
			if !s.sampled {
				p.first = own
			}
			s.procs[pid] = p
		}
		p.last = own
		if c := classifyTitle(processTitle(pid)); c != "" && !s.exclude[pid] {
			p.class = c
		}
	}
	s.sampled = true
}

// byClass sums the CPU each class used between the first sample and the
// last.
func (s *pgSampler) byClass() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range s.procs {
		class := p.class
		if class == "" {
			class = partPostgresRest
		}
		out[class] += max(0, p.last-p.first)
	}
	return out
}

// processTitle is the process's command line as ps shows it.
func processTitle(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// sessionTitleRE matches the title of a session's backend: "postgres:
// USER DB HOST(PORT) ..." over TCP, "postgres: USER DB [local] ..." over
// a Unix socket.
var sessionTitleRE = regexp.MustCompile(`^postgres: \S+ \S+ (\[local\]|\S+\(\d+\))`)

// classifyTitle maps a PostgreSQL process title to a part: a session over
// TCP is a client's, one over the Unix socket an agent's (the bench's own
// connections use TCP, and make none during a run); a walsender (its
// title also names a host) and every background process are the rest. ""
// when the title is not PostgreSQL's yet (a child just forked).
func classifyTitle(title string) string {
	if !strings.HasPrefix(title, "postgres: ") {
		return ""
	}
	m := sessionTitleRE.FindStringSubmatch(title)
	switch {
	case strings.HasPrefix(title, "postgres: walsender"), m == nil:
		return partPostgresRest
	case m[1] == "[local]":
		return partAgentSessions
	default:
		return partClientBackends
	}
}
