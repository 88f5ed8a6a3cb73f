package pgwire

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

const (
	// MessageBodyBytesMaxDefault is PostgreSQL's own limit for one protocol message
	// (PQ_LARGE_MESSAGE_LIMIT = MaxAllocSize - 1, just under 1 GiB). The proxy is
	// meant to be transparent, so by default it accepts everything PostgreSQL
	// accepts; an in-flight message costs the proxy about twice its size (read
	// buffer + re-encoded write buffer), so a deployment with many clients sending
	// huge bytea values may want a smaller Config.MessageBodyBytesMax.
	MessageBodyBytesMaxDefault = 0x3fffffff - 1

	// authMessageBodyBytesMax bounds the client's messages before authentication
	// succeeded: PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH (65535). An unauthenticated
	// client must not be able to make the proxy allocate a large buffer.
	authMessageBodyBytesMax = 65535

	// StartupTimeoutDefault bounds the whole startup phase (SSL negotiation,
	// authentication, until the first ReadyForQuery). PostgreSQL's
	// authentication_timeout defaults to one minute too.
	StartupTimeoutDefault = time.Minute

	// DialTimeoutDefault bounds connecting to the PostgreSQL server.
	DialTimeoutDefault = 10 * time.Second

	// cancelWaitTimeout bounds how long a forwarded CancelRequest waits for the
	// server to close the connection (which says it processed the request, the
	// way libpq's PQcancel waits).
	cancelWaitTimeout = 5 * time.Second

	// terminateWriteTimeout bounds sending Terminate to the backend in Close.
	terminateWriteTimeout = time.Second
)

// Config configures Accept and Serve.
type Config struct {
	// BackendAddr is host:port of the PostgreSQL replica, or the path of its
	// Unix socket (see BackendNetwork).
	BackendAddr string
	// StartupParams are added to (and override) the client's startup parameters
	// when connecting to the backend, e.g.
	// {"default_transaction_isolation": "repeatable read"}.
	StartupParams map[string]string
	// TLS, when set, lets clients encrypt their connection: an SSLRequest
	// is answered 'S' and a TLS handshake follows (tls.go). Nil: 'N', as a
	// PostgreSQL with ssl=off answers.
	TLS *tls.Config
	// SCRAM, when set, makes the proxy authenticate clients itself with
	// SCRAM-SHA-256 against the verifiers it returns (scram.go); it then
	// authenticates to the backend with the client's ClientKey or not at
	// all (trust), never with a relayed password (scram_backend.go).
	// Nil: PostgreSQL's authentication is relayed to the client.
	SCRAM SCRAMLookup
	// AllowPasswordlessLogins, without SCRAM, lets a client in when
	// PostgreSQL admits its relayed login without asking it for any
	// credential (trust, peer, ident on the proxy's connection path).
	// False refuses such a login with FATAL 28000 (passwordless.go): the
	// proxy would otherwise let anyone who reaches its port log in as any
	// role. Set it only when no untrusted client can reach the proxy.
	AllowPasswordlessLogins bool
	// Admit, when set, is asked with the client's startup parameters
	// before the client is authenticated and before the backend is dialed:
	// a non-nil answer is sent to the client, which is then disconnected
	// (Accept returns *RefusedError), as PostgreSQL refuses connections
	// while it starts up (57P03) without asking for a password. Nil admits
	// everyone.
	Admit func(params map[string]string) *pgproto3.ErrorResponse
	// Logger receives connection-level events; nil discards them.
	Logger *slog.Logger

	// MessageBodyBytesMax bounds one message body in either direction after
	// authentication; 0 means MessageBodyBytesMaxDefault (PostgreSQL's limit).
	MessageBodyBytesMax int
	// StartupTimeout bounds the startup phase; 0 means StartupTimeoutDefault.
	StartupTimeout time.Duration
	// DialTimeout bounds connecting to BackendAddr; 0 means DialTimeoutDefault.
	DialTimeout time.Duration
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (c *Config) messageBodyBytesMax() int {
	if c.MessageBodyBytesMax <= 0 || c.MessageBodyBytesMax > MessageBodyBytesMaxDefault {
		return MessageBodyBytesMaxDefault
	}
	return c.MessageBodyBytesMax
}

func (c *Config) startupTimeout() time.Duration {
	if c.StartupTimeout > 0 {
		return c.StartupTimeout
	}
	return StartupTimeoutDefault
}

func (c *Config) dialTimeout() time.Duration {
	if c.DialTimeout > 0 {
		return c.DialTimeout
	}
	return DialTimeoutDefault
}
