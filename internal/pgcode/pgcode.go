package pgcode

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostgreSQL's codes, named as in its errcodes.txt.
const (
	// Class 08: connection exception.
	TransactionResolutionUnknown = "08007" // tashkent: certify timed out, or a certified transaction gave way

	// Class 0A: feature not supported.
	FeatureNotSupported = "0A000"

	// Class 22: data exception.
	DivisionByZero            = "22012"
	InvalidParameterValue     = "22023"
	InvalidTextRepresentation = "22P02"

	// Class 23: integrity constraint violation.
	IntegrityConstraintViolation = "23000"
	ForeignKeyViolation          = "23503"
	UniqueViolation              = "23505"

	// Class 25: invalid transaction state.
	InvalidTransactionState = "25000" // tashkent: a streamed writeset whose temporary file failed
	ActiveSQLTransaction    = "25001"
	NoActiveSQLTransaction  = "25P01"
	InFailedSQLTransaction  = "25P02"

	// Class 28: invalid authorization specification.
	InvalidPassword = "28P01"

	// Class 3F: invalid schema name.
	InvalidSchemaName = "3F000"

	// Class 40: transaction rollback.
	SerializationFailure = "40001" // tashkent: certification abort, lock watch, snapshot too old
	DeadlockDetected     = "40P01"

	// Class 42: syntax error or access rule violation.
	SyntaxError            = "42601"
	InsufficientPrivilege  = "42501"
	UndefinedColumn        = "42703"
	DatatypeMismatch       = "42804"
	UndefinedFunction      = "42883"
	UndefinedTable         = "42P01"
	InvalidColumnReference = "42P10"

	// Class 53: insufficient resources.
	ConfigurationLimitExceeded = "53400" // temp_file_limit

	// Class 54: program limit exceeded.
	ProgramLimitExceeded = "54000" // tashkent: a writeset over a limit

	// Class 55: object not in prerequisite state.
	ObjectNotInPrerequisiteState = "55000"
	ObjectInUse                  = "55006"
	LockNotAvailable             = "55P03"

	// Class 57: operator intervention.
	QueryCanceled    = "57014"
	AdminShutdown    = "57P01" // pg_terminate_backend: tashkent's lock watch ends a blocker
	CannotConnectNow = "57P03" // tashkent: replica catching up or halted, agent unavailable

	// Class XX: internal error.
	InternalError = "XX000"
)

// tashkent's own codes, class TK.
const (
	// DDLGenerationChanged: tashkent.check_ddl_generation found a DDL
	// committed since the applier cached table definitions.
	DDLGenerationChanged = "TK001"
	// AlreadyCommitted: the version an applier or a commit turn asks for
	// is already committed on this replica.
	AlreadyCommitted = "TK002"
	// NotApplier: tashkent.apply_versions called by a backend that is not
	// the agent's applier.
	NotApplier = "TK003"
	// VersionWaitTimedOut: a wait for a version timed out:
	// wait_for_version or tashkent.sync_wait before the replica applied
	// it, wait_durable before the certifier made it durable.
	VersionWaitTimedOut = "TK004"
	// KeylessRowMissing: a version deletes a row of a table without a
	// primary key that this replica does not have; it diverged.
	KeylessRowMissing = "TK005"
	// TransactionFailed: a transaction's version failed before it became
	// durable (mode ed): nothing of it remains; it is safe to retry. A
	// safe one gets it as FATAL at COMMIT (the connection ends); a fast
	// one's session as a WARNING at its next statement.
	TransactionFailed = "TK006"
)

// Of is the SQLSTATE of a PostgreSQL error anywhere in err's chain, ""
// for any other error.
func Of(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// Class is the class of SQLSTATE code, named by the code of the class's
// own condition (its two characters and 000): Class(UniqueViolation) is
// IntegrityConstraintViolation. "" for a code that is not five characters.
func Class(code string) string {
	if len(code) != 5 {
		return ""
	}
	return code[:2] + "000"
}

// MissingObject reports whether err says the database has no schema, table
// or function of the name a statement used: for tashkent's own, an
// extension not installed yet, or one without that part.
func MissingObject(err error) bool {
	switch Of(err) {
	case InvalidSchemaName, UndefinedTable, UndefinedFunction:
		return true
	}
	return false
}
