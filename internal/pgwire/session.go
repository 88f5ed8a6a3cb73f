package pgwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// ErrBackendClosed is returned by Relay when PostgreSQL closed the connection
// (after a FATAL error, a server shutdown, or pg_terminate_backend). Whatever it
// sent before closing was relayed to the client.
var ErrBackendClosed = errors.New("pgwire: backend closed the connection")

// Session is one client connection and its backend connection, after startup and
// authentication completed.
//
// A Session is not safe for concurrent use: while Relay runs, only Relay may use
// it, and TxStatus and ServerParams are updated by Relay's server-to-client
// goroutine (read them after Relay returned).
type Session struct {
	Client     *pgproto3.Backend  // talks to the client (we are its server)
	Server     *pgproto3.Frontend // talks to PostgreSQL (we are its client)
	ClientConn net.Conn
	ServerConn net.Conn

	BackendPID    uint32 // the PostgreSQL backend's key
	BackendSecret uint32
	ProxyPID      uint32 // the key the client got in BackendKeyData
	ProxySecret   uint32

	Params       map[string]string // the client's own startup parameters
	ServerParams map[string]string // ParameterStatus values from the backend
	TxStatus     byte              // last ReadyForQuery status: 'I', 'T' or 'E'

	cfg        Config
	reg        *Registry
	log        *slog.Logger
	registered bool
	clientR    *connReader
	serverR    *connReader
	closeOnce  sync.Once

	// Messages Sent but not yet flushed, per direction. Each is touched only by
	// the goroutine that writes that direction.
	clientPending, serverPending bool
}

// Logger returns the session's logger (with client address, user, database).
func (s *Session) Logger() *slog.Logger { return s.log }

// Key returns the cancel key the client got.
func (s *Session) Key() ProxyKey { return ProxyKey{ProcessID: s.ProxyPID, SecretKey: s.ProxySecret} }

// SendError sends an ErrorResponse with severity ERROR, the SQLSTATE code, the
// message and an optional hint to the client, and flushes. It does not send
// ReadyForQuery.
func (s *Session) SendError(code, message, hint string) error {
	return s.SendErrorResponse(&pgproto3.ErrorResponse{
		Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code, Message: message, Hint: hint,
	})
}

// SendErrorResponse sends a complete ErrorResponse to the client and flushes;
// an empty severity becomes ERROR.
func (s *Session) SendErrorResponse(e *pgproto3.ErrorResponse) error {
	if e.Severity == "" {
		e.Severity = "ERROR"
	}
	if e.SeverityUnlocalized == "" {
		e.SeverityUnlocalized = e.Severity
	}
	s.Client.Send(e)
	return s.Client.Flush()
}

// SendReadyForQuery sends ReadyForQuery with the given transaction status ('I',
// 'T' or 'E') to the client and flushes.
func (s *Session) SendReadyForQuery(status byte) error {
	s.Client.Send(&pgproto3.ReadyForQuery{TxStatus: status})
	return s.Client.Flush()
}

// Close sends Terminate to the backend if possible, closes both connections and
// unregisters the cancel key. It is idempotent and must not run concurrently
// with Relay (cancel Relay's context first).
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		if s.ServerConn != nil && s.Server != nil {
			_ = s.ServerConn.SetWriteDeadline(time.Now().Add(terminateWriteTimeout))
			s.Server.Send(&pgproto3.Terminate{})
			_ = s.Server.Flush()
		}
		s.closeConns()
		s.unregister()
	})
	return nil
}

func (s *Session) closeConns() {
	if s.ServerConn != nil {
		_ = s.ServerConn.Close()
	}
	if s.ClientConn != nil {
		_ = s.ClientConn.Close()
	}
}

func (s *Session) unregister() {
	if s.registered {
		s.reg.Unregister(s.Key())
		s.registered = false
	}
}

func (s *Session) flushClient() error {
	if !s.clientPending {
		return nil
	}
	s.clientPending = false
	if err := s.Client.Flush(); err != nil {
		return &relayWriteError{toClient: true, err: err}
	}
	return nil
}

func (s *Session) flushServer() error {
	if !s.serverPending {
		return nil
	}
	s.serverPending = false
	if err := s.Server.Flush(); err != nil {
		return &relayWriteError{toClient: false, err: err}
	}
	return nil
}

type relayWriteError struct {
	toClient bool
	err      error
}

func (e *relayWriteError) Error() string {
	if e.toClient {
		return "pgwire: writing to client: " + e.err.Error()
	}
	return "pgwire: writing to backend: " + e.err.Error()
}

func (e *relayWriteError) Unwrap() error { return e.err }

// clientProtocolError is a message from the client that could not be decoded;
// Relay answers it with a FATAL ErrorResponse once both directions stopped.
type clientProtocolError struct {
	message string
	err     error
}

func (e *clientProtocolError) Error() string {
	return "pgwire: client: " + e.message + ": " + e.err.Error()
}
func (e *clientProtocolError) Unwrap() error { return e.err }

// errClientClosed ends a relay normally: the client sent Terminate or closed.
var errClientClosed = errors.New("pgwire: client closed")

// Relay runs a plain transparent proxy loop (client to server and server to
// client concurrently) until either side closes or ctx is done. It returns nil
// when the client terminated or closed, ErrBackendClosed when PostgreSQL closed,
// ctx.Err() when ctx ended it, and another error for a protocol or I/O failure
// (a client that sent an undecodable or oversized message got a FATAL 08P01
// first). It does not close the session: call Close.
func (s *Session) Relay(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Flush what is buffered for one side just before blocking on the other.
	s.clientR.beforeRead = s.flushServer
	s.serverR.beforeRead = s.flushClient
	defer func() { s.clientR.beforeRead, s.serverR.beforeRead = nil, nil }()

	errc := make(chan error, 2)
	go func() { errc <- s.relayClientToServer() }()
	go func() { errc <- s.relayServerToClient() }()

	interrupt := func() {
		_ = s.ClientConn.SetReadDeadline(aLongTimeAgo)
		_ = s.ServerConn.SetReadDeadline(aLongTimeAgo)
	}
	stop := context.AfterFunc(ctx, interrupt)
	first := <-errc
	interrupt()
	second := <-errc
	stop()
	// A client Terminate makes the backend close too; which side notices first
	// is a race, and the client's Terminate is what ended the session.
	if errors.Is(second, errClientClosed) {
		first = second
	}
	_ = s.ClientConn.SetReadDeadline(time.Time{})
	_ = s.ServerConn.SetReadDeadline(time.Time{})

	if ctx.Err() != nil {
		return ctx.Err()
	}
	var cpe *clientProtocolError
	var we *relayWriteError
	switch {
	case errors.Is(first, errClientClosed):
		return nil
	case errors.As(first, &we) && we.toClient:
		return nil // the client went away while results were on their way
	case errors.As(first, &cpe):
		s.sendFatal("08P01", cpe.message)
		return first
	}
	return first
}

func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded)
}

func (s *Session) relayClientToServer() error {
	for {
		msg, err := s.Client.Receive()
		if err != nil {
			var we *relayWriteError
			var tooBig *pgproto3.ExceededMaxBodyLenErr
			switch {
			case errors.As(err, &we):
				return err
			case errors.Is(err, os.ErrDeadlineExceeded):
				return err // interrupted by Relay: the other side ended first
			case isClosedErr(err):
				return errClientClosed
			case errors.As(err, &tooBig):
				return &clientProtocolError{message: fmt.Sprintf("message of %d bytes exceeds the limit of %d bytes",
					tooBig.ActualBodyLen, tooBig.MaxExpectedBodyLen), err: err}
			default:
				return &clientProtocolError{message: "invalid frontend message", err: err}
			}
		}
		// Send encodes (copies) msg, which is only valid until the next Receive.
		s.Server.Send(msg)
		s.serverPending = true
		if _, ok := msg.(*pgproto3.Terminate); ok {
			_ = s.flushServer()
			return errClientClosed
		}
	}
}

func (s *Session) relayServerToClient() error {
	for {
		msg, err := s.Server.Receive()
		if err != nil {
			var we *relayWriteError
			switch {
			case errors.As(err, &we):
				return err
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				_ = s.flushClient() // e.g. the FATAL that preceded the close
				return ErrBackendClosed
			case isClosedErr(err):
				return err
			default:
				return fmt.Errorf("pgwire: receiving from backend: %w", err)
			}
		}
		switch m := msg.(type) {
		case *pgproto3.ReadyForQuery:
			s.TxStatus = m.TxStatus
		case *pgproto3.ParameterStatus:
			s.ServerParams[m.Name] = m.Value
		}
		s.Client.Send(msg)
		s.clientPending = true
	}
}
