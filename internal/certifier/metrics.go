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
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(m.replies, m.replySeconds, m.entriesPerSync, m.flowControlWait,
		gauge("tashkent_certifier_flow_control_pausing_replicas", "Replicas that fell behind and ask for a pause (flow control).", func() float64 { return float64(s.flow.pausingSessions()) }),
		gauge("tashkent_certifier_version", "Highest version assigned.", func() float64 { return float64(s.Version()) }),
		gauge("tashkent_certifier_durable_version", "Highest version on stable storage.", func() float64 { return float64(s.DurableVersion()) }),
		gauge("tashkent_certifier_low_water_mark", "Oldest snapshot version that can still be certified.", func() float64 { _, lwm := s.versions(); return float64(lwm) }),
		gauge("tashkent_certifier_in_flight_requests", "Requests certified and not yet answered.", func() float64 { return float64(s.inFlight.Load()) }),
		gauge("tashkent_certifier_log_bytes", "Bytes of log on disk.", func() float64 { return float64(s.log.SizeBytes()) }),
	)
	return m
}

// ReplySecondsBuckets are tashkent_certifier_reply_seconds' buckets: four
// per doubling from 25 µs to about 400 ms, fine enough for the load
// generator to read a p99 off them within 10% (certbench reports the
// certifier's own latency from them beside the one its clients see).
var ReplySecondsBuckets = prometheus.ExponentialBuckets(25e-6, math.Pow(2, 0.25), 57)

func (m *metrics) observeFsync(entries int) { m.entriesPerSync.Observe(float64(entries)) }

func (m *metrics) observeReply(r *pb.CertifyReply, took time.Duration) {
	reason := "none"
	if r.Decision == pb.Decision_DECISION_ABORT {
		reason = r.AbortReason.String()
	}
	m.replies.WithLabelValues(r.Decision.String(), reason).Inc()
	m.replySeconds.Observe(took.Seconds())
}
