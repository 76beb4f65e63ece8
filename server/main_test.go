package server_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestMain fails the run if a goroutine outlives the package's tests, and
// removes the binaries teststack.Binary built.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		teststack.RemoveBinaries()
		os.Exit(code)
	}))
}
