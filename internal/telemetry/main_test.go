package telemetry

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the package's tests: the
// exporters and batchers Setup starts must end with its shutdown.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
