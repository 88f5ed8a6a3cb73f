package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

// Summary is the outcome of one run. Failures lists every reason the run
// failed; a run passes when it is empty.
type Summary struct {
	Dir  string       `json:"dir"`
	Mode cluster.Mode `json:"mode"`
	// Certifiers is the size of the certifier group (1: a single one).
	Certifiers int `json:"certifiers"`
	// Transactions are the list-append transactions adya checked, by outcome.
	Transactions map[OpType]int `json:"transactions"`
	Adya         *AdyaReport    `json:"adya,omitempty"`
	History      string         `json:"history"`
	Bank         BankResult     `json:"bank"`
	// LongForkReads and LongForkInserts count the long-fork workload.
	LongForkReads   int      `json:"long_fork_reads"`
	LongForkInserts int      `json:"long_fork_inserts"`
	LongForks       []string `json:"long_forks,omitempty"`
	// AcknowledgedCommits counts the acknowledged writes checked for
	// durability; Lost describes those missing at the end.
	AcknowledgedCommits int      `json:"acknowledged_commits"`
	Lost                []string `json:"lost,omitempty"`
	Faults              []Fault  `json:"faults"`
	// Pauses are the longest times without an acknowledged commit around
	// each fault, by kind (the failover pauses of the certifier group).
	Pauses map[FaultKind]PauseStats `json:"pauses,omitempty"`
	// Convergence is how long replicas took to converge after the faults
	// were healed and the workload stopped.
	Convergence time.Duration `json:"convergence_ns"`
	// RelayConnections counts, when the certifier has a namespace of its
	// own, the connections relayed across each replica's veth (and the
	// harness's), by name.
	RelayConnections map[string]int `json:"relay_connections,omitempty"`
	// ED is what mode ed's checks found (nil in mw).
	ED       *EDResult `json:"ed,omitempty"`
	SelfTest *SelfTest `json:"self_test,omitempty"`
	Failures []string  `json:"failures,omitempty"`
}

// SelfTest is the outcome of the detector self-test.
type SelfTest struct {
	Transactions map[OpType]int `json:"transactions"`
	Adya         *AdyaReport    `json:"adya,omitempty"`
	History      string         `json:"history"`
	// Lost counts acknowledged appends missing at the end (lost updates
	// the durability checker sees).
	Lost int `json:"lost"`
	// DeadlocksBroken counts the backends the deadlock breaker terminated.
	DeadlocksBroken int  `json:"deadlocks_broken"`
	Detected        bool `json:"detected"`
}

// OK reports whether the run passed.
func (s *Summary) OK() bool { return len(s.Failures) == 0 }

func (s *Summary) fail(format string, args ...any) {
	s.Failures = append(s.Failures, fmt.Sprintf(format, args...))
}

// FaultCounts counts the injected faults by kind.
func (s *Summary) FaultCounts() map[FaultKind]int {
	out := map[FaultKind]int{}
	for _, f := range s.Faults {
		out[f.Kind]++
	}
	return out
}

// BackendKills counts the kill-backend faults and those that hit a
// backend holding or waiting for the commit turn.
func (s *Summary) BackendKills() (n, turn int) {
	for _, f := range s.Faults {
		if f.Kind == KillBackend {
			n++
			if f.Backend == "holding" || f.Backend == "committing" || f.Backend == "applying" {
				turn++
			}
		}
	}
	return n, turn
}

// Write prints the summary for people.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "fault-test summary (%s, mode %s, %d certifier(s))\n", s.Dir, s.Mode, s.Certifiers)
	fmt.Fprintf(w, "  list-append transactions checked: %d (%d ok, %d failed, %d unknown)\n",
		s.Transactions[OK]+s.Transactions[Fail]+s.Transactions[Info], s.Transactions[OK], s.Transactions[Fail], s.Transactions[Info])
	if s.Adya != nil {
		fmt.Fprintf(w, "  adya (%s): valid=%s, anomalies %s\n", adyaModel, s.Adya.Valid, describeAnomalies(s.Adya))
	}
	if e := s.ED; e != nil {
		fmt.Fprintf(w, "  mode ed (%d%% fast): %d versions failed at certifier kills (at least); "+
			"fast commits %d, %d failed; safe commits %d, %d more failed at COMMIT (TK006); "+
			"fast reads %d, %d failed with a write they read; safe reads %d; %d TK006 warnings; %d fast commits unresolved\n",
			e.FastShare, e.FailedVersions, e.FastCommits, e.FastFailed, e.SafeCommits, e.SafeFailed,
			e.FastReads, e.FastReadsFailed, e.SafeReads, e.Warnings, e.Unresolved)
	}
	fmt.Fprintf(w, "  bank: %d reads, transfers %d ok / %d failed / %d unknown, %d violations\n",
		s.Bank.Reads, s.Bank.Transfers[OK], s.Bank.Transfers[Fail], s.Bank.Transfers[Info], len(s.Bank.Violations))
	fmt.Fprintf(w, "  long fork: %d reads, %d inserts, %d forks\n", s.LongForkReads, s.LongForkInserts, len(s.LongForks))
	fmt.Fprintf(w, "  durability: %d acknowledged writes checked, %d lost\n", s.AcknowledgedCommits, len(s.Lost))
	fmt.Fprintf(w, "  faults injected: %d (%s)\n", len(s.Faults), describeFaults(s.FaultCounts()))
	if n, hit := s.BackendKills(); n > 0 {
		fmt.Fprintf(w, "  kill-backend: %d of %d hit a backend holding or waiting for the commit turn\n", hit, n)
	}
	if len(s.Pauses) > 0 {
		fmt.Fprintf(w, "  longest time without an acknowledged commit, by fault: %s\n", describePauses(s.Pauses))
	}
	fmt.Fprintf(w, "  convergence after healing: %.2f s\n", s.Convergence.Seconds())
	if len(s.RelayConnections) > 0 {
		fmt.Fprintf(w, "  connections relayed to the certifier's namespace, by veth: %v\n", s.RelayConnections)
	}
	if st := s.SelfTest; st != nil {
		yes := "no"
		if st.Detected {
			yes = "yes"
		}
		anomalies := "-"
		if st.Adya != nil {
			anomalies = describeAnomalies(st.Adya)
		}
		fmt.Fprintf(w, "  self-test (conflict check disabled): detected %s: %d transactions, anomalies %s, %d acknowledged appends lost, %d deadlocks broken\n",
			yes, st.Transactions[OK]+st.Transactions[Fail]+st.Transactions[Info], anomalies, st.Lost, st.DeadlocksBroken)
	}
	if s.OK() {
		fmt.Fprintln(w, "PASS")
		return
	}
	fmt.Fprintln(w, "FAIL:")
	for _, f := range s.Failures {
		fmt.Fprintf(w, "  - %s\n", f)
	}
}

func describeAnomalies(r *AdyaReport) string {
	if len(r.AnomalyTypes) == 0 {
		return "none"
	}
	parts := make([]string, len(r.AnomalyTypes))
	for i, t := range r.AnomalyTypes {
		parts[i] = fmt.Sprintf("%s×%d", t, r.Counts[t])
	}
	return strings.Join(parts, ", ")
}

func describeFaults(c map[FaultKind]int) string {
	if len(c) == 0 {
		return "none"
	}
	var parts []string
	for k, n := range c {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// save writes summary.json and faults.json into the output directory.
func (s *Summary) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var lines []string
	for _, f := range s.Faults {
		lines = append(lines, f.String())
	}
	return os.WriteFile(filepath.Join(s.Dir, "faults.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
