package cluster

import (
	"crypto/tls"
	"sync"
	"testing"
)

// TestTLSFilesConcurrentFirstUse: `tashkent up` starts the proxies in
// parallel and each asks for the cluster's TLS files; the first time, every
// caller found none and wrote its own pair over the others', so a proxy
// could be handed a certificate and a key from two different pairs ("tls:
// private key does not match public key"; seen by the fault harness).
func TestTLSFilesConcurrentFirstUse(t *testing.T) {
	for range 5 {
		dir := t.TempDir()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if _, _, err := tlsFiles(dir); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		cert, key, err := tlsFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			t.Fatalf("the TLS files written by concurrent first uses do not match: %v", err)
		}
	}
}
