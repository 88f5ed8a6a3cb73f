// Package pgwire is the PostgreSQL wire-protocol (v3) plumbing of the tashkent
// proxy: it accepts a client connection, connects it to one PostgreSQL replica,
// relays the startup and authentication exchange, and then either hands the pair
// of connections to the transaction layer (which decides, message by message,
// what to forward) or runs a plain transparent relay.
//
// # Why a relaying proxy, and why pgproto3 on both sides
//
// Clients must not notice the proxy: psql, pgbench, pgx, JDBC and the rest
// connect to it exactly as to PostgreSQL. The least surprising way to get there is
// to let PostgreSQL itself answer everything the proxy has no reason to change:
// the proxy does not authenticate anyone, it relays the AuthenticationXxx requests
// of the replica to the client and the client's answers back, so password,
// md5 and SCRAM-SHA-256 (SASL) all work and pg_hba.conf stays the single place
// that decides who may connect. (SCRAM channel binding cannot work through any
// proxy that terminates TLS, so it is not offered.) The one exception: a login
// PostgreSQL admits without asking for any credential (trust or peer on the
// proxy's own connection path) is refused unless Config.AllowPasswordlessLogins,
// since every client would share that trust (passwordless.go). That is the default; with
// Config.SCRAM the proxy authenticates clients itself instead (scram.go), and
// then itself to PostgreSQL (scram_backend.go). Messages are decoded and re-encoded with
// github.com/jackc/pgx/v5/pgproto3 on both sides (Backend towards the client,
// Frontend towards PostgreSQL) rather than copied as bytes, because the
// transaction layer built on top needs typed messages (Query, Parse, ReadyForQuery
// with its transaction status, ErrorResponse), and a hand-written codec would be a
// second, less tested implementation of the protocol.
//
// # What the proxy changes
//
//   - BackendKeyData: the client gets a random key of the proxy's own, mapped in a
//     Registry to the replica's key. A CancelRequest arrives on a new connection to
//     the proxy; Accept looks the key up and sends the replica's key to the replica.
//     Giving the replica's key to the client would let a client cancel queries of
//     other sessions once the proxy multiplexes or moves sessions between replicas.
//   - Config.StartupParams are added to the client's startup parameters (and
//     override them), e.g. default_transaction_isolation = 'repeatable read',
//     which is what snapshot isolation is in PostgreSQL.
//   - SSLRequest is answered 'S' and TLS is terminated at the proxy when
//     Config.TLS is set (tls.go), 'N' otherwise; GSSENCRequest is always answered
//     'N'. A client that insists on encryption the proxy does not offer
//     (sslmode=require without Config.TLS, gssencmode=require) fails with its
//     driver's own clear message, e.g. libpq's "server does not support SSL, but
//     SSL was required".
//
// # pgproto3 details that matter here
//
//   - Buffer reuse: a message returned by Receive (and every byte slice inside
//     it) is only valid until the next Receive; its buffer may even be returned to a
//     pool shared with other connections. The relay therefore Sends (which encodes,
//     i.e. copies) every message before receiving the next one, and everything that
//     is kept (parameters, keys) is copied.
//   - The client's answer during authentication is always message type 'p', whose
//     meaning depends on the request it answers (PasswordMessage,
//     SASLInitialResponse, SASLResponse, GSSResponse). pgproto3's Backend cannot
//     know, so after relaying each AuthenticationXxx the proxy calls
//     Backend.SetAuthType with the type the Frontend just decoded.
//   - Limits: Backend (client side) enforces no message size limit by default,
//     and pgproto3 allocates a buffer of the announced size before the bytes
//     arrive, so a 5-byte header could make the proxy allocate 2 GiB. The proxy sets
//     64 KiB while the client is not yet authenticated (PostgreSQL's own limit for
//     authentication tokens) and Config.MessageBodyBytesMax afterwards. The
//     startup packet is bounded by pgproto3 to 10,000 bytes like PostgreSQL's.
//   - Backend.ReceiveStartupMessage accepts protocol 3.0 and 3.2 only; other
//     versions get PostgreSQL's 0A000 "unsupported frontend protocol" error. A 3.2
//     client is relayed as is: PostgreSQL 15 answers NegotiateProtocolVersion and
//     the session continues as 3.0.
//
// # Flushing
//
// The relay buffers outgoing messages and flushes them just before it would block
// reading from the other side (a hook in the reader wrapped around each
// connection). That coalesces the 100k DataRows of a large result into a few
// large writes, and never holds back a message while waiting for input.
package pgwire
