package certifier

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// statsSamples is how many one-second samples the certification rate is
// averaged over.
const statsSamples = 5

type rateSample struct {
	at             time.Time
	certifications uint64
}

// stats are the figures Status reports.
type stats struct {
	certifications atomic.Uint64
	aborts         atomic.Uint64
	fsyncs         atomic.Uint64
	loggedEntries  atomic.Uint64
	appendNanos    atomic.Int64 // time spent writing and syncing the log

	mu      sync.Mutex
	samples []rateSample
}

func newStats() *stats { return &stats{} }

func (st *stats) recordFsync(entries int, took time.Duration) {
	st.fsyncs.Add(1)
	st.loggedEntries.Add(uint64(entries))
	st.appendNanos.Add(int64(took))
}

func (st *stats) sample(now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.samples = append(st.samples, rateSample{at: now, certifications: st.certifications.Load()})
	if len(st.samples) > statsSamples+1 {
		st.samples = st.samples[1:]
	}
}

func (st *stats) rate() float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.samples) < 2 {
		return 0
	}
	first, last := st.samples[0], st.samples[len(st.samples)-1]
	secs := last.at.Sub(first.at).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(last.certifications-first.certifications) / secs
}

func (s *Service) sampleLoop() {
	defer s.done.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	s.stats.sample(time.Now())
	for {
		select {
		case now := <-tick.C:
			s.stats.sample(now)
			for _, txn := range s.staging.expire(now) {
				s.order.discardCopies(&pb.TxnID{Origin: txn.Origin, Seq: txn.Seq})
			}
		case <-s.stop:
			return
		}
	}
}

// Status reports the certifier's figures.
func (s *Service) Status(context.Context, *pb.StatusRequest) (*pb.StatusReply, error) {
	return s.StatusNow(), nil
}

// StatusNow is Status without the RPC.
func (s *Service) StatusNow() *pb.StatusReply {
	version, lwm := s.versions()
	st := s.stats
	certs, aborts, fsyncs, entries := st.certifications.Load(), st.aborts.Load(), st.fsyncs.Load(), st.loggedEntries.Load()
	reply := &pb.StatusReply{
		Version: version, DurableVersion: s.DurableVersion(), LowWaterMark: lwm,
		CertificationsPerSecond: st.rate(), Certifications: certs, Aborts: aborts, Fsyncs: fsyncs,
		Pid: pid(), LogBytes: uint64(s.log.SizeBytes()), LogFirstVersion: s.log.FirstVersion(),
		Replicas: s.replicas.list(), Retention: s.retention.Load(),
	}
	if fsyncs > 0 {
		reply.EntriesPerFsync = float64(entries) / float64(fsyncs)
		reply.AppendSecondsTotal = time.Duration(st.appendNanos.Load()).Seconds()
	}
	if certs > 0 {
		reply.AbortRate = float64(aborts) / float64(certs)
	}
	s.order.describe(reply)
	return reply
}
