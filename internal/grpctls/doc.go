// Package grpctls turns the --certifier-tls-* flags into gRPC credentials:
// mutual TLS with client certificates on every certifier channel: between
// agents and certifiers, among certifier group members, and from the tools.
//
// # Why it is built this way
//
// The certifier's gRPC port is the cluster's commit path: whoever reaches it
// can certify writesets (they commit on every replica), read every
// committed row through Fetch, and, on a group member, send Raft messages
// (Tashkent §7.3). Passwords over a plaintext channel would protect
// nothing, so every party proves itself with a certificate signed by one
// cluster CA, and so does the certifier to its clients:
//
//   - the server (certifier.Listen) requires a client certificate and
//     verifies it against --certifier-tls-ca;
//   - every client (agent, replica Fetch, group member to group member,
//     `tashkent status`, `tashkent certifier members`, certifier-bench)
//     verifies the certifier's certificate against the same CA and the
//     address it dialled (IP SAN or DNS SAN), and presents its own;
//   - TLS 1.3 only: every party is tashkent itself, nothing older needs to
//     connect.
//
// One Files value (CA, certificate, key) configures both directions: a group
// member is a server to its peers and a client of them with the same pair,
// so certificates are issued for both server and client use (certs.Issue).
//
// Without the flags every channel is plaintext: Files{} gives
// insecure dial credentials and no server option. Half a configuration
// (a certificate without a key, a key without a CA) is refused at start-up
// by Check, never silently downgraded to plaintext.
//
// # Errors people can act on
//
// A failed TLS handshake usually reaches the user as gRPC's
// "connection closed" or "authentication handshake failed" with an x509
// string. The credentials here wrap both sides:
//
//   - the server logs one line per refused connection (rate-limited per
//     remote host and cause) naming the cause: a plaintext client, no
//     client certificate, a certificate from another CA;
//   - the client's error names the cause and what to check (Explain). In
//     TLS 1.3 the server judges the client's certificate after the client's
//     handshake has already finished, so a refusal arrives as an alert on
//     the first read; the client credentials read once after the handshake
//     (peekAlert) so that this refusal, too, is reported as a handshake
//     failure with its cause instead of a closed connection later.
//
// # Not done
//
// Certificates are read once at start-up: replacing the files needs a
// restart of the process (no reload). Any certificate the CA signed is
// accepted for every service on the port (Certify, Fetch, Status and the
// members' Raft stream): there is no per-role authorization, so give the CA
// only to tashkent's own processes. No revocation lists.
package grpctls
