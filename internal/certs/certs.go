// Package certs issues the certificates a local cluster needs when the
// operator brings none: a CA and per-process certificates for the
// certifier channels (mutual TLS, internal/grpctls). One place, so that
// key type, validity and file modes are the same for all of them.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// certValidity is how long generated certificates are valid: long enough
// that a local cluster never sees one expire (there is no rotation).
const certValidity = 10 * 365 * 24 * time.Hour

// WriteCA creates a new CA (ECDSA P-256) for certifier channels: its
// certificate and its key (mode 0600).
func WriteCA(certFile, keyFile, commonName string) error {
	tmpl, err := template(commonName)
	if err != nil {
		return err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	return signAndWrite(tmpl, nil, nil, certFile, keyFile)
}

// Issue signs a certificate for one process with the CA in caCert/caKey,
// for hosts (IP addresses become IP SANs, names DNS SANs), valid for both
// server and client use: a group member is both. The key is written with
// mode 0600.
func Issue(caCert, caKey, certFile, keyFile, commonName string, hosts []string) error {
	ca, err := tls.LoadX509KeyPair(caCert, caKey)
	if err != nil {
		return fmt.Errorf("loading the CA %s: %w", caCert, err)
	}
	caX509, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return err
	}
	if !caX509.IsCA {
		return fmt.Errorf("%s is not a CA certificate", caCert)
	}
	tmpl, err := template(commonName)
	if err != nil {
		return err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	addHosts(tmpl, hosts)
	return signAndWrite(tmpl, caX509, ca.PrivateKey, certFile, keyFile)
}

// signAndWrite generates a key (ECDSA P-256) for tmpl, has the certificate
// signed by parent with parentKey (self-signed when parent is nil), and
// writes both (writePair).
func signAndWrite(tmpl, parent *x509.Certificate, parentKey any, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return err
	}
	return writePair(certFile, keyFile, der, key)
}

// addHosts adds hosts to the certificate's subject alternative names: IP
// addresses as IP SANs, names as DNS SANs.
func addHosts(tmpl *x509.Certificate, hosts []string) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
}

func template(commonName string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"tashkent"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
	}, nil
}

// writePair writes the certificate (0644) and the key (0600). The key is
// created with its mode, never widened afterwards.
func writePair(certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(keyFile, "PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	return writePEM(certFile, "CERTIFICATE", der, 0o644)
}

func writePEM(path, blockType string, der []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	err = pem.Encode(f, &pem.Block{Type: blockType, Bytes: der})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(path, mode) // an existing file keeps its old mode otherwise
	}
	return err
}
