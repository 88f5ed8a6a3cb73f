package grpctls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// minVersion: every party is tashkent itself (see the package doc).
const minVersion = tls.VersionTLS13

// ServerOptions are the gRPC server options for f: mutual TLS with refused
// handshakes logged to log, or none (plaintext) when f is empty.
func (f Files) ServerOptions(log *slog.Logger) ([]grpc.ServerOption, error) {
	if !f.Enabled() {
		return nil, nil
	}
	m, err := f.load()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{m.cert},
		ClientCAs:    m.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   minVersion,
	}
	return []grpc.ServerOption{grpc.Creds(ServerCredentials(cfg, log))}, nil
}

// DialOption is the gRPC dial option for f: mutual TLS verifying the
// server against the CA and the dialled address, or insecure (plaintext)
// when f is empty.
func (f Files) DialOption() (grpc.DialOption, error) {
	if !f.Enabled() {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	m, err := f.load()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		// Always present the certificate, even when the server's list of
		// acceptable CAs does not name its issuer (Go would then send none):
		// the server can then say "unknown CA" rather than "no certificate".
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &m.cert, nil },
		RootCAs:              m.pool,
		MinVersion:           minVersion,
	}
	return grpc.WithTransportCredentials(ClientCredentials(cfg)), nil
}

// DialOptions is DialOption as a slice, for the Options structs that take
// one.
func (f Files) DialOptions() ([]grpc.DialOption, error) {
	o, err := f.DialOption()
	if err != nil {
		return nil, err
	}
	return []grpc.DialOption{o}, nil
}

// ServerCredentials wraps TLS server credentials so that every refused
// handshake is logged with its cause.
func ServerCredentials(cfg *tls.Config, log *slog.Logger) credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: credentials.NewTLS(cfg), log: log, limit: newLogLimiter()}
}

type serverCreds struct {
	credentials.TransportCredentials
	log   *slog.Logger
	limit *logLimiter
}

func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		c.report(raw.RemoteAddr(), err)
	}
	return conn, info, err
}

// report logs one refused handshake. A client that connects and closes
// without a byte (a port probe, such as `tashkent up`'s readiness check)
// is not worth a warning.
func (c *serverCreds) report(remote net.Addr, err error) {
	cause := ExplainServer(err)
	host := remote.String()
	if h, _, serr := net.SplitHostPort(host); serr == nil {
		host = h
	}
	if isEOF(err) {
		c.log.Debug("certifier TLS: a client closed its connection before the TLS handshake", "remote", remote.String())
		return
	}
	ok, suppressed := c.limit.allow(host + "\x00" + cause)
	if !ok {
		return
	}
	c.log.Warn("certifier TLS: refused a connection: "+cause, "remote", remote.String(), "err", err.Error(), "suppressed_since_last", suppressed)
}

func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: c.TransportCredentials.Clone(), log: c.log, limit: c.limit}
}

// ClientCredentials wraps TLS client credentials so that a failed
// handshake, including a refusal of this client's certificate that TLS 1.3
// delivers only after the handshake, is an error naming its cause.
func ClientCredentials(cfg *tls.Config) credentials.TransportCredentials {
	return &clientCreds{TransportCredentials: credentials.NewTLS(cfg)}
}

type clientCreds struct {
	credentials.TransportCredentials
}

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err == nil {
		conn, err = peekAlert(ctx, conn)
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return nil, nil, fmt.Errorf("certifier TLS handshake with %s failed: %s: %w", authority, ExplainClient(err), err)
	}
	return conn, info, nil
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	return &clientCreds{TransportCredentials: c.TransportCredentials.Clone()}
}

// peekWaitMax bounds the read after the handshake: a gRPC server sends its
// SETTINGS frame at once, a refusing one its alert at once; a server that
// says nothing for this long is left to gRPC's own timeouts.
const peekWaitMax = 2 * time.Second

// peekAlert reads the first bytes the server sends after the handshake. In
// TLS 1.3 the server verifies the client's certificate after the client
// has finished its handshake, so a refused certificate (none, or another
// CA's) arrives here as an alert; anything else read is handed on to gRPC
// unchanged.
func peekAlert(ctx context.Context, conn net.Conn) (net.Conn, error) {
	wait := time.Now().Add(peekWaitMax)
	if d, ok := ctx.Deadline(); ok && d.Before(wait) {
		wait = d
	}
	if err := conn.SetReadDeadline(wait); err != nil {
		return conn, err
	}
	buf := make([]byte, 1024)
	n, err := conn.Read(buf)
	if derr := conn.SetReadDeadline(time.Time{}); derr != nil && err == nil {
		err = derr
	}
	var ne net.Error
	switch {
	case n > 0:
		return &peekedConn{Conn: conn, buf: buf[:n]}, nil
	case err == nil, errors.As(err, &ne) && ne.Timeout():
		return conn, nil
	}
	return conn, err
}

// peekedConn gives back the bytes peekAlert read before the connection's
// own.
type peekedConn struct {
	net.Conn
	buf []byte
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
