package pgwire

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"
)

// Server accepts client connections on a listener, runs Accept for each in its
// own goroutine, and hands the sessions to Handler.
type Server struct {
	Config   Config
	Registry *Registry // nil: a new one
	// Handler serves one session; the session is closed when it returns. Handler
	// should return when ctx passed to Serve is done (Serve closes the client
	// connections then, which makes Relay return).
	Handler func(*Session)
}

// acceptRetryDelayMax bounds the back-off after a temporary Accept error (too
// many open files), as net/http does.
const acceptRetryDelayMax = time.Second

// Serve is (&Server{Config: cfg, Handler: handler}).Serve(ctx, ln).
func Serve(ctx context.Context, ln net.Listener, cfg Config, handler func(*Session)) error {
	s := &Server{Config: cfg, Handler: handler}
	return s.Serve(ctx, ln)
}

// Serve accepts connections until ctx is done or the listener fails. On return
// the listener is closed, every client connection it accepted is closed and every
// connection goroutine has finished. It returns nil when ctx ended it.
func (srv *Server) Serve(ctx context.Context, ln net.Listener) error {
	if srv.Registry == nil {
		srv.Registry = NewRegistry()
	}
	log := srv.Config.logger()
	var (
		mu    sync.Mutex
		conns = make(map[net.Conn]struct{})
		wg    sync.WaitGroup
	)
	stop := context.AfterFunc(ctx, func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	defer stop()

	var delay time.Duration
	var err error
	for {
		var c net.Conn
		c, err = ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				err = nil
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), acceptRetryDelayMax)
				log.Warn("accept failed; retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			break
		}
		delay = 0
		mu.Lock()
		if ctx.Err() != nil {
			mu.Unlock()
			_ = c.Close()
			continue
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				_ = c.Close()
			}()
			srv.serveConn(ctx, c, log)
		}()
	}
	_ = ln.Close()
	stop()
	mu.Lock()
	for c := range conns {
		_ = c.Close()
	}
	mu.Unlock()
	wg.Wait()
	return err
}

func (srv *Server) serveConn(ctx context.Context, c net.Conn, log *slog.Logger) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("panic serving connection", "client", addrString(c.RemoteAddr()), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	sess, err := Accept(ctx, c, srv.Config, srv.Registry)
	if err != nil {
		logAcceptError(log, c, err)
		return
	}
	defer sess.Close()
	sess.log.Debug("session started", "backend_pid", sess.BackendPID)
	if srv.Handler != nil {
		srv.Handler(sess)
	}
	sess.log.Debug("session ended")
}

func logAcceptError(log *slog.Logger, c net.Conn, err error) {
	client := addrString(c.RemoteAddr())
	var se *ServerError
	var pe *ProtocolError
	var re *RefusedError
	var pl *PasswordlessLoginError
	switch {
	case errors.Is(err, ErrCancelHandled):
		log.Debug("cancel request", "client", client)
	case errors.As(err, &pl):
		log.Warn("login refused: PostgreSQL admitted it on the proxy's connection without asking for a password (see --allow-passwordless-logins)",
			"client", client, "user", pl.User, "database", pl.Database)
	case errors.As(err, &re):
		log.Info("connection refused", "client", client, "code", re.Code, "message", re.Message)
	case errors.As(err, &se):
		log.Info("connection refused by PostgreSQL", "client", client, "code", se.Code, "message", se.Message)
	case errors.As(err, &pe):
		log.Warn("client protocol error at startup", "client", client, "err", err)
	case isClosedErr(err):
		log.Debug("client left during startup", "client", client, "err", err)
	default:
		log.Warn("connection startup failed", "client", client, "err", err)
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}
