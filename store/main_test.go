package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the package's tests. A
// JetStream Fetch (nats.go) leaves a goroutine that ends with the fetch's
// expiry, not with the call: it is not ours to end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*pullConsumer).fetch.func1"))
}
