package pgwire

// Client-side TLS.
//
// A PostgreSQL client asks for encryption with an SSLRequest before its
// StartupMessage; the server answers one byte, 'S' (the TLS handshake
// follows, then the startup packet inside TLS) or 'N' (the client goes on
// in clear text, or gives up when sslmode=require). With Config.TLS set the
// proxy answers 'S', as a PostgreSQL with ssl=on does; without it, 'N', as
// one with ssl=off does. The proxy's own connection to its database is a
// separate matter (usually the Unix socket beside it).

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

	"github.com/jackc/pgx/v5/pgproto3"
)

// LoadTLSConfig reads a PEM certificate (chain) and key for the proxy's
// client side. TLS 1.2 is the minimum, as PostgreSQL 15's default
// ssl_min_protocol_version.
func LoadTLSConfig(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("pgwire: loading TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// startTLS answers an SSLRequest with 'S', runs the handshake and
// switches the session's client side to the encrypted connection.
func (s *Session) startTLS(deadline time.Time) error {
	// Bytes a client sent after SSLRequest, before the handshake, stay in
	// the old reader's buffer and are dropped with it: never read as if
	// they came through TLS (CVE-2021-23214).
	if _, err := s.ClientConn.Write([]byte{'S'}); err != nil {
		return fmt.Errorf("pgwire: answering SSL request: %w", err)
	}
	conn := tls.Server(s.ClientConn, s.cfg.TLS)
	_ = conn.SetDeadline(deadline)
	if err := conn.Handshake(); err != nil {
		return fmt.Errorf("pgwire: TLS handshake with client: %w", err)
	}
	s.ClientConn = conn
	s.clientR = &connReader{r: conn}
	s.Client = pgproto3.NewBackend(s.clientR, conn)
	s.Client.SetMaxBodyLen(authMessageBodyBytesMax)
	return nil
}

// selfSignedValidity is how long a generated certificate is valid: long
// enough that a test or demo cluster never sees it expire.
const selfSignedValidity = 10 * 365 * 24 * time.Hour

// WriteSelfSignedCert writes a new self-signed certificate and its ECDSA
// P-256 key (PEM, key mode 0600) for the given host names and IP
// addresses. Clients that want verify-full use the certificate itself as
// their root (sslrootcert). tashkent up uses it when no certificate is
// configured.
func WriteSelfSignedCert(certFile, keyFile string, hosts []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "tashkent proxy", Organization: []string{"tashkent (self-signed)"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
