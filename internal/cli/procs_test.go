package cli

import (
	"runtime"
	"testing"
)

// A certifier told that it shares its host takes half the CPUs, as the
// agent does; one on a host of its own keeps every CPU.
func TestCertifierBesideReplicasTakesHalfTheCPUs(t *testing.T) {
	t.Setenv("GOMAXPROCS", "") // the automatic choice, whatever the test runs with
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		sharesHost string
		want       int
	}{
		{"false", runtime.NumCPU()},
		{"true", max(1, runtime.NumCPU()/2)},
	} {
		runtime.GOMAXPROCS(runtime.NumCPU())
		cmd := newCertifierCommand()
		if err := cmd.Flags().Set(sharesHostFlag, c.sharesHost); err != nil {
			t.Fatal(err)
		}
		if err := setMaxProcs(cmd, 0); err != nil {
			t.Fatal(err)
		}
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("--shares-host=%s: GOMAXPROCS %d, want %d of %d CPUs", c.sharesHost, got, c.want, runtime.NumCPU())
		}
	}
}
