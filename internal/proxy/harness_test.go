package proxy_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/proxy"
)

// TestAProxyThatCannotStartFailsItsTestAtOnce: a test proxy whose Run
// returns before it serves (here: nothing listens at its replica's address)
// fails the test with Run's error, where Addr would wait forever.
func TestAProxyThatCannotStartFailsItsTestAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	p, err := proxy.New(proxy.Config{Name: "replica1", Listen: "127.0.0.1:0", BackendAddr: closed,
		Certifier: closed, AllowPasswordlessLogins: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, "") }()

	const limit = time.Minute
	start := time.Now()
	err = awaitProxy(p, done, limit)
	if err == nil || !strings.Contains(err.Error(), "stopped before it served") || !strings.Contains(err.Error(), closed) {
		t.Fatalf("awaitProxy = %v, want Run's error about %s", err, closed)
	}
	if took := time.Since(start); took >= limit {
		t.Fatalf("awaitProxy waited its whole limit (%v) for a proxy that had stopped", took)
	}
	select {
	case <-done: // put back for stopProxy
	default:
		t.Fatal("awaitProxy kept Run's error from stopProxy")
	}
}
