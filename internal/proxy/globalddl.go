package proxy

import (
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tashkent-db/tashkent/internal/sqlclass"
)

// The database's DDL guard (replica/ddlguard.go) judges DDL with event
// triggers, and PostgreSQL fires none for commands on global objects:
// roles, databases, tablespaces, REASSIGN OWNED; nor for DROP OWNED that
// drops nothing. An ordinary role may run some of them on itself (ALTER
// ROLE CURRENT_USER PASSWORD ..., ALTER ROLE CURRENT_USER SET ..., DROP
// OWNED BY CURRENT_USER, REASSIGN OWNED BY CURRENT_USER TO ...), and the
// other replicas run the replicated text as a superuser, for whom
// CURRENT_USER is that superuser: its password became the role's choice,
// its session defaults the role's, its objects dropped or given away
// (review h33, finding 3). So the proxy refuses, at COMMIT, a transaction
// that ran such a statement in a session that was not a superuser's,
// unless the proxies trust roles with DDL (--trust-ddl-roles).

// commandsTheGuardCannotSee are the replicated DDL tags (sqlclass) for
// which PostgreSQL 15 fires no event trigger, or may fire none.
var commandsTheGuardCannotSee = map[string]bool{
	"CREATE ROLE": true, "ALTER ROLE": true, "DROP ROLE": true,
	"GRANT ROLE": true, "REVOKE ROLE": true,
	"CREATE DATABASE": true, "ALTER DATABASE": true, "DROP DATABASE": true,
	"CREATE TABLESPACE": true, "ALTER TABLESPACE": true, "DROP TABLESPACE": true,
	"REASSIGN OWNED": true, "DROP OWNED": true,
	"CREATE EVENT TRIGGER": true, "ALTER EVENT TRIGGER": true,
}

// unguardedDDL is the COMMIT's error for a transaction that ran a
// command the DDL guard cannot see as a role that is not a superuser, on
// a proxy that does not trust such roles; nil otherwise. Whether the
// session is a superuser's is PostgreSQL's is_superuser as last reported.
func (s *session) unguardedDDL() *pgproto3.ErrorResponse {
	if s.p.cfg.TrustDDLRoles || s.w.ServerParams["is_superuser"] == "on" {
		return nil
	}
	for _, sql := range s.ddl {
		tag := unguardedTag(sql)
		if tag == "" {
			continue
		}
		return errorResponse(codeInsufficientPrivilege,
			"tashkent replicates "+tag+" only from superusers: the transaction was rolled back",
			"The other replicas run replicated DDL as a superuser, for whom CURRENT_USER, SESSION_USER and an omitted owner mean that superuser, and no event trigger can check this command there.",
			"Run the statement as a superuser, or start the proxies with --trust-ddl-roles if every role that can run DDL is trusted as a superuser.")
	}
	return nil
}

// unguardedTag is the tag of sql if it is a command the DDL guard cannot
// see, "" otherwise.
func unguardedTag(sql string) string {
	stmts, err := sqlclass.Classify(sql)
	if err != nil {
		return "" // it ran, so it parsed; nothing to judge
	}
	for _, st := range stmts {
		if commandsTheGuardCannotSee[st.Tag] {
			return st.Tag
		}
	}
	return ""
}
