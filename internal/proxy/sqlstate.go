package proxy

// SQLSTATE codes the proxy itself reports (PostgreSQL's appendix A).
const (
	codeSerializationFailure   = "40001" // certification abort: retry
	codeResolutionUnknown      = "08007" // transaction_resolution_unknown
	codeFeatureNotSupported    = "0A000"
	codeProtocolViolation      = "08P01"
	codeCannotConnectNow       = "57P03"
	codeAdminShutdown          = "57P01"
	codeQueryCanceled          = "57014"
	codeInFailedTransaction    = "25P02"
	codeInvalidCatalogName     = "3D000"
	codeConnectionFailure      = "08006"
	codeObjectNotInPrereqState = "55000"
	codeInvalidStatementName   = "26000"
	codeInsufficientPrivilege  = "42501"
	codeUndefinedTable         = "42P01"
)
