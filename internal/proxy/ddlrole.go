package proxy

import (
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// DDL is replicated as statement text and runs on the other replicas in the
// proxies' administrative sessions, as a superuser (docs/GUARANTEES.md,
// "DDL"). Text written by a role that is not a superuser must not run
// there: whatever code the statement reaches runs with superuser rights,
// such as a column default, a CHECK constraint or an index expression that
// calls a function the role wrote. `ALTER TABLE t ADD COLUMN c int DEFAULT
// f()` with an f that runs ALTER ROLE ... SUPERUSER when it can would make
// the role a superuser on every other replica. A session cannot be made to
// run as another role safely on the applying side: code running under SET
// ROLE or SET SESSION AUTHORIZATION in a superuser's session can reset it.
// So DDL from such roles is refused at COMMIT (with the transaction rolled
// back) unless the operator declares every role that can run DDL trusted
// as a superuser (Config.TrustDDLRoles).
//
// Whether the role was a superuser is PostgreSQL's own is_superuser, which
// it reports to the client at the start of the session and after every
// change (SET ROLE, SET SESSION AUTHORIZATION), as last reported when the
// statement completed. A role that reaches superuser rights by SET ROLE
// is one: it could run the statement as a superuser anyway.

// replicatedDDL is one DDL statement of the open transaction, replicated
// with its writeset.
type replicatedDDL struct {
	sql string
	// asSuperuser: the session's role was a superuser when it ran.
	asSuperuser bool
}

// untrustedDDL is the COMMIT's error for a transaction that ran replicated
// DDL as a role that is not a superuser on a proxy that does not trust
// such roles; nil otherwise.
func (s *session) untrustedDDL() *pgproto3.ErrorResponse {
	if s.p.cfg.TrustDDLRoles {
		return nil
	}
	for _, d := range s.ddl {
		if !d.asSuperuser {
			return errorResponse(codeInsufficientPrivilege,
				"tashkent replicates DDL only from superusers: the transaction was rolled back",
				"It ran "+statementTag(d.sql)+" as role "+s.roleName()+", which is not a superuser. "+
					"The other replicas run replicated DDL as a superuser, so code it reaches (a default, a constraint, an index expression) would run there with superuser rights.",
				"Run DDL as a superuser through the proxy, or start the proxies with --trust-ddl-roles if every role that can run DDL is trusted as a superuser.")
		}
	}
	return nil
}

// roleName is the session's login role, quoted for a message.
func (s *session) roleName() string {
	if r := s.w.ServerParams["session_authorization"]; r != "" {
		return `"` + r + `"`
	}
	return "(unknown)"
}

// statementTag is the first words of a statement, for a message.
func statementTag(sql string) string {
	words := strings.Fields(sql)
	if len(words) > 3 {
		words = words[:3]
	}
	return strings.Join(words, " ")
}
