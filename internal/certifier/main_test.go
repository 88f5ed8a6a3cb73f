package certifier_test

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

// TestMain removes the tashkent binary the tests built (testbin.Main).
func TestMain(m *testing.M) { testbin.Main(m) }
