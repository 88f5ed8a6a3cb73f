package certgroup_test

import (
	"os"
	"os/exec"
	"testing"
)

// runSimulationWithoutRace runs the thousands of seeds in a test binary
// built without the race detector. The simulation runs in one goroutine, so
// the detector has nothing to find in it and only makes it about six times
// slower; CI runs the whole suite with -race, and this keeps the seed count
// at its default there. The rest of the package (Node, the transport) is
// tested under the detector as usual.
func runSimulationWithoutRace(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the simulation under -race re-runs itself without it and needs the go command on PATH: %v", err)
	}
	args := []string{"test", "-count=1", "-run", "^TestSimulation$", "."}
	if testing.Short() {
		args = append(args, "-short")
	}
	cmd := exec.Command(goBin, args...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("simulation (built without -race): %v\n%s", err, out)
	}
	t.Logf("simulation built without -race: %s", out)
}
