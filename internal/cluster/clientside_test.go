package cluster

import (
	"bytes"
	"crypto/tls"
	"os"
	"testing"
)

// tashkent up generates the proxies' certificate once and keeps it.
func TestTLSFilesAreGeneratedOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	cert, key, err := tlsFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		t.Fatalf("generated pair does not load: %v", err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	first, _ := os.ReadFile(cert)
	cert2, _, err := tlsFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(cert2)
	if cert2 != cert || !bytes.Equal(first, again) {
		t.Fatal("a second tashkent up replaced the certificate")
	}
}
