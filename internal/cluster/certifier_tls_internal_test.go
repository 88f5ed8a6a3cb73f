package cluster

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestCertifierTLSIsChosenAtCreation: --certifier-tls is recorded in
// cluster.json, and an existing plaintext cluster refuses it (its running
// processes would stay plaintext).
func TestCertifierTLSIsChosenAtCreation(t *testing.T) {
	dir := t.TempDir()
	st, err := newState(dir, Options{Replicas: 2, Certifiers: 3, CertifierTLS: true})
	if err != nil {
		t.Fatal(err)
	}
	st.Binary = "/usr/local/bin/tashkent"
	if err := st.Save(); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.CertifierTLS, st.CertifierTLS) || got.CertifierTLS == nil {
		t.Fatalf("cluster.json lost the certifier TLS: %+v", got.CertifierTLS)
	}
	if err := checkCompatible(got, Options{}); err != nil {
		t.Fatalf("restarting a TLS cluster without the flag: %v", err)
	}

	plain := testState(t.TempDir())
	err = checkCompatible(plain, Options{CertifierTLS: true})
	if err == nil || !strings.Contains(err.Error(), "created without --certifier-tls") {
		t.Fatalf("turning TLS on for a plaintext cluster: %v", err)
	}
	var out bytes.Buffer
	got.WriteEndpoints(&out)
	if !strings.Contains(out.String(), "mutual TLS") || !strings.Contains(out.String(), "--certifier-tls-cert "+got.CertifierTLS.Dir+"/admin.crt") {
		t.Fatalf("up's endpoints do not say how to reach the TLS certifiers:\n%s", out.String())
	}
	out.Reset()
	plain.WriteEndpoints(&out)
	if strings.Contains(out.String(), "mutual TLS") {
		t.Fatalf("a plaintext cluster's endpoints mention TLS:\n%s", out.String())
	}
	if len(plain.certifierTLSFiles("replica1").Args()) != 0 {
		t.Fatal("a plaintext cluster hands TLS flags to its processes")
	}
}

// TestEnsureCertifierTLSKeepsFiles: the files are made once and kept, so
// a restart (and an operator's own replacement) uses the same ones.
func TestEnsureCertifierTLSKeepsFiles(t *testing.T) {
	dir := t.TempDir()
	st, err := newState(dir, Options{Replicas: 1, CertifierTLS: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ensureCertifierTLS(st); err != nil {
		t.Fatal(err)
	}
	f := st.certifierTLSFiles(st.Certifier.tlsName())
	first, err := os.ReadFile(f.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := ensureCertifierTLS(st); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(f.Cert)
	if !bytes.Equal(first, again) {
		t.Fatal("a second ensureCertifierTLS replaced the certifier's certificate")
	}
	for _, name := range []string{"certifier", "replica1", "admin"} {
		if _, err := st.certifierTLSFiles(name).DialOption(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
