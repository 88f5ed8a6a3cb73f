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
	"crypto/tls"
	"fmt"
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
