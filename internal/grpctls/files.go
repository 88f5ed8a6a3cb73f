package grpctls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
)

// The flag names, the same on every command that talks to a certifier
// (certifier, agent, certifier members, certifier-bench). They configure
// certifier channels only: PostgreSQL's clients use PostgreSQL's own TLS.
const (
	FlagCA   = "certifier-tls-ca"
	FlagCert = "certifier-tls-cert"
	FlagKey  = "certifier-tls-key"
)

// Files names the PEM files of one process's certifier TLS: the cluster CA
// that signs every certificate, and this process's certificate (chain) and
// private key. The zero value means plaintext.
type Files struct {
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// AddFlags registers the three flags on fs, filling f.
func (f *Files) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.CA, FlagCA, "", "PEM CA that signs every certifier-channel certificate: turns on mutual TLS to and among certifiers (with --"+FlagCert+" and --"+FlagKey+"); none: plaintext")
	fs.StringVar(&f.Cert, FlagCert, "", "PEM certificate (chain) this process presents on certifier channels, signed by --"+FlagCA)
	fs.StringVar(&f.Key, FlagKey, "", "PEM private key of --"+FlagCert)
}

// Enabled reports whether any of the files is given.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Args are the flags that hand f to a child process (none when disabled).
func (f Files) Args() []string {
	if !f.Enabled() {
		return nil
	}
	return []string{"--" + FlagCA, f.CA, "--" + FlagCert, f.Cert, "--" + FlagKey, f.Key}
}

// Check refuses half a configuration: mutual TLS needs all three files,
// and a missing one must never fall back to plaintext.
func (f Files) Check() error {
	if !f.Enabled() {
		return nil
	}
	var missing []string
	for _, m := range []struct{ name, value string }{{FlagCA, f.CA}, {FlagCert, f.Cert}, {FlagKey, f.Key}} {
		if m.value == "" {
			missing = append(missing, "--"+m.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("certifier TLS is half configured: %v missing; mutual TLS needs --%s, --%s and --%s together "+
			"(or none of them for plaintext); see docs/OPERATIONS.md, \"TLS on certifier channels\"",
			missing, FlagCA, FlagCert, FlagKey)
	}
	return nil
}

// material is what the files hold, parsed.
type material struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// load reads and checks the three files.
func (f Files) load() (*material, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("certifier TLS: loading certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("certifier TLS: reading CA %s: %w", f.CA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("certifier TLS: %s (--%s) holds no PEM certificate", f.CA, FlagCA)
	}
	if err := verifyOwn(cert, pool); err != nil {
		return nil, fmt.Errorf("certifier TLS: %s is not signed by the CA %s: %w "+
			"(every party must present a certificate of the same CA)", f.Cert, f.CA, err)
	}
	return &material{cert: cert, pool: pool}, nil
}

// verifyOwn checks that the process's own certificate chains to the CA, so
// that a mix-up of files is reported at start-up rather than by every peer.
func verifyOwn(cert tls.Certificate, pool *x509.CertPool) error {
	if len(cert.Certificate) == 0 {
		return errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}
