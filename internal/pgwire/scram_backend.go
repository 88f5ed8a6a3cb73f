package pgwire

// The proxy's own authentication to PostgreSQL after it verified the
// client with SCRAM (scram.go).
//
// A SCRAM server that verified a client's proof learns the client's
// ClientKey (RFC 5802 §3: ClientKey = ClientProof XOR ClientSignature,
// and the server computes ClientSignature from StoredKey). ClientKey is
// all a client needs to answer another SCRAM exchange that uses the same
// verifier (same salt and iteration count), without knowing the password:
// this is how PgBouncer authenticates to PostgreSQL with "SCRAM
// pass-through". The proxy does the same when PostgreSQL asks it for
// SCRAM-SHA-256, and checks PostgreSQL's server signature with ServerKey,
// so it knows it talks to the real server. When PostgreSQL trusts the
// proxy's connection (trust or peer), no exchange happens at all. Other
// methods (password, md5) would need the password, which the proxy never
// has: refused with 28000 and a hint.
//
// xdg-go/scram has no API for a client that holds ClientKey instead of a
// password, so the few lines of the client side are written here, with
// crypto/hmac and crypto/sha256 as the RFC defines them.

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/xdg-go/scram"
)

// scramKeys is what the proxy learned from the client's SCRAM exchange.
type scramKeys struct {
	cred      scram.StoredCredentials
	clientKey []byte
}

// clientKeyOf recovers ClientKey from a verified exchange: c1 and c2 are
// the client's first and final messages, s1 the server's first.
func clientKeyOf(cred scram.StoredCredentials, c1, s1, c2 string) ([]byte, error) {
	parts := strings.SplitN(c1, ",", 3)
	i := strings.LastIndex(c2, ",p=")
	if len(parts) != 3 || i < 0 {
		return nil, errors.New("malformed SCRAM messages")
	}
	proof, err := base64.StdEncoding.DecodeString(c2[i+3:])
	if err != nil {
		return nil, err
	}
	authMsg := parts[2] + "," + s1 + "," + c2[:i]
	sig := hmacSHA256(cred.StoredKey, authMsg)
	if len(proof) != len(sig) {
		return nil, errors.New("SCRAM proof of the wrong length")
	}
	key := make([]byte, len(sig))
	for j := range sig {
		key[j] = proof[j] ^ sig[j]
	}
	return key, nil
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// authenticateToBackend answers PostgreSQL's authentication request for
// the proxy's connection: nothing for trust, SCRAM with the client's
// ClientKey, a refusal for anything else. PostgreSQL's AuthenticationOk
// goes to the client.
func (s *Session) authenticateToBackend(keys scramKeys) error {
	for {
		msg, err := s.Server.Receive()
		if err != nil {
			s.sendFatal("08006", "the tashkent proxy lost its connection to PostgreSQL during authentication")
			return fmt.Errorf("pgwire: receiving from backend during authentication: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.AuthenticationOk:
			s.Client.Send(m)
			_ = s.Client.SetAuthType(pgproto3.AuthTypeOk)
			return nil
		case *pgproto3.AuthenticationSASL:
			if err := s.scramToBackend(m, keys); err != nil {
				return err
			}
		case *pgproto3.NoticeResponse, *pgproto3.NegotiateProtocolVersion:
			s.Client.Send(m)
		case *pgproto3.ErrorResponse:
			return s.relayServerError(m)
		default:
			return s.backendAuthRefused(fmt.Errorf("backend asked for %T", msg))
		}
	}
}

func (s *Session) backendAuthRefused(err error) error {
	s.Client.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "28000",
		Message: "the tashkent proxy authenticated the client but cannot authenticate to PostgreSQL as that user",
		Detail:  err.Error(),
		Hint:    "With the proxy's own authentication PostgreSQL must ask the proxy for scram-sha-256 (with the same verifier the proxy checked) or trust its connection (trust or peer for its Unix socket in pg_hba.conf); or run the proxy with --auth relay."})
	_ = s.Client.Flush()
	return fmt.Errorf("pgwire: authenticating to the backend: %w", err)
}

// scramToBackend runs the client side of SCRAM-SHA-256 with PostgreSQL,
// proving knowledge of ClientKey, and checks the server's signature.
func (s *Session) scramToBackend(req *pgproto3.AuthenticationSASL, keys scramKeys) error {
	offered := false
	for _, mech := range req.AuthMechanisms {
		offered = offered || mech == scramMechanism
	}
	if !offered {
		return s.backendAuthRefused(fmt.Errorf("PostgreSQL offered SASL mechanisms %v", req.AuthMechanisms))
	}
	nonce := make([]byte, 18)
	_, _ = rand.Read(nonce)
	clientNonce := base64.StdEncoding.EncodeToString(nonce)
	c1bare := "n=,r=" + clientNonce
	s.Server.Send(&pgproto3.SASLInitialResponse{AuthMechanism: scramMechanism, Data: []byte("n,," + c1bare)})
	if err := s.Server.Flush(); err != nil {
		return fmt.Errorf("pgwire: SCRAM to backend: %w", err)
	}
	msg, err := s.Server.Receive()
	if err != nil {
		return fmt.Errorf("pgwire: SCRAM to backend: %w", err)
	}
	cont, ok := msg.(*pgproto3.AuthenticationSASLContinue)
	if !ok {
		if e, isErr := msg.(*pgproto3.ErrorResponse); isErr {
			return s.relayServerError(e)
		}
		return s.backendAuthRefused(fmt.Errorf("expected SASL continue, got %T", msg))
	}
	s1 := string(cont.Data)
	fullNonce, salt, iters, err := parseServerFirst(s1)
	if err != nil || !strings.HasPrefix(fullNonce, clientNonce) {
		return s.backendAuthRefused(fmt.Errorf("malformed SCRAM message from PostgreSQL: %q", s1))
	}
	if string(salt) != keys.cred.Salt || iters != keys.cred.Iters {
		return s.backendAuthRefused(errors.New("PostgreSQL's verifier for the user differs from the one the proxy checked (salt or iteration count)"))
	}
	c2wop := "c=biws,r=" + fullNonce // biws: base64 of the GS2 header "n,,"
	authMsg := c1bare + "," + s1 + "," + c2wop
	sig := hmacSHA256(keys.cred.StoredKey, authMsg)
	proof := make([]byte, len(sig))
	for i := range sig {
		proof[i] = keys.clientKey[i] ^ sig[i]
	}
	s.Server.Send(&pgproto3.SASLResponse{Data: []byte(c2wop + ",p=" + base64.StdEncoding.EncodeToString(proof))})
	if err := s.Server.Flush(); err != nil {
		return fmt.Errorf("pgwire: SCRAM to backend: %w", err)
	}
	if msg, err = s.Server.Receive(); err != nil {
		return fmt.Errorf("pgwire: SCRAM to backend: %w", err)
	}
	final, ok := msg.(*pgproto3.AuthenticationSASLFinal)
	if !ok {
		if e, isErr := msg.(*pgproto3.ErrorResponse); isErr {
			return s.relayServerError(e)
		}
		return s.backendAuthRefused(fmt.Errorf("expected SASL final, got %T", msg))
	}
	want := "v=" + base64.StdEncoding.EncodeToString(hmacSHA256(keys.cred.ServerKey, authMsg))
	if !hmac.Equal(final.Data, []byte(want)) {
		return s.backendAuthRefused(errors.New("PostgreSQL's SCRAM server signature is wrong"))
	}
	return nil
}

// parseServerFirst reads "r=<nonce>,s=<salt>,i=<iterations>".
func parseServerFirst(s1 string) (nonce string, salt []byte, iters int, err error) {
	for _, f := range strings.Split(s1, ",") {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "r":
			nonce = v
		case "s":
			if salt, err = base64.StdEncoding.DecodeString(v); err != nil {
				return "", nil, 0, err
			}
		case "i":
			if iters, err = strconv.Atoi(v); err != nil {
				return "", nil, 0, err
			}
		}
	}
	if nonce == "" || len(salt) == 0 || iters < 1 {
		return "", nil, 0, errors.New("missing field")
	}
	return nonce, salt, iters, nil
}
