package faults

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// adya must fail a lost update and must allow write skew (G2-item), which
// snapshot isolation permits: the two hand-made histories in testdata pin
// how the harness calls adya and reads its verdict.
func TestAdyaVerdicts(t *testing.T) {
	adya, err := FindAdya()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file      string
		ok        bool
		forbidden string
	}{
		{"lost-update.edn", false, "lost-update"},
		{"write-skew.edn", true, ""},
	} {
		t.Run(tc.file, func(t *testing.T) {
			// CheckHistory writes its report beside the history.
			dir := t.TempDir()
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tc.file)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			rep, err := CheckHistory(context.Background(), adya, path)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() != tc.ok {
				t.Fatalf("OK() = %v, want %v (report %+v)", rep.OK(), tc.ok, rep)
			}
			if tc.forbidden != "" && !slices.Contains(rep.Forbidden(), tc.forbidden) {
				t.Fatalf("forbidden anomalies %v, want %s among them", rep.Forbidden(), tc.forbidden)
			}
		})
	}
}
