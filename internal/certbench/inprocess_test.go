package certbench

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/certifier"
)

// BenchmarkCertifierInProcess runs a certifier and the load generator in
// one process, over loopback gRPC, so that the standard test flags profile
// both at once:
//
//	go test ./internal/certbench -run XXX -bench CertifierInProcess -benchtime 1x \
//	  -cpuprofile cpu.out -mutexprofile mutex.out -blockprofile block.out -trace trace.out
//
// One step of -clients for the time given by certbench.duration
// (closed loop). It reports certifications per second; the separate-process
// figures (tashkent certifier-bench) are the ones to quote.
func BenchmarkCertifierInProcess(b *testing.B) {
	for _, c := range []struct {
		name    string
		clients int
		rate    float64
	}{{"saturation", 256, 0}, {"paced10k", 64, 10000}} {
		b.Run(c.name, func(b *testing.B) {
			srv, err := certifier.Listen(certifier.Config{DataDir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
				"127.0.0.1:0", "")
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			cfg := Config{Target: srv.Addr().String(), Clients: []int{c.clients}, Duration: 2 * time.Second,
				Warmup: 500 * time.Millisecond, Replicas: 3, Keys: 4, RowBytes: 32, Rate: c.rate}
			for b.Loop() {
				results, err := Run(context.Background(), cfg, io.Discard)
				if err != nil {
					b.Fatal(err)
				}
				r := results[0]
				b.ReportMetric(r.PerSecond, "cert/s")
				b.ReportMetric(float64(r.P99.Microseconds()), "p99-µs")
				b.ReportMetric(r.EntriesPerFsync, "entries/fsync")
			}
		})
	}
}
