// Package certbench drives a certifier over its real gRPC API with synthetic
// writesets, no PostgreSQL involved, and reports throughput, latency and
// group commit. It is the certifier's load generator; the certifier's
// figures in docs/BENCHMARKS.md come from it.
//
// Each client is a goroutine that certifies one writeset at a time: in a
// closed loop, or, paced (Config.Rate), one request per ticket of a single
// pacer (pacer.go), latency measured from the ticket's due time so that a
// stall is not hidden (no coordinated omission). Clients are spread over a
// few replica streams, as agents' would be, and each request's start
// version is its replica's delivered version, as an agent's would be.
//
// The generator shares the machine's cores with the certifier, so besides
// the latency its clients see it reports its own part of it (late p99: due
// time to call) and, when it can read the certifier's metrics, the
// certifier's own latency from receiving a request to answering it
// (serverlatency.go).
package certbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/ctxtime"
	"github.com/tashkent-db/tashkent/internal/grpctls"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Config describes one benchmark run.
type Config struct {
	Target   string
	Clients  []int         // client counts, one step each
	Duration time.Duration // per step
	Warmup   time.Duration // per step, not measured
	Replicas int           // streams the clients are spread over
	Keys     int           // rows per writeset
	RowBytes int           // bytes of row values per change
	// KeySpace is the number of distinct rows; 0 means every key is unique
	// (no conflicts, as in the paper's AllUpdates).
	KeySpace int
	// Rate, when > 0, paces all clients together at this many requests per
	// second instead of a closed loop.
	Rate float64
	// MetricsURL, when set, is the certifier's Prometheus endpoint: its own
	// reply latency is then reported beside the clients' (serverlatency.go).
	MetricsURL string
	// DialOptions dial the certifier: its TLS credentials (grpctls,
	// --certifier-tls-*); none: plaintext.
	DialOptions []grpc.DialOption
}

// benchGCPercent is GOGC while the load generator runs.
const benchGCPercent = 400

// Result is one step's figures.
type Result struct {
	Clients        int
	Certifications int
	Aborts         int
	PerSecond      float64
	P50, P99       time.Duration // client-observed: from the due time (paced) or the call
	// LateP99 is the generator's own delay, from a request's due time to
	// its call, at the 99th percentile: included in P99, not the certifier's.
	LateP99 time.Duration
	// ServerP50 and ServerP99 are the certifier's own latency, from
	// receiving a request to handing its reply to gRPC (Config.MetricsURL;
	// 0 without it).
	ServerP50, ServerP99 ServerLatency
	EntriesPerFsync      float64
	FsyncTime            time.Duration // average time of one log write + fsync
}

// Run runs every step and writes a table to out.
func Run(ctx context.Context, cfg Config, out io.Writer) ([]Result, error) {
	// The load generator shares the machine with the certifier it measures:
	// collecting its short-lived garbage less often leaves more CPU to the
	// certifier (its heap is a few MB; four times that is nothing).
	defer debug.SetGCPercent(debug.SetGCPercent(benchGCPercent))
	fmt.Fprintf(out, "certifier %s: %d keys/writeset, %d replica streams, %s per step", cfg.Target, cfg.Keys, cfg.Replicas, cfg.Duration)
	if cfg.Rate > 0 {
		fmt.Fprintf(out, ", paced at %.0f/s", cfg.Rate)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "%8s %12s %10s %10s %10s %10s %10s %8s %14s %10s\n", "clients", "cert/s", "p50", "p99", "late p99", "srv p50", "srv p99", "abort%", "entries/fsync", "fsync")
	var results []Result
	defer stages.flush()
	for _, n := range cfg.Clients {
		r, err := runStep(ctx, cfg, n)
		if err != nil {
			return results, err
		}
		results = append(results, r)
		fmt.Fprintf(out, "%8d %12.0f %10s %10s %10s %10s %10s %8.2f %14.1f %10s\n", r.Clients, r.PerSecond,
			r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), lateColumn(cfg, r),
			r.ServerP50, r.ServerP99,
			100*float64(r.Aborts)/float64(max(1, r.Certifications)), r.EntriesPerFsync, r.FsyncTime.Round(time.Microsecond))
	}
	return results, nil
}

type replicaStream struct {
	client  *certclient.Client
	version atomic.Uint64
}

func runStep(ctx context.Context, cfg Config, clients int) (Result, error) {
	streams, err := openStreams(ctx, cfg, clients)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		for _, s := range streams {
			s.client.Close()
		}
	}()
	stepCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var window measureWindow
	recs := make([]recorder, clients)
	var wg sync.WaitGroup
	var failure atomic.Pointer[error]
	var tickets chan time.Time
	if cfg.Rate > 0 {
		tickets = make(chan time.Time, ticketsMax)
		go pace(stepCtx, time.Now(), time.Duration(float64(time.Second)/cfg.Rate), tickets)
	}
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := drive(stepCtx, cfg, i, streams[i%len(streams)], tickets, &window, &recs[i]); err != nil && stepCtx.Err() == nil {
				failure.CompareAndSwap(nil, &err)
				cancel()
			}
		}()
	}
	status := streams[0].client.API()
	_ = ctxtime.Sleep(stepCtx, cfg.Warmup)
	before, err := status.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return Result{}, err
	}
	serverBefore, err := scrapeIf(ctx, cfg.MetricsURL)
	if err != nil {
		return Result{}, err
	}
	start := window.open()
	_ = ctxtime.Sleep(stepCtx, cfg.Duration)
	elapsed := window.close().Sub(start)
	after, err := status.Status(ctx, &pb.StatusRequest{})
	serverAfter, serr := scrapeIf(ctx, cfg.MetricsURL)
	waitOrCancel(&wg, drainTimeout, cancel)
	if p := failure.Load(); p != nil {
		return Result{}, *p
	}
	if err = errors.Join(err, serr); err != nil {
		return Result{}, err
	}
	r := summarize(clients, recs, elapsed, before, after)
	server := serverAfter.minus(serverBefore)
	r.ServerP50, r.ServerP99 = server.quantile(0.50), server.quantile(0.99)
	return r, nil
}

// scrapeIf scrapes the certifier's reply latency when url is set.
func scrapeIf(ctx context.Context, url string) (histogram, error) {
	if url == "" {
		return histogram{}, nil
	}
	return scrapeReplySeconds(ctx, url)
}

// openStreams opens the replica streams at the certifier's durable version:
// the bench does not replay history.
func openStreams(ctx context.Context, cfg Config, clients int) ([]*replicaStream, error) {
	durable, err := durableVersion(ctx, cfg.Target, cfg.DialOptions)
	if err != nil {
		return nil, err
	}
	n := max(1, min(cfg.Replicas, clients))
	streams := make([]*replicaStream, n)
	for i := range streams {
		s := &replicaStream{}
		s.version.Store(durable)
		c, err := certclient.New(certclient.Options{
			Target:         cfg.Target,
			Replica:        "bench-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
			ReplicaVersion: durable,
			Push:           true, // as agents ask
			DialOptions:    cfg.DialOptions,
			OnEntries: func(entries []logentry.Entry, _ uint64) error {
				if len(entries) > 0 {
					s.version.Store(entries[len(entries)-1].Version)
				}
				return nil
			},
		})
		if err != nil {
			return nil, err
		}
		s.client = c
		streams[i] = s
	}
	return streams, nil
}

func durableVersion(ctx context.Context, target string, dial []grpc.DialOption) (uint64, error) {
	c, err := certclient.New(certclient.Options{Target: target, Replica: "bench-status", DialOptions: dial})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.API().Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return 0, fmt.Errorf("certifier status at %s: %w", target, grpctls.HintPlaintext(err))
	}
	return st.DurableVersion, nil
}

// drive runs one client: a closed loop, or, paced, one request per ticket
// it takes (pacer.go), its latency measured from the ticket's due time.
func drive(ctx context.Context, cfg Config, id int, s *replicaStream, tickets <-chan time.Time, window *measureWindow, rec *recorder) error {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
	ws := newWritesetEncoder(cfg, id)
	origin := fmt.Sprintf("bench-client-%d-%d", id, rng.Uint64())
	for seq := uint64(1); ctx.Err() == nil; seq++ {
		due := time.Now()
		if tickets != nil {
			var ok bool
			if due, ok = <-tickets; !ok {
				return nil
			}
		}
		if window.past(due) {
			return nil // the step is over; what was due in it has been sent
		}
		req := &pb.CertifyRequestEncoded{
			Txn:          &pb.TxnID{Origin: origin, Seq: seq},
			StartVersion: s.version.Load(),
			Writeset:     ws.encode(rng, seq),
		}
		called := time.Now()
		reply, err := s.client.CertifyEncoded(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if window.holds(due) {
			returned := time.Now()
			rec.add(returned.Sub(due), called.Sub(due), reply.Decision != pb.Decision_DECISION_COMMIT)
			if stages != nil {
				stages.add(origin, seq, due, called, returned)
			}
		}
	}
	return nil
}

// measureWindow is the measured part of a step. A request belongs to it by
// its due time (its send time in a closed loop), not by when its reply
// comes: requests due inside the window are waited for after it closes, so
// a stall at the end of a step shows in its latencies instead of being cut
// off.
type measureWindow struct {
	start, end atomic.Int64 // Unix nanoseconds; 0 until opened, closed
}

func (w *measureWindow) open() time.Time {
	now := time.Now()
	w.start.Store(now.UnixNano())
	return now
}

func (w *measureWindow) close() time.Time {
	now := time.Now()
	w.end.Store(now.UnixNano())
	return now
}

// holds reports whether a request due at due is measured.
func (w *measureWindow) holds(due time.Time) bool {
	start, end := w.start.Load(), w.end.Load()
	return start != 0 && due.UnixNano() >= start && (end == 0 || due.UnixNano() < end)
}

// past reports whether the window closed before due.
func (w *measureWindow) past(due time.Time) bool {
	end := w.end.Load()
	return end != 0 && due.UnixNano() >= end
}

// drainTimeout bounds the wait for the requests due inside a step once it
// ended; a certifier that stopped answering fails the step instead.
const drainTimeout = 30 * time.Second

// waitOrCancel waits for the clients to finish what was due in the step,
// and cancels them if that takes longer than timeout.
func waitOrCancel(wg *sync.WaitGroup, timeout time.Duration, cancel context.CancelFunc) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		cancel()
		<-done
	}
	cancel()
}

// recorder is one client's measurements.
type recorder struct {
	latency []time.Duration // due (or sent, in a closed loop) to reply
	late    []time.Duration // due to the call: the generator's own delay
	aborts  int
}

func (r *recorder) add(latency, late time.Duration, aborted bool) {
	r.latency = append(r.latency, latency)
	r.late = append(r.late, late)
	if aborted {
		r.aborts++
	}
}

// writesetEncoder builds a client's synthetic writesets directly as an
// encoded Writeset (what CertifyEncoded sends), so that the load generator,
// which shares the machine with the certifier, spends little on each
// request: one allocation, a few appends.
type writesetEncoder struct {
	cfg    Config
	client int
	row    []byte
	key    []byte // scratch
	size   int    // last writeset's size, to size the next one
}

func newWritesetEncoder(cfg Config, client int) *writesetEncoder {
	return &writesetEncoder{cfg: cfg, client: client, row: make([]byte, cfg.RowBytes)}
}

// benchTable is the table every synthetic change writes.
const benchTable = "public.bench"

// encode returns a new encoded writeset of cfg.Keys upserts: keys unique
// to (client, seq, change), or drawn from cfg.KeySpace.
func (w *writesetEncoder) encode(rng *rand.Rand, seq uint64) []byte {
	b := make([]byte, 0, w.size)
	for k := range w.cfg.Keys {
		w.key = w.key[:0]
		if w.cfg.KeySpace > 0 {
			w.key = strconv.AppendInt(w.key, int64(rng.IntN(w.cfg.KeySpace)), 10)
		} else {
			w.key = strconv.AppendInt(w.key, int64(w.client), 10)
			w.key = append(w.key, '.')
			w.key = strconv.AppendUint(w.key, seq, 10)
			w.key = append(w.key, '.')
			w.key = strconv.AppendInt(w.key, int64(k), 10)
		}
		b = appendUpsert(b, w.key, w.row)
	}
	w.size = len(b) + 16
	return b
}

// appendUpsert appends one Change (field 1 of Writeset) to an encoded
// Writeset: table = 1, op = 2, key = 3, row = 4.
func appendUpsert(b, key, row []byte) []byte {
	size := protowire.SizeTag(1) + protowire.SizeBytes(len(benchTable)) +
		protowire.SizeTag(2) + protowire.SizeVarint(uint64(pb.Op_OP_UPSERT)) +
		protowire.SizeTag(3) + protowire.SizeBytes(len(key))
	if len(row) > 0 {
		size += protowire.SizeTag(4) + protowire.SizeBytes(len(row))
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, benchTable)
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(pb.Op_OP_UPSERT))
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, key)
	if len(row) > 0 {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, row)
	}
	return b
}

func summarize(clients int, recs []recorder, elapsed time.Duration, before, after *pb.StatusReply) Result {
	var all, late []time.Duration
	r := Result{Clients: clients}
	for i := range recs {
		all = append(all, recs[i].latency...)
		late = append(late, recs[i].late...)
		r.Aborts += recs[i].aborts
	}
	r.Certifications = len(all)
	r.PerSecond = float64(len(all)) / elapsed.Seconds()
	r.P50, r.P99 = quantile(all, 0.50), quantile(all, 0.99)
	r.LateP99 = quantile(late, 0.99)
	committed := (after.Certifications - after.Aborts) - (before.Certifications - before.Aborts)
	if fsyncs := after.Fsyncs - before.Fsyncs; fsyncs > 0 {
		r.EntriesPerFsync = float64(committed) / float64(fsyncs)
		r.FsyncTime = time.Duration((after.AppendSecondsTotal - before.AppendSecondsTotal) / float64(fsyncs) * float64(time.Second))
	}
	return r
}

// lateColumn shows the generator's lateness, which only a paced step has.
func lateColumn(cfg Config, r Result) string {
	if cfg.Rate <= 0 {
		return "-"
	}
	return r.LateP99.Round(time.Microsecond).String()
}

// quantile sorts d and returns its q-quantile (0 when empty).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*q))]
}
