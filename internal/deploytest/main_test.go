package deploytest

import (
	"testing"

	"github.com/tashkent-db/tashkent/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }
