package proxy

// Client authentication and TLS at the proxy (docs/COMPATIBILITY.md,
// "Authentication and TLS").
//
// AuthRelay (the default) relays PostgreSQL's own authentication to the
// client. AuthSCRAM makes the proxy verify SCRAM-SHA-256 itself
// (pgwire/scram.go) against the verifiers PostgreSQL stores in
// pg_authid.rolpassword, read over the proxy's own admin connection, or
// against a user list file when --auth-file is given; it then authenticates
// to PostgreSQL with the client's SCRAM ClientKey, or not at all where
// PostgreSQL trusts its connection (pgwire/scram_backend.go).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/pgwire"
)

// AuthMode is who authenticates clients.
type AuthMode string

const (
	// AuthRelay: PostgreSQL authenticates the client through the proxy.
	AuthRelay AuthMode = "relay"
	// AuthSCRAM: the proxy verifies SCRAM-SHA-256 itself.
	AuthSCRAM AuthMode = "scram"
)

// pgAuthid looks verifiers up in pg_authid over one admin connection of
// its own, opened on first use and again after an error.
type pgAuthid struct {
	p    *Proxy
	mu   sync.Mutex
	conn *pgx.Conn
}

// lookupSQL returns the verifier of a role that may log in now, as
// PostgreSQL checks rolcanlogin and rolvaliduntil.
const lookupSQL = `SELECT rolpassword FROM pg_authid
	WHERE rolname = $1 AND rolcanlogin AND (rolvaliduntil IS NULL OR rolvaliduntil > now())`

func (a *pgAuthid) lookup(ctx context.Context, user string) (string, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil || a.conn.IsClosed() {
		conn, err := a.p.connectAdmin(ctx)
		if err != nil {
			return "", false, err
		}
		a.conn = conn
	}
	var v *string
	err := a.conn.QueryRow(ctx, lookupSQL, user).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		a.conn.Close(context.Background())
		a.conn = nil
		return "", false, err
	case v == nil:
		return "", false, nil
	}
	return *v, true, nil
}

func (a *pgAuthid) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil {
		a.conn.Close(context.Background())
		a.conn = nil
	}
}

// userListBytesMax bounds the user list file.
const userListBytesMax = 16 << 20

// LoadUserList reads a user list file in PgBouncer's userlist.txt form:
// one `"user" "SCRAM-SHA-256$..."` per line, # comments and blank lines
// ignored. The verifiers are the strings pg_authid holds (SELECT rolname,
// rolpassword FROM pg_authid).
func LoadUserList(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("proxy: auth file: %w", err)
	}
	defer f.Close()
	users := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, userListBytesMax)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields, err := quotedFields(line)
		if err != nil || len(fields) != 2 {
			return nil, fmt.Errorf("proxy: auth file %s line %d: want \"user\" \"verifier\"", path, n)
		}
		if _, err := pgwire.ParseSCRAMVerifier(fields[1]); err != nil {
			return nil, fmt.Errorf("proxy: auth file %s line %d (user %q): %w", path, n, fields[0], err)
		}
		users[fields[0]] = fields[1]
	}
	return users, sc.Err()
}

// quotedFields splits `"a" "b"` into a, b; a doubled quote stands for one.
func quotedFields(line string) ([]string, error) {
	var out []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		if line[0] != '"' {
			return nil, errors.New("field not quoted")
		}
		var b strings.Builder
		i := 1
		for ; ; i++ {
			if i >= len(line) {
				return nil, errors.New("unterminated quote")
			}
			if line[i] == '"' {
				if i+1 < len(line) && line[i+1] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			b.WriteByte(line[i])
		}
		out = append(out, b.String())
		line = line[i+1:]
	}
	return out, nil
}

// clientAuth returns the pgwire settings for the configured mode, and a
// function that releases what it holds.
func (p *Proxy) clientAuth() (pgwire.SCRAMLookup, func(), error) {
	switch p.cfg.Auth {
	case AuthRelay:
		return nil, func() {}, nil
	case AuthSCRAM:
	default:
		return nil, nil, fmt.Errorf("proxy: auth must be %q or %q, not %q", AuthRelay, AuthSCRAM, p.cfg.Auth)
	}
	if p.cfg.AuthFile != "" {
		users, err := LoadUserList(p.cfg.AuthFile)
		if err != nil {
			return nil, nil, err
		}
		return func(_ context.Context, user string) (string, bool, error) {
			v, ok := users[user]
			return v, ok, nil
		}, func() {}, nil
	}
	a := &pgAuthid{p: p}
	return a.lookup, a.close, nil
}
