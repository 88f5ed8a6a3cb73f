package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// adya (crates.io, an independent Rust implementation of Elle's list-append
// checker) judges the list-append history. It is found through
// $TASHKENT_ADYA, then $PATH, then ~/.cargo/bin.
const adyaInstallHint = "install it with `cargo install adya --locked` (CI does it in .ci/run), " +
	"or point TASHKENT_ADYA at the binary"

// adyaModel is what tashkent promises a client pinned to one replica:
// snapshot isolation with session guarantees (a session sees its own
// commits). Across replicas GSI allows a stale snapshot (Tashkent §2), so
// real-time ("strong") variants are not required.
const adyaModel = "strong-session-snapshot-isolation"

// forbiddenAnomalies are the anomalies that fail the check outright, on top
// of what adyaModel rules out. G2-item (write skew) is allowed
// under snapshot isolation and is only reported.
var forbiddenAnomalies = []string{"G0", "G1a", "G1b", "G1c", "G-single", "G-nonadjacent", "lost-update", "internal"}

// AdyaReport is what adya concluded about one history.
type AdyaReport struct {
	// Valid is adya's verdict: "true", "false" or "unknown".
	Valid string `json:"valid"`
	// AnomalyTypes lists every anomaly type found, allowed ones included.
	AnomalyTypes []string `json:"anomaly_types"`
	// Counts is the number of instances per anomaly type.
	Counts map[string]int `json:"counts"`
	// Not lists the weakest consistency models the history rules out.
	Not []string `json:"not"`
	// Output is the path of adya's full JSON report.
	Output string `json:"output"`
}

// Forbidden returns the anomaly types found that snapshot isolation rules
// out: everything but the G2 family (write skew and its variants).
func (r *AdyaReport) Forbidden() []string {
	var out []string
	for _, t := range r.AnomalyTypes {
		if !strings.HasPrefix(t, "G2") && t != "write-skew" {
			out = append(out, t)
		}
	}
	return out
}

// OK reports whether the history passed: adya says valid (or found only
// allowed anomalies) and no forbidden anomaly type was found.
func (r *AdyaReport) OK() bool {
	return r.Valid == "true" || (r.Valid == "false" && len(r.Forbidden()) == 0)
}

// FindAdya returns the path of the adya binary.
func FindAdya() (string, error) {
	if p := os.Getenv("TASHKENT_ADYA"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("adya"); err == nil {
		return p, nil
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cargo", "bin", "adya")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("the isolation checker adya is not installed: %s", adyaInstallHint)
}

// CheckHistory runs adya on a list-append history file and writes its JSON
// report beside it (history.edn -> history.adya.json).
func CheckHistory(ctx context.Context, adya, historyPath string) (*AdyaReport, error) {
	args := []string{"check", "-m", "list-append", "-c", adyaModel,
		"-a", strings.Join(forbiddenAnomalies, ","), "--cycle-search-timeout", "10000", "--json", historyPath}
	cmd := exec.CommandContext(ctx, adya, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && (exit.ExitCode() == 1 || exit.ExitCode() == 2)) {
		return nil, fmt.Errorf("adya %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	out := strings.TrimSuffix(historyPath, filepath.Ext(historyPath)) + ".adya.json"
	if err := os.WriteFile(out, stdout.Bytes(), 0o644); err != nil {
		return nil, err
	}
	rep, err := parseAdyaReport(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("adya's report on %s: %w (stderr: %s)", historyPath, err, strings.TrimSpace(stderr.String()))
	}
	rep.Output = out
	return rep, nil
}

// parseAdyaReport reads the fields of `adya check --json` the harness uses.
func parseAdyaReport(b []byte) (*AdyaReport, error) {
	var raw struct {
		Valid        any                          `json:"valid"`
		AnomalyTypes []string                     `json:"anomaly_types"`
		Anomalies    map[string][]json.RawMessage `json:"anomalies"`
		Not          []string                     `json:"not"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	rep := &AdyaReport{Valid: strings.ToLower(fmt.Sprint(raw.Valid)), Not: raw.Not, Counts: map[string]int{}}
	types := map[string]bool{}
	for _, t := range raw.AnomalyTypes {
		types[t] = true
	}
	for t, list := range raw.Anomalies {
		types[t] = true
		rep.Counts[t] = len(list)
	}
	for t := range types {
		rep.AnomalyTypes = append(rep.AnomalyTypes, t)
	}
	sort.Strings(rep.AnomalyTypes)
	switch rep.Valid {
	case "true", "false", "unknown":
	default:
		return nil, fmt.Errorf("unexpected verdict %v", raw.Valid)
	}
	return rep, nil
}
