package pgwire

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Config.Admit refuses a client by its startup parameters before anything
// else happens: the backend here is a closed port, so a client that got
// past Admit would get 08006 (the proxy could not connect), and one that
// Admit refused gets Admit's error. Clients Admit lets through are served.
func TestAdmitRefusesBeforeTheBackendIsDialed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := ln.Addr().String()
	ln.Close()
	var mu sync.Mutex
	var asked []string
	p := startProxy(t, Config{BackendAddr: closedPort, Admit: func(params map[string]string) *pgproto3.ErrorResponse {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, params["application_name"])
		if params["application_name"] == "refuse-me" {
			return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P03", Message: "not now"}
		}
		return nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, tc := range []struct{ app, code string }{{"refuse-me", "57P03"}, {"let-me-in", "08006"}} {
		cfg, err := pgx.ParseConfig(p.url("postgres", ""))
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["application_name"] = tc.app
		_, err = pgx.ConnectConfig(ctx, cfg)
		if got := pgCode(err); got != tc.code {
			t.Errorf("client %s: %v (SQLSTATE %q), want %s", tc.app, err, got, tc.code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) < 2 {
		t.Errorf("Admit was asked for %q, want both clients", asked)
	}
}
