package pgwire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

func startupBytes(t testing.TB, version uint32, params map[string]string) []byte {
	t.Helper()
	b, err := (&pgproto3.StartupMessage{ProtocolVersion: version, Parameters: params}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var sslRequestBytes = cat(be32(8), be32(80877103))

// rawExchange writes b to the proxy, then reads until the proxy closes (or 5 s).
func rawExchange(t *testing.T, addr string, b []byte, closeWrite bool) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if closeWrite {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	out, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !isConnReset(err) {
		t.Fatalf("reading the proxy's answer: %v (got %q); want an answer and a close", err, out)
	}
	return out
}

func isConnReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// fatalCode decodes the ErrorResponse in b and returns its severity and SQLSTATE.
func fatalCode(t *testing.T, b []byte) (severity, code string) {
	t.Helper()
	if len(b) < 5 || b[0] != 'E' {
		t.Fatalf("want an ErrorResponse, got %q", b)
	}
	var e pgproto3.ErrorResponse
	n := int(binary.BigEndian.Uint32(b[1:5]))
	if len(b) < 1+n {
		t.Fatalf("truncated ErrorResponse %q", b)
	}
	if err := e.Decode(b[5 : 1+n]); err != nil {
		t.Fatal(err)
	}
	return e.Severity, e.Code
}

func TestMalformedStartup(t *testing.T) {
	pg := postgresForTest(t)
	p := startProxy(t, Config{BackendAddr: pg.addr, MessageBodyBytesMax: 1 << 20})
	base := runtime.NumGoroutine()
	garbage := make([]byte, 300)
	rand.New(rand.NewSource(1)).Read(garbage)
	garbage[0] = 0 // a length the proxy will read as valid-ish or not: either way garbage

	cases := []struct {
		name  string
		in    []byte
		close bool   // half-close after writing
		want  string // SQLSTATE of the FATAL answer; "" = silent close
		pre   string // bytes expected before the ErrorResponse
	}{
		{"short length", cat(be32(2), be32(196608)), false, "08P01", ""},
		{"huge length", cat(be32(0x7fffffff), be32(196608)), false, "08P01", ""},
		{"negative length", cat(be32(0xfffffff0), be32(196608)), false, "08P01", ""},
		{"length just over the startup limit", cat(be32(10_005), be32(196608)), false, "08P01", ""},
		{"random garbage", garbage, false, "08P01", ""},
		{"protocol 2.0", cat(be32(8), be32(2<<16)), false, "0A000", ""},
		{"protocol 4.0", cat(be32(8), be32(4<<16)), false, "0A000", ""},
		{"protocol 3.1", cat(be32(8), be32(3<<16|1)), false, "0A000", ""},
		{"unterminated parameters", cat(be32(20), be32(196608), []byte("user\x00postgres")), false, "08P01", ""},
		{"truncated packet then close", cat(be32(100), be32(196608), []byte("user")), true, "", ""},
		{"connect and close", nil, true, "", ""},
		{"SSL then garbage", cat(sslRequestBytes, be32(12), []byte("garbagegarb")), false, "08P01", "N"},
		{"three encryption requests", cat(sslRequestBytes, sslRequestBytes, sslRequestBytes), false, "08P01", "NN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := rawExchange(t, p.addr, c.in, c.close)
			if len(out) < len(c.pre) || string(out[:len(c.pre)]) != c.pre {
				t.Fatalf("got %q, want prefix %q", out, c.pre)
			}
			out = out[len(c.pre):]
			if c.want == "" {
				if len(out) != 0 {
					t.Fatalf("want a silent close, got %q", out)
				}
				return
			}
			sev, code := fatalCode(t, out)
			if sev != "FATAL" || code != c.want {
				t.Fatalf("got %s %s, want FATAL %s", sev, code, c.want)
			}
		})
	}

	// After authentication: oversized and unknown messages.
	postAuth := []struct {
		name string
		msg  []byte
	}{
		{"oversized message", cat([]byte{'Q'}, be32(2<<20), []byte("SELECT 1"))},
		{"unknown message type", cat([]byte{'z'}, be32(4))},
		{"bad length", cat([]byte{'Q'}, be32(2))},
		{"undecodable bind", cat([]byte{'B'}, be32(6), []byte{0, 0})},
	}
	for _, c := range postAuth {
		t.Run("after startup: "+c.name, func(t *testing.T) {
			conn, fe := rawStartup(t, p.addr, "postgres", "")
			defer conn.Close()
			if _, err := conn.Write(c.msg); err != nil {
				t.Fatal(err)
			}
			msg, err := fe.Receive()
			if err != nil {
				t.Fatalf("want a FATAL ErrorResponse, got %v", err)
			}
			e, ok := msg.(*pgproto3.ErrorResponse)
			if !ok || e.Severity != "FATAL" || e.Code != "08P01" {
				t.Fatalf("got %#v, want FATAL 08P01", msg)
			}
			if _, err := fe.Receive(); err == nil {
				t.Fatal("connection still open after the protocol violation")
			}
		})
	}

	t.Run("oversized authentication response", func(t *testing.T) {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fe := pgproto3.NewFrontend(c, c)
		c.Write(startupBytes(t, pgproto3.ProtocolVersion30, map[string]string{"user": md5User, "database": "postgres"}))
		msg, err := fe.Receive()
		if _, ok := msg.(*pgproto3.AuthenticationMD5Password); !ok {
			t.Fatalf("want AuthenticationMD5Password, got %T %v", msg, err)
		}
		// A 1 GB password: refused before anything is allocated.
		c.Write(cat([]byte{'p'}, be32(1<<30)))
		msg, err = fe.Receive()
		if e, ok := msg.(*pgproto3.ErrorResponse); !ok || e.Code != "08P01" {
			t.Fatalf("got %#v %v, want FATAL 08P01", msg, err)
		}
	})

	// The proxy still works, and nothing leaked.
	conn := connect(t, p.url("postgres", ""))
	if _, err := conn.Exec(context.Background(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
	waitFor(t, "no cancel keys left", func() bool { return p.srv.Registry.Len() == 0 })
}

// rawStartup completes a trust startup by hand and returns the connection and a
// Frontend positioned after the first ReadyForQuery.
func rawStartup(t *testing.T, addr, usr, db string) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if db == "" {
		db = "postgres"
	}
	if _, err := c.Write(startupBytes(t, pgproto3.ProtocolVersion30, map[string]string{"user": usr, "database": db})); err != nil {
		t.Fatal(err)
	}
	fe := pgproto3.NewFrontend(c, c)
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatalf("startup: %v", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ReadyForQuery:
			return c, fe
		case *pgproto3.ErrorResponse:
			t.Fatalf("startup: %s %s", m.Code, m.Message)
		}
	}
}

// fakeBackend is a minimal trust-auth PostgreSQL stand-in for fuzzing: it answers
// startup, every Query with CommandComplete + ReadyForQuery, every Sync with
// ReadyForQuery, and ignores the rest.
type fakeBackend struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startFakeBackend(t testing.TB) *fakeBackend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{ln: ln}
	fb.wg.Add(1)
	go func() {
		defer fb.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fb.wg.Add(1)
			go func() { defer fb.wg.Done(); fakeServe(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); fb.wg.Wait() })
	return fb
}

func fakeServe(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	be := pgproto3.NewBackend(c, c)
	be.SetMaxBodyLen(1 << 20)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, ok := msg.(*pgproto3.StartupMessage); !ok {
		return // a CancelRequest: nothing to do
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "15.fake"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 4242, SecretKey: []byte{1, 2, 3, 4}})
	be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if be.Flush() != nil {
		return
	}
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		switch msg.(type) {
		case *pgproto3.Query:
			be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")})
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Sync:
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Terminate:
			return
		default:
			continue
		}
		if be.Flush() != nil {
			return
		}
	}
}

// acceptOnce runs Accept (and, if it succeeds, a short Relay) on one end of a
// net.Pipe while a client writes in and then closes; it must never panic or hang.
func acceptOnce(t testing.TB, backendAddr string, reg *Registry, in []byte) {
	client, proxySide := net.Pipe()
	done := make(chan struct{})
	go func() { // drain whatever the proxy answers
		_, _ = io.Copy(io.Discard, client)
		close(done)
	}()
	go func() {
		_ = client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		_, _ = client.Write(in)
		_ = client.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cfg := Config{BackendAddr: backendAddr, StartupTimeout: 2 * time.Second, MessageBodyBytesMax: 1 << 20, AllowPasswordlessLogins: true}
	sess, err := Accept(ctx, proxySide, cfg, reg)
	if err == nil {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		_ = sess.Relay(rctx)
		rcancel()
		_ = sess.Close()
	}
	_ = proxySide.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("client side did not finish for input %q", in)
	}
}

func fuzzSeeds(t testing.TB) [][]byte {
	startup := startupBytes(t, pgproto3.ProtocolVersion30, map[string]string{"user": "u", "database": "d"})
	query, _ := (&pgproto3.Query{String: "SELECT 1"}).Encode(nil)
	parse, _ := (&pgproto3.Parse{Name: "s", Query: "SELECT $1"}).Encode(nil)
	bind, _ := (&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("1")}}).Encode(nil)
	sync, _ := (&pgproto3.Sync{}).Encode(nil)
	term, _ := (&pgproto3.Terminate{}).Encode(nil)
	cancelReq, _ := (&pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}}).Encode(nil)
	return [][]byte{
		nil,
		startup,
		cat(startup, query, term),
		cat(startup, parse, bind, sync, term),
		cat(sslRequestBytes, startup, query),
		cat(be32(8), be32(80877104), startup), // GSSENCRequest
		cancelReq,
		cat(be32(8), be32(2<<16)),
		cat(be32(0x7fffffff), be32(196608)),
		cat(startup, []byte{'Q'}, be32(0x7fffffff)),
		cat(startup, []byte{'z', 0, 0, 0, 4}),
		startupBytes(t, pgproto3.ProtocolVersion32, map[string]string{"user": "u"}),
	}
}

func TestAcceptSeedsWithFakeBackend(t *testing.T) {
	fb := startFakeBackend(t)
	reg := NewRegistry()
	base := runtime.NumGoroutine()
	for _, in := range fuzzSeeds(t) {
		acceptOnce(t, fb.ln.Addr().String(), reg, in)
	}
	if reg.Len() != 0 {
		t.Errorf("%d cancel keys left registered", reg.Len())
	}
	waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
}

func FuzzAccept(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	fb := startFakeBackend(f)
	reg := NewRegistry()
	f.Fuzz(func(t *testing.T, in []byte) {
		acceptOnce(t, fb.ln.Addr().String(), reg, in)
	})
}
