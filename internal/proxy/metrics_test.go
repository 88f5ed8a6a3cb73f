package proxy

import "testing"

// Each lap of a COMMIT's clock lands in its own phase of the histogram,
// once.
func TestCommitPhasesAreObservedOnceEach(t *testing.T) {
	m := newMetrics()
	clock := m.phaseClock()
	for phase := range phaseCount {
		clock.lap(phase)
	}
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "tashkent_proxy_commit_phase_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, label := range metric.GetLabel() {
				counts[label.GetValue()] = metric.GetHistogram().GetSampleCount()
			}
		}
	}
	for _, name := range commitPhaseNames {
		if counts[name] != 1 {
			t.Fatalf("observations by phase %v, want 1 for each of %v", counts, commitPhaseNames)
		}
	}
}
