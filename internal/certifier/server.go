package certifier

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certclient"
	"github.com/tashkent-db/tashkent/internal/dashboard"
	"github.com/tashkent-db/tashkent/internal/grpcbuf"
)

// grpcMessageBytesMax lets a writeset at WritesetBytesMax through with room
// for the request around it, and anything the client sends
// (certclient.DefaultMessageBytesMax), so the limit is reported by
// certification (a clear abort) rather than by the transport, which would
// break the stream.
func grpcMessageBytesMax(l Limits) int {
	return max(2*l.WritesetBytesMax+(1<<20), certclient.DefaultMessageBytesMax)
}

// HTTP/2 flow-control windows. Every replica stream carries every committed
// entry, so the defaults (64 KiB, grown by BDP probing) throttle delivery
// under load; these let a few milliseconds of entries be in flight.
const (
	streamWindowBytes = 8 << 20
	connWindowBytes   = 32 << 20
)

// Server is a Service listening on gRPC, with metrics on HTTP.
type Server struct {
	Service *Service
	grpc    *grpc.Server
	metrics *http.Server
	addr    net.Addr
	// dashboard serves the page and its JSON beside /metrics
	// (internal/dashboard); nil without a metrics listener.
	dashboard *dashboard.Viewer
}

// newDashboard is the certifier's view of the cluster: it answers for
// itself in process, and knows its group's members.
func (s *Server) newDashboard(cfg Config) *dashboard.Viewer {
	self, servedBy := s.addr.String(), "certifier"
	var dial []grpc.DialOption
	if g := cfg.Group; g != nil {
		self, servedBy, dial = g.AddrOf(g.ID()), fmt.Sprintf("certifier member %d", g.ID()), g.DialOptions()
	}
	return dashboard.NewViewer(dashboard.Config{
		ServedBy: servedBy,
		Self:     func() any { return dashboard.MemberFromStatus(self, s.Service.StatusNow()) },
		Certifiers: func() []string {
			addrs := []string{self}
			if g := cfg.Group; g != nil {
				for _, addr := range g.Members() {
					addrs = append(addrs, addr)
				}
			}
			return addrs
		},
		LocalCertifier: s.Service.StatusNow, LocalCertifierAddr: self,
		DialOptions: dial,
	})
}

// Listen opens the service in cfg.DataDir and starts serving gRPC on
// listenAddr and Prometheus metrics on metricsAddr (empty: no metrics).
// extra are further gRPC server options: the certifier TLS credentials
// (grpctls.Files.ServerOptions), which then cover Certify, Fetch, Status
// and the group members' Raft stream alike.
func Listen(cfg Config, listenAddr, metricsAddr string, extra ...grpc.ServerOption) (*Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	cfg.Registry = reg
	cfg = cfg.withDefaults()
	svc, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		svc.Close()
		return nil, fmt.Errorf("certifier listen on %s: %w", listenAddr, err)
	}
	size := grpcMessageBytesMax(cfg.Limits)
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(size), grpc.MaxSendMsgSize(size),
		grpc.InitialWindowSize(streamWindowBytes), grpc.InitialConnWindowSize(connWindowBytes),
		experimental.BufferPool(grpcbuf.Shared), grpc.ForceServerCodecV2(grpcbuf.Codec{})}, extra...)...) // buffers not zeroed: see grpcbuf
	pb.RegisterCertifierServer(g, svc)
	if cfg.Group != nil {
		pb.RegisterRaftServer(g, cfg.Group.RaftServer())
		pb.RegisterCertifierGroupServer(g, cfg.Group.AdminServer())
	}
	srv := &Server{Service: svc, grpc: g, addr: ln.Addr()}
	go func() {
		if err := g.Serve(ln); err != nil {
			cfg.Logger.Error("certifier gRPC server stopped", "err", err)
		}
	}()
	if metricsAddr != "" {
		mln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			srv.Close()
			return nil, fmt.Errorf("metrics listen on %s: %w", metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv.dashboard = srv.newDashboard(cfg)
		srv.dashboard.Register(mux)
		srv.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.metrics.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Logger.Error("metrics server stopped", "err", err)
			}
		}()
	}
	return srv, nil
}

// Addr is the gRPC listening address.
func (s *Server) Addr() net.Addr { return s.addr }

// Close stops serving and closes the log.
func (s *Server) Close() error {
	if s.metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.metrics.Shutdown(ctx)
		cancel()
		s.dashboard.Close()
	}
	// Stop rather than GracefulStop: streams wait on durability and would
	// hold a graceful stop up; their clients re-send after reconnecting.
	s.grpc.Stop()
	return s.Service.Close()
}
