package pgwire

// Client authentication by the proxy itself (SCRAM-SHA-256).
//
// In the default relay mode the proxy passes PostgreSQL's authentication
// requests to the client and the answers back: the database decides, and
// the proxy never sees a password (SCRAM) or sees only what the method
// exposes. In SCRAM mode (Config.SCRAM set) the proxy is the server of the
// SASL exchange (RFC 5802/7677, as PostgreSQL speaks it): it checks the
// client's proof against a stored SCRAM-SHA-256 verifier, the same string
// PostgreSQL keeps in pg_authid.rolpassword, with the maintained
// github.com/xdg-go/scram server. Only then does it open the backend
// connection, as the same user, and authenticates it by its own means
// (scram_backend.go): SCRAM-SHA-256 with the ClientKey the client's proof
// revealed, or nothing when PostgreSQL trusts the proxy's connection; a
// request for a password (password, md5) is refused with a hint, never
// relayed. The client receives AuthenticationOk only once both succeeded.
//
// PostgreSQL's clients put an empty user name in the SCRAM message (the
// user is the startup packet's); the proxy does the same. An unknown user
// or one without a SCRAM verifier gets a made-up verifier, so the
// exchange fails at the proof with the same 28P01 as a wrong password and
// does not tell a guesser which users exist (PostgreSQL's "mock"
// authentication). Channel binding (SCRAM-SHA-256-PLUS) is not offered.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"
)

// scramMechanism is the only SASL mechanism the proxy offers.
const scramMechanism = "SCRAM-SHA-256"

// SCRAMLookup returns the SCRAM-SHA-256 verifier of a user, in
// PostgreSQL's text form (see ParseSCRAMVerifier); ok is false when the
// user does not exist, cannot log in, or has no SCRAM verifier. An error
// means the lookup itself failed (the client gets 08006).
type SCRAMLookup func(ctx context.Context, user string) (verifier string, ok bool, err error)

// ParseSCRAMVerifier reads PostgreSQL's stored SCRAM-SHA-256 verifier,
// "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>" (base64).
func ParseSCRAMVerifier(v string) (scram.StoredCredentials, error) {
	var cred scram.StoredCredentials
	head, keys, ok := strings.Cut(strings.TrimPrefix(v, scramMechanism+"$"), "$")
	if !ok || !strings.HasPrefix(v, scramMechanism+"$") {
		return cred, errors.New("pgwire: not a SCRAM-SHA-256 verifier")
	}
	iters, salt, ok1 := strings.Cut(head, ":")
	stored, server, ok2 := strings.Cut(keys, ":")
	if !ok1 || !ok2 {
		return cred, errors.New("pgwire: malformed SCRAM-SHA-256 verifier")
	}
	n, err := strconv.Atoi(iters)
	if err != nil || n < 1 {
		return cred, errors.New("pgwire: malformed SCRAM-SHA-256 verifier: iterations")
	}
	var raw [3][]byte
	for i, s := range []string{salt, stored, server} {
		if raw[i], err = base64.StdEncoding.DecodeString(s); err != nil {
			return cred, fmt.Errorf("pgwire: malformed SCRAM-SHA-256 verifier: %w", err)
		}
	}
	cred.Salt, cred.Iters, cred.StoredKey, cred.ServerKey = string(raw[0]), n, raw[1], raw[2]
	return cred, nil
}

// mockCredentials is a verifier no password matches.
func mockCredentials() scram.StoredCredentials {
	b := make([]byte, 80)
	_, _ = rand.Read(b)
	return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(b[:16]), Iters: 4096},
		StoredKey: b[16:48], ServerKey: b[48:80]}
}

// authenticateSCRAM runs the SASL exchange with the client for user and
// returns nil when the client proved it knows the password. It sends
// everything up to AuthenticationSASLFinal; AuthenticationOk is the
// caller's, once the backend accepted the connection.
func (s *Session) authenticateSCRAM(ctx context.Context, user string) (scramKeys, error) {
	verifier, ok, err := s.cfg.SCRAM(ctx, user)
	if err != nil {
		s.sendFatal("08006", "the tashkent proxy could not look up the user's credentials")
		return scramKeys{}, fmt.Errorf("pgwire: looking up credentials of %q: %w", user, err)
	}
	cred := mockCredentials()
	if ok {
		if cred, err = ParseSCRAMVerifier(verifier); err != nil {
			s.log.Warn("user has no usable SCRAM-SHA-256 verifier", "err", err)
			cred = mockCredentials()
		}
	} else {
		s.log.Info("authentication for an unknown user or one without a SCRAM-SHA-256 password")
	}
	server, err := scram.SHA256.NewServer(func(string) (scram.StoredCredentials, error) { return cred, nil })
	if err != nil {
		return scramKeys{}, err
	}
	conv := server.NewConversation()

	s.Client.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{scramMechanism}})
	first, err := s.receiveSASL(pgproto3.AuthTypeSASL)
	if err != nil {
		return scramKeys{}, err
	}
	initial, ok := first.(*pgproto3.SASLInitialResponse)
	if !ok || initial.AuthMechanism != scramMechanism {
		return scramKeys{}, s.protocolError("08P01", "client selected an invalid SASL authentication mechanism", nil)
	}
	// xdg-go/scram indexes the first byte of the GS2 header unchecked.
	if d := initial.Data; len(d) == 0 || (d[0] != 'n' && d[0] != 'y' && d[0] != 'p') {
		return scramKeys{}, s.protocolError("08P01", "malformed SCRAM message", nil)
	}
	// A copy: the message's bytes are pgproto3's buffer, reused by the next
	// Receive.
	clientFirst := string(initial.Data)
	challenge, err := conv.Step(clientFirst)
	if err != nil {
		return scramKeys{}, s.protocolError("08P01", "malformed SCRAM message", err)
	}
	s.Client.Send(&pgproto3.AuthenticationSASLContinue{Data: []byte(challenge)})
	next, err := s.receiveSASL(pgproto3.AuthTypeSASLContinue)
	if err != nil {
		return scramKeys{}, err
	}
	resp, ok := next.(*pgproto3.SASLResponse)
	if !ok {
		return scramKeys{}, s.protocolError("08P01", fmt.Sprintf("expected SASL response, got %T", next), nil)
	}
	final, err := conv.Step(string(resp.Data))
	if err != nil || !conv.Valid() {
		s.sendFatal(CodeInvalidPassword, fmt.Sprintf("password authentication failed for user %q", user))
		return scramKeys{}, &AuthError{User: user, Err: err}
	}
	clientKey, err := clientKeyOf(cred, clientFirst, challenge, string(resp.Data))
	if err != nil { // cannot happen after a valid proof
		return scramKeys{}, s.protocolError("08P01", "malformed SCRAM message", err)
	}
	s.Client.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte(final)})
	return scramKeys{cred: cred, clientKey: clientKey}, nil
}

// receiveSASL flushes the pending authentication request and reads the
// client's answer to it.
func (s *Session) receiveSASL(authType uint32) (pgproto3.FrontendMessage, error) {
	if err := s.Client.Flush(); err != nil {
		return nil, fmt.Errorf("pgwire: sending authentication request: %w", err)
	}
	if err := s.Client.SetAuthType(authType); err != nil {
		return nil, err
	}
	msg, err := s.Client.Receive()
	if err != nil {
		if isClosedErr(err) {
			return nil, fmt.Errorf("pgwire: client closed during authentication: %w", err)
		}
		return nil, s.protocolError("08P01", "invalid authentication response", err)
	}
	if _, ok := msg.(*pgproto3.Terminate); ok {
		return nil, errors.New("pgwire: client terminated during authentication")
	}
	return msg, nil
}

// CodeInvalidPassword is PostgreSQL's invalid_password, sent for a
// failed password authentication.
const CodeInvalidPassword = "28P01"

// AuthError is a client that failed the proxy's own authentication; it
// got FATAL 28P01 before Accept returned it.
type AuthError struct {
	User string
	Err  error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("pgwire: password authentication failed for user %q: %v", e.User, e.Err)
}

func (e *AuthError) Unwrap() error { return e.Err }
