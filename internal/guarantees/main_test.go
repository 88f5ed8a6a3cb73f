package guarantees_test

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// TestMain removes the tashkent binary the fault tests built (they run
// the certifier as a process, to kill it with SIGKILL).
func TestMain(m *testing.M) { testbin.Main(m) }
