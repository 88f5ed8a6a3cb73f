package pgwire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// ErrCancelHandled is returned by Accept for a CancelRequest connection: the
// request was forwarded to the backend (or ignored, for an unknown key, as
// PostgreSQL does) and there is no session; the connection is closed.
var ErrCancelHandled = errors.New("pgwire: cancel request handled")

// ServerError is an ErrorResponse that PostgreSQL sent during startup (wrong
// password, unknown database, too many connections, ...). It was relayed to the
// client unchanged before Accept returned it.
type ServerError struct {
	Severity string // FATAL, ERROR, ...
	Code     string // SQLSTATE, e.g. 28P01
	Message  string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("pgwire: server refused the connection: %s: %s (SQLSTATE %s)", e.Severity, e.Message, e.Code)
}

// ProtocolError is a client that broke the protocol during startup (garbage,
// unsupported protocol version, unexpected message). The client got a FATAL
// ErrorResponse with Code before Accept returned it.
type ProtocolError struct {
	Code    string // SQLSTATE sent to the client: 08P01 or 0A000
	Message string
	Err     error // the decoding error, if any
}

func (e *ProtocolError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("pgwire: %s (SQLSTATE %s): %v", e.Message, e.Code, e.Err)
	}
	return fmt.Sprintf("pgwire: %s (SQLSTATE %s)", e.Message, e.Code)
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// RefusedError is a client that Config.Admit refused before it was
// authenticated; the client got Admit's ErrorResponse.
type RefusedError struct {
	Code    string
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("pgwire: connection refused before authentication: %s (SQLSTATE %s)", e.Message, e.Code)
}

// aLongTimeAgo is a deadline in the past, set to interrupt blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// startupHeadBytes is how much of each startup packet is kept to tell an
// unsupported protocol version from garbage: length and version code.
const startupHeadBytes = 8

// negotiationsMax is how many SSLRequest / GSSENCRequest a client may send
// before its StartupMessage (libpq with gssencmode=prefer sends one of each).
const negotiationsMax = 2

// connReader wraps a connection's read side. While a relay runs, beforeRead
// flushes the messages buffered for the other side just before this side may
// block; during startup it records the first bytes of each startup packet.
// Both happen on the goroutine that calls Receive.
type connReader struct {
	r          io.Reader
	beforeRead func() error
	record     bool
	head       []byte
}

func (c *connReader) Read(p []byte) (int, error) {
	if c.beforeRead != nil {
		if err := c.beforeRead(); err != nil {
			return 0, err
		}
	}
	n, err := c.r.Read(p)
	if c.record && len(c.head) < startupHeadBytes && n > 0 {
		c.head = append(c.head, p[:min(n, startupHeadBytes-len(c.head))]...)
	}
	return n, err
}

// Accept performs the startup phase on a freshly accepted client connection:
// SSL negotiation (TLS with cfg.TLS, declined without), GSS negotiation
// (declined), CancelRequest forwarding, authenticating the client itself
// (cfg.SCRAM, see scram.go), connecting to cfg.BackendAddr, relaying
// authentication (without cfg.SCRAM), replacing the cancel key, and relaying
// everything up to and including the first ReadyForQuery. On any error both
// connections are closed; a client that broke the protocol got a FATAL
// ErrorResponse first (*ProtocolError), a client the server refused got the
// server's ErrorResponse (*ServerError), and a CancelRequest gives
// ErrCancelHandled.
func Accept(ctx context.Context, client net.Conn, cfg Config, reg *Registry) (sess *Session, err error) {
	if reg == nil {
		reg = NewRegistry() // cancel requests cannot reach this session then
	}
	s := &Session{
		ClientConn:   client,
		ServerParams: make(map[string]string),
		cfg:          cfg,
		reg:          reg,
		log:          cfg.logger().With("client", addrString(client.RemoteAddr())),
	}
	s.clientR = &connReader{r: client}
	s.Client = pgproto3.NewBackend(s.clientR, client)
	// No large allocation for a client that has not authenticated yet.
	s.Client.SetMaxBodyLen(authMessageBodyBytesMax)

	deadline := time.Now().Add(cfg.startupTimeout())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = client.SetDeadline(deadline)

	var mu sync.Mutex // guards s.ServerConn against the AfterFunc below
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		_ = client.SetDeadline(aLongTimeAgo)
		if s.ServerConn != nil {
			_ = s.ServerConn.SetDeadline(aLongTimeAgo)
		}
	})
	defer func() {
		if !stop() && err == nil {
			err = ctx.Err()
		}
		if err != nil {
			mu.Lock()
			s.closeConns()
			mu.Unlock()
			s.unregister()
			sess = nil
		}
	}()

	startup, err := s.receiveStartup(ctx, deadline)
	if err != nil {
		return nil, err
	}
	s.Params = make(map[string]string, len(startup.Parameters))
	for k, v := range startup.Parameters {
		s.Params[k] = v
	}
	s.log = s.log.With("user", s.Params["user"], "database", s.Params["database"])
	if cfg.Admit != nil {
		if refusal := cfg.Admit(s.Params); refusal != nil {
			s.Client.Send(refusal)
			_ = s.Client.Flush()
			return nil, &RefusedError{Code: refusal.Code, Message: refusal.Message}
		}
	}
	var keys scramKeys
	if cfg.SCRAM != nil {
		if keys, err = s.authenticateSCRAM(ctx, s.Params["user"]); err != nil {
			return nil, err
		}
	}

	dialer := net.Dialer{Timeout: cfg.dialTimeout(), Deadline: deadline}
	server, err := dialer.DialContext(ctx, BackendNetwork(cfg.BackendAddr), cfg.BackendAddr)
	if err != nil {
		s.sendFatal("08006", "the tashkent proxy could not connect to its PostgreSQL server")
		return nil, fmt.Errorf("pgwire: dialing backend %s: %w", cfg.BackendAddr, err)
	}
	mu.Lock()
	s.ServerConn = server
	mu.Unlock()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	_ = server.SetDeadline(deadline)
	s.serverR = &connReader{r: server}
	s.Server = pgproto3.NewFrontend(s.serverR, server)
	s.Server.SetMaxBodyLen(cfg.messageBodyBytesMax())

	params := make(map[string]string, len(startup.Parameters)+len(cfg.StartupParams))
	for k, v := range startup.Parameters {
		params[k] = v
	}
	for k, v := range cfg.StartupParams {
		params[k] = v
	}
	s.Server.Send(&pgproto3.StartupMessage{ProtocolVersion: startup.ProtocolVersion, Parameters: params})
	if err := s.Server.Flush(); err != nil {
		s.sendFatal("08006", "the tashkent proxy lost its connection to PostgreSQL")
		return nil, fmt.Errorf("pgwire: sending startup message to backend: %w", err)
	}

	authenticate := s.relayAuthentication
	if cfg.SCRAM != nil {
		authenticate = func() error { return s.authenticateToBackend(keys) }
	}
	if err := authenticate(); err != nil {
		return nil, err
	}
	s.Client.SetMaxBodyLen(cfg.messageBodyBytesMax())
	if err := s.relayUntilReady(); err != nil {
		return nil, err
	}

	_ = client.SetDeadline(time.Time{})
	_ = server.SetDeadline(time.Time{})
	return s, nil
}

// receiveStartup reads startup packets until a StartupMessage, switching to
// TLS for an SSLRequest when the proxy has a certificate (declining it
// otherwise), declining GSS encryption and handling a CancelRequest.
func (s *Session) receiveStartup(ctx context.Context, deadline time.Time) (*pgproto3.StartupMessage, error) {
	encrypted := false
	for negotiations := 0; ; {
		s.clientR.record, s.clientR.head = true, s.clientR.head[:0]
		msg, err := s.Client.ReceiveStartupMessage()
		s.clientR.record = false
		if err != nil {
			return nil, s.startupPacketError(err)
		}
		switch m := msg.(type) {
		case *pgproto3.SSLRequest:
			if s.cfg.TLS == nil {
				if err := s.declineEncryption(&negotiations); err != nil {
					return nil, err
				}
				continue
			}
			if encrypted {
				return nil, s.protocolError("08P01", "SSL request inside an encrypted connection", nil)
			}
			if err := s.startTLS(deadline); err != nil {
				return nil, err
			}
			encrypted = true
		case *pgproto3.GSSEncRequest:
			if err := s.declineEncryption(&negotiations); err != nil {
				return nil, err
			}
		case *pgproto3.CancelRequest:
			s.forwardCancel(ctx, m)
			return nil, ErrCancelHandled
		case *pgproto3.StartupMessage:
			return m, nil
		default:
			return nil, s.protocolError("08P01", "invalid startup packet", fmt.Errorf("unexpected %T", msg))
		}
	}
}

// declineEncryption answers an SSLRequest or GSSEncRequest with 'N': not
// supported; the client continues unencrypted or gives up.
func (s *Session) declineEncryption(negotiations *int) error {
	*negotiations++
	if *negotiations > negotiationsMax {
		return s.protocolError("08P01", "too many encryption requests", nil)
	}
	if _, err := s.ClientConn.Write([]byte{'N'}); err != nil {
		return fmt.Errorf("pgwire: answering encryption request: %w", err)
	}
	return nil
}

// startupPacketError turns a failure to decode a startup packet into the error
// PostgreSQL would give: an unsupported protocol version gets 0A000, anything
// else 08P01. A client that just closed or timed out gets no answer.
func (s *Session) startupPacketError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("pgwire: reading startup packet: %w", err)
	}
	if h := s.clientR.head; len(h) >= startupHeadBytes {
		n := binary.BigEndian.Uint32(h[0:4])
		code := binary.BigEndian.Uint32(h[4:8])
		major, minor := code>>16, code&0xffff
		validLen := n >= startupHeadBytes && n <= 10_004 // pgproto3's and PostgreSQL's bounds
		if validLen && major != 1234 && (major != 3 || (minor != 0 && minor != 2)) {
			return s.protocolError("0A000",
				fmt.Sprintf("unsupported frontend protocol %d.%d: the tashkent proxy supports protocol 3.0 and 3.2", major, minor), nil)
		}
	}
	return s.protocolError("08P01", "invalid startup packet", err)
}

// relayAuthentication relays the server's authentication requests to the
// client and the client's answers to the server until AuthenticationOk. An
// AuthenticationOk before any credential request is refused unless
// Config.AllowPasswordlessLogins (passwordless.go).
func (s *Session) relayAuthentication() error {
	askedForCredential := false
	for {
		msg, err := s.Server.Receive()
		if err != nil {
			s.sendFatal("08006", "the tashkent proxy lost its connection to PostgreSQL during authentication")
			return fmt.Errorf("pgwire: receiving from backend during authentication: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.AuthenticationOk:
			if !askedForCredential && !s.cfg.AllowPasswordlessLogins {
				return s.refusePasswordlessLogin()
			}
			s.Client.Send(m)
			_ = s.Client.SetAuthType(pgproto3.AuthTypeOk)
			return nil
		case *pgproto3.AuthenticationCleartextPassword, *pgproto3.AuthenticationMD5Password,
			*pgproto3.AuthenticationSASL, *pgproto3.AuthenticationSASLContinue,
			*pgproto3.AuthenticationGSS, *pgproto3.AuthenticationGSSContinue:
			askedForCredential = true
			s.Client.Send(m)
			if err := s.Client.Flush(); err != nil {
				return fmt.Errorf("pgwire: relaying authentication request: %w", err)
			}
			// The answer is a 'p' message whose layout depends on the request:
			// tell the Backend which request it answers.
			if err := s.Client.SetAuthType(s.Server.GetAuthType()); err != nil {
				return s.protocolError("08P01", "unsupported authentication request from PostgreSQL", err)
			}
			resp, err := s.Client.Receive()
			if err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					// psql does this when it learns that a password is needed:
					// it closes and reconnects after prompting.
					return fmt.Errorf("pgwire: client closed during authentication: %w", err)
				}
				return s.protocolError("08P01", "invalid authentication response", err)
			}
			switch resp.(type) {
			case *pgproto3.PasswordMessage, *pgproto3.SASLInitialResponse, *pgproto3.SASLResponse, *pgproto3.GSSResponse:
				s.Server.Send(resp)
				if err := s.Server.Flush(); err != nil {
					return fmt.Errorf("pgwire: relaying authentication response: %w", err)
				}
			case *pgproto3.Terminate:
				return errors.New("pgwire: client terminated during authentication")
			default:
				return s.protocolError("08P01", fmt.Sprintf("expected authentication response, got %T", resp), nil)
			}
		case *pgproto3.AuthenticationSASLFinal, *pgproto3.NegotiateProtocolVersion, *pgproto3.NoticeResponse:
			s.Client.Send(m)
		case *pgproto3.ErrorResponse:
			return s.relayServerError(m)
		default:
			s.sendFatal("08P01", "unexpected message from PostgreSQL during authentication")
			return fmt.Errorf("pgwire: unexpected %T from backend during authentication", msg)
		}
	}
}

// relayUntilReady relays ParameterStatus, NoticeResponse and the like up to and
// including the first ReadyForQuery, replacing BackendKeyData with a proxy key.
func (s *Session) relayUntilReady() error {
	for {
		msg, err := s.Server.Receive()
		if err != nil {
			s.sendFatal("08006", "the tashkent proxy lost its connection to PostgreSQL during startup")
			return fmt.Errorf("pgwire: receiving from backend during startup: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ParameterStatus:
			s.ServerParams[m.Name] = m.Value // strings: already copies
			s.Client.Send(m)
		case *pgproto3.BackendKeyData:
			s.BackendPID = m.ProcessID
			if len(m.SecretKey) >= 4 {
				s.BackendSecret = binary.BigEndian.Uint32(m.SecretKey)
			}
			key, err := s.reg.Register(BackendKey{Addr: s.cfg.BackendAddr, ProcessID: m.ProcessID, SecretKey: m.SecretKey})
			if err != nil {
				s.sendFatal("53000", "the tashkent proxy could not allocate a cancel key")
				return err
			}
			s.registered = true
			s.ProxyPID, s.ProxySecret = key.ProcessID, key.SecretKey
			secret := binary.BigEndian.AppendUint32(nil, key.SecretKey)
			s.Client.Send(&pgproto3.BackendKeyData{ProcessID: key.ProcessID, SecretKey: secret})
		case *pgproto3.ReadyForQuery:
			s.TxStatus = m.TxStatus
			s.Client.Send(m)
			if err := s.Client.Flush(); err != nil {
				return fmt.Errorf("pgwire: relaying ReadyForQuery: %w", err)
			}
			return nil
		case *pgproto3.ErrorResponse:
			return s.relayServerError(m)
		default:
			s.Client.Send(m)
		}
	}
}

func (s *Session) relayServerError(m *pgproto3.ErrorResponse) error {
	s.Client.Send(m)
	_ = s.Client.Flush()
	return &ServerError{Severity: m.Severity, Code: m.Code, Message: m.Message}
}

// forwardCancel sends the backend's key for a known proxy key to the backend
// and waits until the server closes the connection. Unknown keys are ignored,
// as PostgreSQL ignores them (it must not tell a guesser which keys exist).
func (s *Session) forwardCancel(ctx context.Context, m *pgproto3.CancelRequest) {
	if len(m.SecretKey) != 4 {
		s.log.Debug("cancel request with a key the proxy never hands out", "secret_bytes", len(m.SecretKey))
		return
	}
	key := ProxyKey{ProcessID: m.ProcessID, SecretKey: binary.BigEndian.Uint32(m.SecretKey)}
	be, ok := s.reg.Lookup(key)
	if !ok {
		s.log.Debug("cancel request for an unknown key", "pid", m.ProcessID)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cancelWaitTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, BackendNetwork(be.Addr), be.Addr)
	if err != nil {
		s.log.Warn("forwarding cancel request", "backend", be.Addr, "err", err)
		return
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	fe := pgproto3.NewFrontend(conn, conn)
	fe.Send(&pgproto3.CancelRequest{ProcessID: be.ProcessID, SecretKey: be.SecretKey})
	if err := fe.Flush(); err != nil {
		s.log.Warn("forwarding cancel request", "backend", be.Addr, "err", err)
		return
	}
	// PostgreSQL closes the connection once it has processed the request.
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 1<<10))
	s.log.Debug("cancel request forwarded", "backend", be.Addr, "backend_pid", be.ProcessID)
}

// protocolError sends a FATAL ErrorResponse to the client and returns the error.
func (s *Session) protocolError(code, message string, err error) error {
	s.sendFatal(code, message)
	return &ProtocolError{Code: code, Message: message, Err: err}
}

func (s *Session) sendFatal(code, message string) {
	s.Client.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: message})
	_ = s.Client.Flush()
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// BackendNetwork is "unix" for a backend address that is a path (the
// server's Unix socket, e.g. /var/run/postgresql/.s.PGSQL.5432) and "tcp"
// for host:port. A proxy beside its replica should use the socket: a write
// to a loopback TCP socket runs the receiver's TCP processing too, and was
// the largest cost of the proxy's CPU profile.
func BackendNetwork(addr string) string {
	if strings.HasPrefix(addr, "/") {
		return "unix"
	}
	return "tcp"
}
