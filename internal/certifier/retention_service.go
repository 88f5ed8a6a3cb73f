package certifier

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/fsutil"
)

// The service's side of log retention (the rule is retention.go): every
// RetentionPolicy.Interval the orderer decides (a single certifier; a
// group's leader, which replicates the decision through Raft), and every
// process that takes or applies a decision removes the log segments below
// it (applyRetention).

// retentionFileName is a single certifier's last decision, in its data
// directory: the replicas it waits for survive a restart.
const retentionFileName = "retention.pb"

// retentionLoop runs the rule until the service stops.
func (s *Service) retentionLoop() {
	defer s.done.Done()
	tick := time.NewTicker(s.cfg.Retention.Interval)
	defer tick.Stop()
	for {
		select {
		case now := <-tick.C:
			s.order.retain(now)
		case <-s.stop:
			return
		}
	}
}

// retentionInput gathers what the rule decides from now; since is when
// this process began to hear from replicas, keepAtLeastFrom the floor
// (retentionInput).
func (s *Service) retentionInput(now, since time.Time, keepAtLeastFrom uint64) retentionInput {
	return retentionInput{
		policy: s.cfg.Retention, now: now, since: since,
		last: s.log.LastVersion(), segments: s.log.Segments(),
		keepAtLeastFrom: keepAtLeastFrom, replicas: durableProgress(s.replicas.progress(), s.DurableVersion()),
	}
}

// durableProgress caps what the replicas report at the durable version:
// a replica that took entries before they were durable (early.go) may
// hold versions that fail, which hold nothing of the log.
func durableProgress(replicas []replicaProgress, durable uint64) []replicaProgress {
	for i := range replicas {
		replicas[i].applied = min(replicas[i].applied, durable)
	}
	return replicas
}

// applyRetention removes the log segments wholly below the decision's
// keep_from (trimLogBefore) and makes the decision the one Status and the
// metrics show. A move of the log's first version is logged, with who
// holds the log.
func (s *Service) applyRetention(d *pb.LogRetention) {
	before := s.log.FirstVersion()
	if err := s.trimLogBefore(d.GetKeepFrom()); err != nil {
		s.fail(fmt.Errorf("log retention: remove the segments before version %d: %w", d.GetKeepFrom(), err))
		return
	}
	s.retention.Store(d)
	if after := s.log.FirstVersion(); after != before {
		s.cfg.Logger.Info("log retention: removed old log segments", "first_version", after, "keep_from", d.GetKeepFrom(),
			"limited_by", d.GetLimitedBy(), "held_by", d.GetHeldBy(), "log_bytes", s.log.SizeBytes())
		s.warnBehindLog(d, after)
	}
}

// warnBehindLog names the replicas the log no longer holds enough for:
// each must be rebuilt from a peer (its agent halts when it next opens a
// session, and a supervisor rebuilds it).
func (s *Service) warnBehindLog(d *pb.LogRetention, first uint64) {
	for _, r := range d.GetReplicas() {
		if r.GetAppliedVersion()+1 < first {
			s.cfg.Logger.Warn("log retention: the log no longer holds the versions a replica needs; it must be rebuilt from a peer (state transfer)",
				"replica", r.GetName(), "replica_version", r.GetAppliedVersion(), "first_version", first, "limited_by", d.GetLimitedBy())
		}
	}
}

// loadRetention reads a single certifier's last decision, nil if it has
// none yet.
func loadRetention(dir string) (*pb.LogRetention, error) {
	b, err := os.ReadFile(filepath.Join(dir, retentionFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the log retention record: %w", err)
	}
	d := &pb.LogRetention{}
	if err := proto.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("read the log retention record %s: %w", filepath.Join(dir, retentionFileName), err)
	}
	return d, nil
}

// saveRetention replaces a single certifier's decision on disk, atomically:
// a crash leaves the old one or the new one, either of which holds the log
// at least as far back as the log now reaches.
func saveRetention(dir string, d *pb.LogRetention, sync bool) error {
	b, err := proto.Marshal(d)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomically(dir, retentionFileName, b, sync); err != nil {
		return fmt.Errorf("write the log retention record %s: %w", filepath.Join(dir, retentionFileName), err)
	}
	return nil
}

// sameProgress reports whether two decisions would read back the same.
func sameProgress(a, b *pb.LogRetention) bool {
	if a == nil || b == nil || a.GetKeepFrom() != b.GetKeepFrom() || len(a.GetReplicas()) != len(b.GetReplicas()) {
		return false
	}
	for i, r := range a.GetReplicas() {
		o := b.GetReplicas()[i]
		if r.GetName() != o.GetName() || r.GetAppliedVersion() != o.GetAppliedVersion() || r.GetHeardUnixMs() != o.GetHeardUnixMs() {
			return false
		}
	}
	return true
}

var (
	replicaAppliedDesc = prometheus.NewDesc("tashkent_certifier_replica_applied_version",
		"The replica's durable version as it last reported it (replicas that report it; log retention waits for them).",
		[]string{"replica"}, nil)
	logHeldByDesc = prometheus.NewDesc("tashkent_certifier_log_held_by",
		"1 for the replica whose progress sets the oldest version the log keeps (none while no replica does: a bound or nothing).",
		[]string{"replica"}, nil)
)

// retentionCollector collects the per-replica retention metrics.
type retentionCollector struct{ s *Service }

func (c retentionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- replicaAppliedDesc
	ch <- logHeldByDesc
}

func (c retentionCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.s.replicas.list() {
		if r.HeardUnixMs != 0 {
			ch <- prometheus.MustNewConstMetric(replicaAppliedDesc, prometheus.GaugeValue, float64(r.AppliedVersion), r.Name)
		}
	}
	if d := c.s.retention.Load(); d.GetHeldBy() != "" {
		ch <- prometheus.MustNewConstMetric(logHeldByDesc, prometheus.GaugeValue, 1, d.GetHeldBy())
	}
}
