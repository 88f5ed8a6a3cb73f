package certifier

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// metrics are the Prometheus view of the service. All names start with
// tashkent_certifier_.
type metrics struct {
	replies         *prometheus.CounterVec
	replySeconds    prometheus.Histogram
	entriesPerSync  prometheus.Histogram
	flowControlWait prometheus.Counter
}

func newMetrics(s *Service, reg prometheus.Registerer) *metrics {
	m := &metrics{
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tashkent_certifier_replies_total",
			Help: "Certification replies sent, by decision and abort reason.",
		}, []string{"decision", "reason"}),
		replySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tashkent_certifier_reply_seconds",
			Help:    "Time from receiving a certification request to sending its reply (includes the fsync).",
			Buckets: ReplySecondsBuckets,
		}),
		entriesPerSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tashkent_certifier_entries_per_fsync",
			Help:    "Log entries made durable by one fsync (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		flowControlWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tashkent_certifier_flow_control_wait_seconds_total",
			Help: "Time requests were held because a replica that fell behind asked for a pause (summed over the held messages).",
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.replies, m.replySeconds, m.entriesPerSync, m.flowControlWait, s.replicas, retentionCollector{s})
	for _, g := range []struct {
		opts prometheus.GaugeOpts
		read func() float64
	}{
		{prometheus.GaugeOpts{Name: "tashkent_certifier_flow_control_pausing_replicas", Help: "Replicas that fell behind and ask for a pause (flow control)."},
			func() float64 { return float64(s.flow.pausingSessions()) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_version", Help: "Highest version assigned."},
			func() float64 { return float64(s.Version()) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_durable_version", Help: "Highest version on stable storage."},
			func() float64 { return float64(s.DurableVersion()) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_low_water_mark", Help: "Oldest snapshot version that can still be certified."},
			func() float64 { _, lwm := s.versions(); return float64(lwm) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_in_flight_requests", Help: "Requests certified and not yet answered."},
			func() float64 { return float64(s.inFlight.Load()) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_log_bytes", Help: "Bytes of log on disk."},
			func() float64 { return float64(s.log.SizeBytes()) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_stage_bytes", Help: "Bytes of streamed writesets staged and waiting for their decision (at most --stage-bytes-max), a group member's copies included."},
			func() float64 { return float64(s.staging.heldBytes()) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_missing_span_versions", Help: "Versions of a committed span this group member cannot write yet: it holds no stage of it and no member served it (Status missing_span_first..last); 0 otherwise."},
			func() float64 { return float64(s.order.missingSpanVersions()) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_log_first_version", Help: "Oldest version still in the log (retention): a replica further behind cannot catch up from this certifier."},
			func() float64 { return float64(s.log.FirstVersion()) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_leader", Help: "1 while this certifier certifies: a single certifier, or the group's leader."},
			func() float64 { leads, _ := s.order.certifies(); return boolGauge(leads) }},
		{prometheus.GaugeOpts{Name: "tashkent_certifier_term", Help: "The group's Raft term as this member knows it (0 for a single certifier)."},
			func() float64 { _, term := s.order.certifies(); return float64(term) }},
	} {
		reg.MustRegister(prometheus.NewGaugeFunc(g.opts, g.read))
	}
	return m
}

// ReplySecondsBuckets are tashkent_certifier_reply_seconds' buckets: four
// per doubling from 25 µs to about 400 ms, fine enough for the load
// generator to read a p99 off them within 10% (certbench reports the
// certifier's own latency from them beside the one its clients see).
var ReplySecondsBuckets = prometheus.ExponentialBuckets(25e-6, math.Pow(2, 0.25), 57)

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (m *metrics) observeFsync(entries int) { m.entriesPerSync.Observe(float64(entries)) }

func (m *metrics) observeReply(r *pb.CertifyReply, took time.Duration) {
	reason := "none"
	if r.Decision == pb.Decision_DECISION_ABORT {
		reason = r.AbortReason.String()
	}
	m.replies.WithLabelValues(r.Decision.String(), reason).Inc()
	m.replySeconds.Observe(took.Seconds())
}
