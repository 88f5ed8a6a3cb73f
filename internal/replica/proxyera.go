package replica

// Deleted with internal/proxy.
//
// The declarations below are what the wire proxy (internal/proxy,
// internal/sqlclass, internal/cli/proxy.go) and internal/bench still name
// from the proxy's capture, which lived in this package: the PL/pgSQL and C
// capture triggers, the per-session writeset buffer and its collect, the
// record token and the tashkent.applied table. The extension does all of
// that now (extension/src/capture.c, writeset.c, turn.c), and this package
// no longer installs it. They are kept only so that those packages build
// until they are deleted or moved to the extension; every function fails
// with errProxyEra. Remove this file with internal/proxy.

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/api/certifierpb"
)

var errProxyEra = errors.New("replica: the proxy's capture was removed; the tashkent extension captures writes and records versions")

// Capture chose how Install captured writes.
type Capture string

// The capture choices of the proxy.
const (
	CaptureAuto    Capture = "auto"
	CaptureC       Capture = "c"
	CapturePLpgSQL Capture = "plpgsql"
)

// The proxy's SQL and SQLSTATEs.
const (
	WritesetBuffer              = "tashkent_writeset"
	ClientDDLSetting            = "tashkent.client_ddl"
	CollectQuery                = `SELECT tbl, op, key, "row" FROM tashkent.take_writeset($1)`
	CollectEndSQL               = `SELECT tashkent.trim_writeset_buffer($1), pg_catalog.current_setting('tashkent.client_ddl', true)`
	AssertNothingToReplicateSQL = `SELECT tashkent.assert_nothing_to_replicate()`
	RecordVersionSQL            = `SELECT tashkent.record_version($1, $2)`
	CodeSomethingToReplicate    = "TK001"
)

// ClientDDLNote was one entry of ClientDDLSetting.
type ClientDDLNote struct {
	Query string `json:"query"`
	DDL   string `json:"ddl"`
}

// Event was one row of the proxy's writeset buffer.
type Event struct {
	Table string
	Op    byte
	Key   []byte
	Row   []byte
}

// ParseCapture fails: see errProxyEra.
func ParseCapture(string) (Capture, error) { return "", errProxyEra }

// Install fails: see errProxyEra.
func Install(context.Context, *pgx.Conn) error { return errProxyEra }

// InstallCapture fails: see errProxyEra.
func InstallCapture(context.Context, *pgx.Conn, Capture, *slog.Logger) error { return errProxyEra }

// CaptureLanguage fails: see errProxyEra.
func CaptureLanguage(context.Context, Querier) (string, error) { return "", errProxyEra }

// PrepareSession fails: see errProxyEra.
func PrepareSession(context.Context, Querier) error { return errProxyEra }

// Collapse fails: see errProxyEra (extension/src/writeset.c collapses).
func Collapse([]Event) ([]*certifierpb.Change, error) { return nil, errProxyEra }

// ReadRecordToken fails: see errProxyEra.
func ReadRecordToken(context.Context, Querier) (string, error) { return "", errProxyEra }

// PruneApplied fails: see errProxyEra.
func PruneApplied(context.Context, Querier, uint64) (int64, error) { return 0, errProxyEra }

// IsVersionGap reports nothing: the extension's commit order has no gaps.
func IsVersionGap(code, schema, table string) bool { return false }
