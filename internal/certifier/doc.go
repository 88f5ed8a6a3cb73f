// Package certifier is the certifier process's service: it wraps the pure
// certification state machine (package certification) with the durable log
// (package wal) and serves the gRPC API in api/certifierpb.
//
// # Ordering backends
//
// What decides the order of certified entries and makes them durable is
// the service's orderer (orderer.go), one of two: a single certifier's own
// log (single.go), or a member of a certifier group replicated by Raft
// (group.go, package certgroup). The streams, delivery, Fetch and Status
// are the same code for both; the orderer contract tests run both.
//
// # The path of a request
//
//	agent stream ──> receiver goroutine ──orderer.decide──> certified entries
//	                        │                                      │
//	                        ▼                                      ▼
//	                 per-stream queue               the orderer makes them durable:
//	                        │                       single, one write + one fsync for
//	                        ▼                       everything pending (group commit,
//	                 sender goroutine  <── durable ── Tashkent §6.1); group, Raft
//	                 waits until what the reply depends on is durable, then sends
//	                 the entries the replica has not seen and the replies
//
// Certification happens in memory, in arrival order, so a later request is
// checked against entries that are certified but not yet durable. That is
// safe because nothing leaves the certifier before it is durable: a commit
// reply waits for its own entry, and the entries delivered with any reply are
// durable ones. If the process dies, the requests that were certified against
// lost entries were never answered (or were aborted, which is always safe).
// The exception is a stream that takes the commit point (early.go): what it
// was sent before durable may fail, and the replica is told to rewind.
//
// # Recovery
//
// Open reads the log back, restores the last window of versions into the
// state machine (their keys and transaction ids) and starts serving at the
// durable version it found. Everything acknowledged was durable, so it is
// there; nothing unacknowledged was reported committed. Log retention
// (retention.go) removes old segments but always keeps that window.
//
// # Streams
//
// A Certify stream is one replica's session. The service remembers per stream
// the highest version delivered, so a replica receives each entry once, in
// order, before any reply that depends on it. Every entry is pushed to every
// stream as soon as it is durable, not only with the replica's own replies
// (sendLoop). Replies go out as soon as what they depend on is durable, not
// in the order the requests came: an abort, which depends on nothing, is
// not held behind the flush of another session's commit on the same stream
// (TakeSendable). A stream whose replica is far behind is caught up from
// the log on disk, in chunks. While a replica's agent says it has fallen
// behind (the stream's pause flag), the other streams' requests are held
// before they are certified (flowcontrol.go).
//
// # Streamed writesets
//
// A transaction too large for one log entry is staged first (Stage,
// stage.go: a spool file per transaction in the data directory's stage/)
// and certified with CertifyRequest.streamed on a small writeset of whole
// tables. It commits as a span of consecutive versions, one per fragment,
// which the writer copies from the spool into the log one fragment at a
// time before the durable version moves past it (span.go). In a group the
// leader copies the fragments to the other members as it stages them
// (group_stage.go), Raft commits the span's head only, and every member's
// writer writes the span from its own stage or fetches it from another
// member (group_writer.go).
//
// # Decisions and drivers
//
// What the service decides per message is in pure functions (core.go):
// a request's preparation, decision and reply (CertifyMessage for a single
// certifier), which replies a stream may send (TakeSendable, PushDue), the
// entries it must be sent before them (SendReplies, ChunkEntries), which
// sessions it refuses (Admit), where recovery starts (WindowBase). The
// goroutines, the log and gRPC are the drivers around them; the
// simulation (internal/sim) drives the same functions with a simulated
// network, disk and clock.
//
// # Failure
//
// A failed log write or fsync leaves the log in an unknown state: the service
// stops serving (fail-stop) and every waiting stream ends with Unavailable.
// The process must be restarted, and recovery decides what is in the log.
package certifier
