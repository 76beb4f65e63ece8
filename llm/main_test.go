package llm

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the package's tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
