package sim

import (
	"fmt"
	"strings"
)

// traceArgs names the three numbers each trace step carries, for the
// readable trace of a replayed seed (-seed=N -v). Steps not listed print
// their numbers bare.
var traceArgs = map[string][3]string{
	"ack":                   {"txn_seq", "version", "replica"},
	"agent-crash":           {"replica", "version", ""},
	"applied":               {"replica", "up_to_version", "entries"},
	"apply-cancelled":       {"replica", "first_version", "last_version"},
	"cannot-rewind":         {"replica", "version", "common_version"},
	"caught-up":             {"replica", "version", ""},
	"certifier-crash":       {"lost_pending", "lost_unsynced", "durable"},
	"certifier-recreated":   {"lineage", "", ""},
	"certifier-up":          {"incarnation", "log_last", "generation"},
	"certify":               {"txn_seq", "version", "abort_reason"},
	"committed-at-crash":    {"replica", "version", ""},
	"connect":               {"replica", "stream", "from_version"},
	"database-up":           {"replica", "version", ""},
	"delivered":             {"replica", "up_to_version", "round"},
	"drop":                  {"replica", "stream", "msg_seq"},
	"duplicate":             {"replica", "stream", "msg_seq"},
	"durable":               {"version", "", ""},
	"early-stop":            {"version", "durable", ""},
	"entry-out-of-sequence": {"replica", "delivered", ""},
	"halted":                {"replica", "version", ""},
	"partition":             {"replica", "cut", ""},
	"partition-healed":      {"replica", "", ""},
	"replica-crash":         {"replica", "version_kept", "versions_lost"},
	"rebuilt":               {"replica", "donor", "version"},
	"rebuilt-without-donor": {"replica", "", ""},
	"replica-up":            {"replica", "version", ""},
	"rewind-asked":          {"replica", "common_version", "version"},
	"rewound":               {"replica", "from_version", "to_version"},
	"run-recorded":          {"replica", "epoch", "first_version"},
	"stream-broken":         {"replica", "stream", ""},
	"stream-awaits-durable": {"replica", "stream", "from_version"},
	"stream-open":           {"replica", "stream", "from_version"},
	"stream-refused":        {"replica", "stream", "from_version"},
	"txn-end":               {"txn_seq", "status", "replica"},
	"versions-failed":       {"above_version", "epoch", ""},
	"violation":             {"index", "", ""},
}

// traceLine formats one step of the readable trace.
func traceLine(now int64, kind string, vals [3]uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6d %-22s", now, kind)
	names, named := traceArgs[kind]
	for i, v := range vals {
		switch {
		case !named:
			fmt.Fprintf(&b, " %d", v)
		case names[i] != "":
			fmt.Fprintf(&b, " %s=%d", names[i], v)
		}
	}
	return b.String()
}
