package pgwire

// FuzzStartupAndAuth fuzzes what a client sends before and while it
// authenticates (issue 6): startup packets, SSLRequest, GSSENCRequest,
// CancelRequest, protocol versions, lengths, and its answers to each kind of
// authentication request (cleartext, md5, SCRAM's SASL exchange), which
// pgproto3 decodes by the request they answer (Backend.SetAuthType).
//
// It drives the real Accept over a real TCP connection pair, against
// scriptedBackend, a PostgreSQL stand-in that asks for the authentication
// method the input's first byte chooses. Unlike FuzzAccept
// (malformed_test.go), which only looks for panics and hangs, it checks what
// the client is told:
//
//   - Accept returns within startupBoundTime (a hang is a failure);
//   - the answer is one 'N' per declined encryption request, then a stream
//     of well-formed backend messages;
//   - a *ProtocolError reached the client as a FATAL ErrorResponse with the
//     same SQLSTATE, the last message it got;
//   - a session that started gave the client the proxy's own cancel key,
//     never the backend's, and unregisters it on Close;
//   - after the session, the relay ends when the client's input ends.
//
// Run it with
//
//	go test -run='^$' -fuzz=FuzzStartupAndAuth -fuzztime=10m -parallel=1 ./internal/pgwire/
//
// Seeds are in testdata/fuzz/FuzzStartupAndAuth (rewrite them with
// `go test -run TestStartupFuzzSeedCorpus ./internal/pgwire/ -write-fuzz-seeds`).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

var writeFuzzSeeds = flag.Bool("write-fuzz-seeds", false, "rewrite testdata/fuzz seed corpora from the seeds in startup_fuzz_test.go")

// startupBoundTime bounds Accept for one fuzz input: the client's input is
// all there and then ends, so any wait longer than this is a hang.
const startupBoundTime = 5 * time.Second

// fakeBackendPID is the key scriptedBackend gives; the client must never see it.
const fakeBackendPID = 4242

// authMode is the authentication scriptedBackend asks for.
type authMode byte

const (
	authTrust authMode = iota
	authCleartext
	authMD5
	authSCRAM
	authModes
)

// rightPassword is the password scriptedBackend accepts (cleartext, md5).
const rightPassword = "right"

// scriptedBackend is one listener per authMode.
type scriptedBackend struct {
	addrs [authModes]string
}

func startScriptedBackend(tb testing.TB) *scriptedBackend {
	sb := &scriptedBackend{}
	var wg sync.WaitGroup
	var listeners []net.Listener
	for mode := range authModes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		sb.addrs[mode] = ln.Addr().String()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() { defer wg.Done(); serveScripted(c, mode) }()
			}
		}()
		listeners = append(listeners, ln)
	}
	tb.Cleanup(func() {
		for _, ln := range listeners {
			ln.Close()
		}
		wg.Wait()
	})
	return sb
}

func serveScripted(c net.Conn, mode authMode) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(startupBoundTime))
	be := pgproto3.NewBackend(c, c)
	be.SetMaxBodyLen(1 << 16)
	msg, err := be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, ok := msg.(*pgproto3.StartupMessage); !ok {
		return // a forwarded CancelRequest
	}
	if !authenticate(be, mode) {
		return
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "15.fake"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: fakeBackendPID, SecretKey: []byte{1, 2, 3, 4}})
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

// authenticate runs mode's exchange; false means the client was refused
// (or left).
func authenticate(be *pgproto3.Backend, mode authMode) bool {
	switch mode {
	case authCleartext, authMD5:
		var req pgproto3.BackendMessage = &pgproto3.AuthenticationCleartextPassword{}
		authType := uint32(pgproto3.AuthTypeCleartextPassword)
		if mode == authMD5 {
			req, authType = &pgproto3.AuthenticationMD5Password{Salt: [4]byte{1, 2, 3, 4}}, pgproto3.AuthTypeMD5Password
		}
		be.Send(req)
		if be.Flush() != nil || be.SetAuthType(authType) != nil {
			return false
		}
		msg, err := be.Receive()
		if pw, ok := msg.(*pgproto3.PasswordMessage); err != nil || !ok || pw.Password != rightPassword {
			refuse(be)
			return false
		}
	case authSCRAM:
		be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}})
		if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeSASL) != nil {
			return false
		}
		if msg, err := be.Receive(); err != nil || !isType[*pgproto3.SASLInitialResponse](msg) {
			refuse(be)
			return false
		}
		be.Send(&pgproto3.AuthenticationSASLContinue{Data: []byte("r=nonce,s=c2FsdA==,i=4096")})
		if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeSASLContinue) != nil {
			return false
		}
		if msg, err := be.Receive(); err != nil || !isType[*pgproto3.SASLResponse](msg) {
			refuse(be)
			return false
		}
		be.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte("v=signature")})
	}
	return true
}

func isType[T any](msg pgproto3.FrontendMessage) bool {
	_, ok := msg.(T)
	return ok
}

func refuse(be *pgproto3.Backend) {
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "28P01", Message: "password authentication failed"})
	_ = be.Flush()
}

// tcpPair returns both ends of a loopback TCP connection: unlike net.Pipe,
// the client can half-close and still read the proxy's answer.
func tcpPair(tb testing.TB, ln net.Listener) (client, proxySide net.Conn) {
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	proxySide = <-accepted
	if proxySide == nil {
		tb.Fatal("accept failed")
	}
	return client, proxySide
}

// startupExchange runs one fuzz input: in[0] chooses the authentication
// mode, in[1:] is what the client sends.
func startupExchange(t *testing.T, sb *scriptedBackend, ln net.Listener, reg *Registry, in []byte) {
	mode := authTrust
	if len(in) > 0 {
		mode, in = authMode(in[0])%authModes, in[1:]
	}
	client, proxySide := tcpPair(t, ln)
	defer client.Close()
	answer := make(chan []byte, 1)
	go func() {
		_ = client.SetDeadline(time.Now().Add(3 * startupBoundTime))
		_, _ = client.Write(in)
		_ = client.(*net.TCPConn).CloseWrite()
		out, _ := io.ReadAll(client)
		answer <- out
	}()

	type accepted struct {
		sess *Session
		err  error
	}
	result := make(chan accepted, 1)
	cfg := Config{BackendAddr: sb.addrs[mode], StartupTimeout: 2 * startupBoundTime, MessageBodyBytesMax: 1 << 20, AllowPasswordlessLogins: true}
	go func() {
		sess, err := Accept(context.Background(), proxySide, cfg, reg)
		result <- accepted{sess, err}
	}()
	var res accepted
	select {
	case res = <-result:
	case <-time.After(startupBoundTime):
		proxySide.Close()
		t.Fatalf("hang: Accept did not return within %s of a client whose input had ended\nmode %d, input %q", startupBoundTime, mode, in)
	}
	if res.err == nil {
		relaySession(t, res.sess, reg, mode, in)
	}
	out := <-answer
	checkStartupAnswer(t, res.sess, res.err, out, mode, in)
	if reg.Len() != 0 {
		t.Fatalf("%d cancel keys still registered after the session\nmode %d, input %q", reg.Len(), mode, in)
	}
}

// relaySession runs the relay until the client's input ends, then closes.
func relaySession(t *testing.T, sess *Session, reg *Registry, mode authMode, in []byte) {
	if reg.Len() != 1 {
		t.Fatalf("a started session registered %d cancel keys, want 1", reg.Len())
	}
	done := make(chan error, 1)
	go func() { done <- sess.Relay(context.Background()) }()
	select {
	case <-done:
	case <-time.After(startupBoundTime):
		sess.ClientConn.Close()
		sess.ServerConn.Close()
		<-done
		t.Fatalf("hang: the relay did not end within %s of the client's end of input\nmode %d, input %q", startupBoundTime, mode, in)
	}
	_ = sess.Close()
}

// checkStartupAnswer checks what the client was told against how Accept ended.
func checkStartupAnswer(t *testing.T, sess *Session, err error, out []byte, mode authMode, in []byte) {
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\nAccept: %v\nmode %d, input %q\nanswer %q", fmt.Sprintf(format, args...), err, mode, in, out)
	}
	declined := declinedEncryptionRequests(in)
	if len(out) < declined || strings.Count(string(out[:declined]), "N") != declined {
		fail("want %d 'N' answers to encryption requests", declined)
	}
	msgs, decodeErr := decodeBackendStream(out[declined:])
	if decodeErr != nil {
		fail("the answer is not a stream of backend messages: %v", decodeErr)
	}
	var last pgproto3.BackendMessage
	if len(msgs) > 0 {
		last = msgs[len(msgs)-1]
	}
	var pe *ProtocolError
	switch {
	case errors.As(err, &pe):
		if e, ok := last.(*pgproto3.ErrorResponse); !ok || e.Severity != "FATAL" || e.Code != pe.Code {
			fail("a protocol error must end with a FATAL %s ErrorResponse, the last message was %#v", pe.Code, last)
		}
	case err == nil:
		sawKey := false
		for _, m := range msgs {
			if k, ok := m.(*pgproto3.BackendKeyData); ok {
				if k.ProcessID == fakeBackendPID || k.ProcessID != sess.ProxyPID {
					fail("the client got cancel key %d, want the proxy's %d", k.ProcessID, sess.ProxyPID)
				}
				sawKey = true
			}
		}
		if !sawKey {
			fail("a started session got no BackendKeyData")
		}
	}
	for _, m := range msgs {
		if e, ok := m.(*pgproto3.ErrorResponse); ok && len(e.Code) != 5 {
			fail("ErrorResponse without a SQLSTATE: %#v", e)
		}
	}
}

// declinedEncryptionRequests counts the SSLRequest/GSSENCRequest packets at
// the start of in that the proxy answers 'N' (negotiationsMax at most).
func declinedEncryptionRequests(in []byte) int {
	n := 0
	for len(in) >= 8 && n < negotiationsMax {
		// Any packet length pgproto3 accepts (PostgreSQL does not insist on
		// 8 either); the whole packet must have arrived.
		length := int(binary.BigEndian.Uint32(in))
		code := binary.BigEndian.Uint32(in[4:])
		if length < 8 || length > 10_004 || length > len(in) || (code != 80877103 && code != 80877104) {
			break
		}
		n++
		in = in[length:]
	}
	return n
}

// decodeBackendStream decodes b as backend messages (copies: pgproto3
// reuses its buffers).
func decodeBackendStream(b []byte) ([]pgproto3.BackendMessage, error) {
	frames, err := countFrames(b)
	if err != nil {
		return nil, err
	}
	fe := pgproto3.NewFrontend(bytes.NewReader(b), io.Discard)
	var msgs []pgproto3.BackendMessage
	for range frames {
		msg, err := fe.Receive()
		if err != nil {
			return msgs, err
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			c := *m
			msgs = append(msgs, &c)
		case *pgproto3.BackendKeyData:
			msgs = append(msgs, &pgproto3.BackendKeyData{ProcessID: m.ProcessID, SecretKey: bytes.Clone(m.SecretKey)})
		default:
			msgs = append(msgs, msg)
		}
	}
	return msgs, nil
}

// countFrames splits b into type-and-length framed messages (the Frontend
// reads ahead, so it cannot tell where b ends) and counts them.
func countFrames(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if len(b) < 5 {
			return n, fmt.Errorf("%d bytes of a message header at the end", len(b))
		}
		length := int(binary.BigEndian.Uint32(b[1:5]))
		if length < 4 || 1+length > len(b) {
			return n, fmt.Errorf("message %q announces %d bytes, %d left", b[0], length, len(b)-1)
		}
		b = b[1+length:]
		n++
	}
	return n, nil
}

// orderedStartup encodes a StartupMessage with its parameters in the order
// given (pgproto3 encodes a map, in random order, which would make the
// committed seed corpus differ from run to run).
func orderedStartup(version uint32, kv ...string) []byte {
	body := be32(version)
	for _, s := range kv {
		body = append(append(body, s...), 0)
	}
	body = append(body, 0)
	return cat(be32(uint32(4+len(body))), body)
}

func startupFuzzSeeds(tb testing.TB) [][]byte {
	startup := orderedStartup(pgproto3.ProtocolVersion30, "user", "u", "database", "d")
	encode := func(msgs ...pgproto3.FrontendMessage) []byte {
		var b []byte
		for _, m := range msgs {
			var err error
			if b, err = m.Encode(b); err != nil {
				tb.Fatal(err)
			}
		}
		return b
	}
	gss := cat(be32(8), be32(80877104))
	query := encode(&pgproto3.Query{String: "SELECT 1"}, &pgproto3.Terminate{})
	password := encode(&pgproto3.PasswordMessage{Password: rightPassword})
	sasl := encode(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,,n=,r=nonce")},
		&pgproto3.SASLResponse{Data: []byte("c=biws,r=nonce,p=proof")})
	mode := func(m authMode, parts ...[]byte) []byte { return cat(append([][]byte{{byte(m)}}, parts...)...) }
	return [][]byte{
		nil,
		mode(authTrust, startup),
		mode(authTrust, startup, query),
		mode(authTrust, sslRequestBytes, startup, query),
		mode(authTrust, gss, sslRequestBytes, startup),
		mode(authTrust, sslRequestBytes, gss, sslRequestBytes),
		mode(authTrust, encode(&pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}})),
		mode(authTrust, orderedStartup(pgproto3.ProtocolVersion32, "user", "u")),
		mode(authTrust, cat(be32(8), be32(2<<16))),
		mode(authTrust, cat(be32(8), be32(3<<16|1))),
		mode(authTrust, cat(be32(0x7fffffff), be32(196608))),
		mode(authTrust, cat(be32(2), be32(196608))),
		mode(authTrust, cat(be32(20), be32(196608), []byte("user\x00u"))),
		mode(authCleartext, startup, password, query),
		mode(authCleartext, startup, encode(&pgproto3.PasswordMessage{Password: "wrong"})),
		mode(authCleartext, startup, []byte{'p'}, be32(1<<30)), // oversized password
		mode(authCleartext, startup, query),                    // a Query instead of a password
		mode(authCleartext, startup, encode(&pgproto3.Terminate{})),
		mode(authMD5, startup, password, query),
		mode(authMD5, startup, []byte{'p'}, be32(4)), // empty body
		mode(authSCRAM, startup, sasl, query),
		mode(authSCRAM, startup, encode(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: nil})),
		mode(authSCRAM, startup, []byte{'p'}, be32(8), []byte("MECH")), // unterminated mechanism
		mode(authSCRAM, startup, []byte{'p'}, be32(5), []byte{0}),      // mechanism, no length
	}
}

func TestStartupFuzzSeedsPass(t *testing.T) {
	sb := startScriptedBackend(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	reg := NewRegistry()
	for i, s := range startupFuzzSeeds(t) {
		t.Run(fmt.Sprint(i), func(t *testing.T) { startupExchange(t, sb, ln, reg, s) })
	}
}

func FuzzStartupAndAuth(f *testing.F) {
	for _, s := range startupFuzzSeeds(f) {
		f.Add(s)
	}
	sb := startScriptedBackend(f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ln.Close() })
	reg := NewRegistry()
	f.Fuzz(func(t *testing.T, in []byte) { startupExchange(t, sb, ln, reg, in) })
}

// TestStartupFuzzSeedCorpus writes the seeds as testdata/fuzz corpus files
// with -write-fuzz-seeds, and otherwise checks the committed corpus holds them.
func TestStartupFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzStartupAndAuth")
	for i, s := range startupFuzzSeeds(t) {
		path := filepath.Join(dir, fmt.Sprintf("seed-%02d", i))
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if *writeFuzzSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != content {
			t.Errorf("%s is missing or stale; run go test -run TestStartupFuzzSeedCorpus ./internal/pgwire/ -write-fuzz-seeds", path)
		}
	}
}
