package bench

// The latency regime. The issue asks for test hosts in network namespaces
// with `tc netem` delay. On this project's machines the kernel has no
// netem qdisc ("Error: Specified qdisc kind is unknown", no modules to
// load), so the bench adds the delay in user space instead: a TCP relay
// between two "hosts" that holds every chunk of bytes for a fixed one-way
// delay in each direction, in order. A round trip through it costs 2x the
// delay, like a netem delay on both ends of a veth pair. It needs no root.
//
// Which links are delayed (--delay D): the links between hosts of a
// replicated system, never the client's link to the system:
//
//	tashkent    agent -> certifier (each agent beside its replica)
//	streaming   standby -> primary (WAL streaming and its flush reports)
//	pgpool      pgpool -> every backend
//
// Standalone PostgreSQL has no such link and is not delayed.

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// relayChunkBytes bounds one read; a chunk is forwarded whole once its
// delay has passed.
const relayChunkBytes = 64 << 10

// relay accepts TCP connections on 127.0.0.1 and forwards each to target,
// delaying both directions by delay.
type relay struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startRelay(target string, delay time.Duration) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	r.wg.Go(r.accept)
	return r, nil
}

func (r *relay) port() int { return r.ln.Addr().(*net.TCPAddr).Port }

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		if !r.track(c, up) {
			return
		}
		r.wg.Go(func() { r.pipe(up, c) })
		r.wg.Go(func() { r.pipe(c, up) })
	}
}

// track records both ends so that close can end them; false once closed.
func (r *relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

type delayedChunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, each chunk no earlier than delay after it was
// read. Reading goes on while earlier chunks wait, so a stream of
// pipelined requests is delayed, not serialized.
func (r *relay) pipe(dst, src net.Conn) {
	queue := make(chan delayedChunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range queue {
			time.Sleep(time.Until(ch.due))
			if _, err := dst.Write(ch.data); err != nil {
				src.Close()
				for range queue { // drain so the reader never blocks
				}
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	buf := make([]byte, relayChunkBytes)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- delayedChunk{due: time.Now().Add(r.delay), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			break
		}
	}
	close(queue)
	<-done
}

// close stops accepting, ends every relayed connection and waits for the
// relay's goroutines.
func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
