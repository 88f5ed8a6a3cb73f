package wal

import (
	"testing"
)

// BenchmarkAppendBatch measures group commits of 64 entries of 100 bytes, each made durable with fsync.
// The figure depends on the storage device's fsync latency.
func BenchmarkAppendBatch(b *testing.B) {
	const batchEntries, payloadBytes = 64, 100
	opts := testOptions(b.TempDir(), 0)
	opts.NoSync = false
	l := mustOpen(b, opts)
	defer mustClose(b, l)

	batch := make([]Entry, batchEntries)
	payload := make([]byte, payloadBytes)
	next := uint64(1)
	b.SetBytes(batchEntries * payloadBytes)
	b.ReportAllocs()
	for b.Loop() {
		for i := range batch {
			batch[i] = Entry{Version: next, Payload: payload}
			next++
		}
		if err := l.Append(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(next-1)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(l.Fsyncs())/float64(l.Stats().Appends), "fsyncs/append")
}
