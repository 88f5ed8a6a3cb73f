// Package capture holds the tests of the extension's writeset capture
// (extension/src/capture.c, relinfo.c, writeset.c): what a transaction's
// COMMIT sends for certification, checked on a real PostgreSQL with the
// extension and a stand-in for the agent (internal/agent/agenttest), and
// that what it sends applies on another server (internal/replica's
// applier). It has no code of its own.
package capture
