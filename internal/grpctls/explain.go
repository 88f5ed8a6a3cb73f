package grpctls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// ExplainClient names the cause of a client's failed handshake with a
// certifier and what to check, from the client's point of view.
func ExplainClient(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &unknownCA):
		return "unknown CA: the certifier's certificate is not signed by the CA in --" + FlagCA + " (another cluster's certifier, or the wrong CA file)"
	case errors.As(err, &hostname):
		return "bad SAN: the certifier's certificate does not name the address dialled (its IP or DNS subject alternative names must include the host given in --certifier / --peers)"
	case errors.As(err, &invalid):
		return "invalid certificate: the certifier's certificate is expired, not yet valid, or not for server use"
	case errors.As(err, &header):
		return "the certifier does not speak TLS (start it with the --certifier-tls-* flags too, or drop them here)"
	case strings.Contains(msg, "certificate required"):
		return "missing client certificate: the certifier requires one (give --" + FlagCert + " and --" + FlagKey + ")"
	case strings.Contains(msg, "remote error: tls: unknown certificate authority"):
		return "unknown CA: the certifier refused this client's certificate, which its CA (--" + FlagCA + " of the certifier) did not sign"
	case strings.Contains(msg, "remote error: tls: bad certificate"), strings.Contains(msg, "remote error: tls: certificate expired"):
		return "the certifier refused this client's certificate (expired, or not for client use)"
	case strings.Contains(msg, "protocol version"):
		return "TLS version: the certifier channels need TLS 1.3"
	case isEOF(err):
		return "the certifier closed the connection during the handshake (does it run without the --certifier-tls-* flags?)"
	}
	return "TLS handshake failed"
}

// ExplainServer names the cause of a refused handshake from the
// certifier's point of view.
func ExplainServer(err error) string {
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &header):
		return "the client speaks plaintext, not TLS (start it with --" + FlagCA + ", --" + FlagCert + " and --" + FlagKey + ")"
	case strings.Contains(msg, "didn't provide a certificate"):
		return "missing client certificate: the client presented none (mutual TLS needs --" + FlagCert + " and --" + FlagKey + " on every client)"
	case errors.As(err, &unknownCA):
		return "unknown CA: the client's certificate is not signed by this certifier's CA (--" + FlagCA + ")"
	case errors.As(err, &invalid):
		return "invalid client certificate: expired, not yet valid, or not for client use"
	case strings.Contains(msg, "remote error"):
		return "the client refused this certifier's certificate (not signed by the client's CA, or it does not name the address the client dialled)"
	case strings.Contains(msg, "protocol version"):
		return "TLS version: the client does not speak TLS 1.3"
	}
	return "TLS handshake failed"
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// logEveryInterval is how often one cause from one host is logged: a
// misconfigured client reconnects about once a second and would otherwise
// fill the log.
const logEveryInterval = 10 * time.Second

// logLimiterKeysMax bounds the limiter's memory against many hosts.
const logLimiterKeysMax = 1024

type logLimiter struct {
	mu   sync.Mutex
	last map[string]limited
}

type limited struct {
	at         time.Time
	suppressed int
}

func newLogLimiter() *logLimiter { return &logLimiter{last: map[string]limited{}} }

// allow reports whether key may be logged now, and how many times it was
// suppressed since it last was.
func (l *logLimiter) allow(key string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	e, seen := l.last[key]
	if seen && now.Sub(e.at) < logEveryInterval {
		e.suppressed++
		l.last[key] = e
		return false, 0
	}
	if !seen && len(l.last) >= logLimiterKeysMax {
		clear(l.last)
	}
	l.last[key] = limited{at: now}
	return true, e.suppressed
}

// HintPlaintext adds a hint to the error of a plaintext call that a
// certifier with TLS refused: gRPC reports it only as a connection closed
// before the server's preface. Other errors are returned as they are.
func HintPlaintext(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if strings.Contains(msg, "server preface") {
		return fmt.Errorf("%w (hint: a certifier with TLS closes plaintext connections like this: give --%s, --%s and --%s)",
			err, FlagCA, FlagCert, FlagKey)
	}
	return err
}
