package pgwire

// Relayed logins that PostgreSQL admits without asking for a credential
// (red-team finding 7, branch h32; docs/OPERATIONS.md, "Client
// authentication").
//
// In relay mode PostgreSQL authenticates the client on the connection the
// proxy opens: its Unix socket or loopback TCP, a path that pg_hba.conf
// often trusts (every server `tashkent up` starts is initdb'd with -A
// trust, as many installations trust local connections). PostgreSQL then
// answers the relayed StartupMessage with AuthenticationOk at once, and
// whoever reached the proxy's port, from anywhere, is logged in as the role
// of their choice, the superuser included: the proxy would launder a
// network client into a trusted local one. So a relayed login that
// PostgreSQL admitted without first sending a credential request
// (cleartext password, MD5, SASL, GSS) is refused with 28000, unless the
// operator declared with Config.AllowPasswordlessLogins that only trusted
// clients can reach the proxy. The check is on what PostgreSQL asked, not
// on which method pg_hba.conf names: trust, peer, ident and any method
// that asks nothing look the same on the wire, and all are refused.

import (
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// PasswordlessLoginError is a relayed login that PostgreSQL admitted
// without asking the client for a credential, refused because
// Config.AllowPasswordlessLogins is off. The client got FATAL 28000.
type PasswordlessLoginError struct {
	User     string
	Database string
}

func (e *PasswordlessLoginError) Error() string {
	return fmt.Sprintf("pgwire: login as role %q refused: PostgreSQL admitted it on the proxy's connection without asking for a password (SQLSTATE 28000)", e.User)
}

// passwordlessLoginHint lists the ways out, the secure ones first.
const passwordlessLoginHint = `Require a password for the proxy's connections in pg_hba.conf ` +
	`(for example scram-sha-256 on the "local" line, or on "host ... 127.0.0.1/32" for a proxy that connects over TCP) and reload PostgreSQL, ` +
	`or run the proxy with --auth scram (it then verifies SCRAM-SHA-256 itself), ` +
	`or, only if no untrusted client can reach the proxy's port, start the proxy with --allow-passwordless-logins.`

// passwordlessLoginRefusal is the client's FATAL for a login PostgreSQL
// admitted without a credential.
func passwordlessLoginRefusal(user string) *pgproto3.ErrorResponse {
	return &pgproto3.ErrorResponse{
		Severity:            "FATAL",
		SeverityUnlocalized: "FATAL",
		Code:                "28000", // invalid_authorization_specification, as for a pg_hba.conf reject
		Message: fmt.Sprintf("PostgreSQL admitted role %q on the tashkent proxy's connection without asking for a password, "+
			"so the proxy would let anyone who reaches it log in as any role", user),
		Hint: passwordlessLoginHint,
	}
}

// serverDrainBytesMax bounds what the proxy reads and discards from a
// session it ends during startup: the rest of PostgreSQL's startup
// (ParameterStatus, BackendKeyData, ReadyForQuery) is well under 1 KiB.
const serverDrainBytesMax = 64 << 10

// refusePasswordlessLogin tells the client why it is not admitted and ends
// the server's session cleanly; Accept then closes both connections.
func (s *Session) refusePasswordlessLogin() error {
	user := s.Params["user"]
	s.Client.Send(passwordlessLoginRefusal(user))
	_ = s.Client.Flush()
	s.terminateServerDuringStartup()
	return &PasswordlessLoginError{User: user, Database: s.Params["database"]}
}

// terminateServerDuringStartup sends Terminate and reads until PostgreSQL
// closes the connection. PostgreSQL is still finishing its startup after
// AuthenticationOk; closing with its messages unread would reset the
// connection under it, which it logs as a failure to send to the client.
// Bounded by terminateWriteTimeout.
func (s *Session) terminateServerDuringStartup() {
	_ = s.ServerConn.SetDeadline(time.Now().Add(terminateWriteTimeout))
	s.Server.Send(&pgproto3.Terminate{})
	if err := s.Server.Flush(); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(s.ServerConn, serverDrainBytesMax))
}
