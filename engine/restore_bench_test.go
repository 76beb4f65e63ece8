package engine

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkRestore measures StartFrom on an image holding n stored
// messages (between two agents, all taken but the receiver's newest
// received list): the restore must stay linear in the messages.
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			st := NewMemoryStore()
			var cfg Config
			tb := newTestbed(b, func(c *Config) { c.Store = st; cfg = *c })
			alice, bob := tb.newAgent("alice"), tb.newAgent("bob")
			tb.settle()
			img, err := st.Image()
			if err != nil {
				b.Fatal(err)
			}
			base := tb.sys.BaseTaskID()
			for i := range n {
				img.Messages = append(img.Messages, Message{
					TaskID: base, SenderID: alice, Receiver: []string{bob}, Message: "m",
					StageRelative: NoRelative, MessageID: fmt.Sprintf("m-%07d", i), Timestamp: time.Unix(int64(i), 0),
				})
			}
			for i := range img.Agents {
				if img.Agents[i].AgentID == bob {
					var recv []string
					for j := max(n-receivedKept, 0); j < n; j++ {
						recv = append(recv, fmt.Sprintf("m-%07d", j))
					}
					img.Agents[i].Received = recv
				}
			}
			cfg.Store = nil
			runtime.GC() // the setup's garbage is not the restore's
			b.ResetTimer()
			var total time.Duration
			for b.Loop() {
				start := time.Now()
				sys, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := sys.StartFrom(img); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				b.StopTimer()
				_ = sys.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "restore-ms")
		})
	}
}
