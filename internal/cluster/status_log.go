package cluster

import (
	"fmt"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// logStatus reads a certifier's log and retention out of its Status.
func logStatus(rep *pb.StatusReply) *LogStatus {
	l := &LogStatus{Bytes: rep.LogBytes, FirstVersion: rep.LogFirstVersion}
	d := rep.GetRetention()
	if d == nil {
		return l
	}
	l.KeepFrom, l.LimitedBy, l.HeldBy = d.GetKeepFrom(), d.GetLimitedBy(), d.GetHeldBy()
	for _, r := range d.GetReplicas() {
		if r.GetAppliedVersion()+1 < l.FirstVersion {
			l.BehindLog = append(l.BehindLog, r.GetName())
		}
	}
	return l
}

// line is the log for people: its size, where it starts, and why.
func (l *LogStatus) line() string {
	s := fmt.Sprintf("log %s from version %d", formatBytes(int64(l.Bytes)), l.FirstVersion)
	switch l.LimitedBy {
	case "replica":
		return s + fmt.Sprintf(", kept for %s (at version %d)", l.HeldBy, l.KeepFrom-1)
	case "window":
		return s + ", kept for the certification window (--window-versions)"
	case "bytes":
		return s + ", cut at the size bound (--log-retention-bytes)"
	case "versions":
		return s + ", cut at the version bound (--log-retention-versions)"
	case "durable":
		return s + ", over its bounds: no replica holds the newer versions durably yet"
	case "none":
		return s + ", no replica needs older versions"
	}
	return s
}
