// Package agent is the replica's agent (`tashkent agent`): the Go process
// beside each PostgreSQL replica that certifies its backends' writesets,
// applies the other replicas' writesets in the global order, makes local
// transactions give way to them, and recovers the replica after its
// database restarts. The extension (../../extension) does the rest inside
// PostgreSQL: capture, the commit hook, and the replica's commit order in
// shared memory.
//
// # Layers
//
//	backends ──socket (wire)──> server.go, certify.go ──certclient──> certifier
//	                                 │ register / abandon              │ entries, in version order
//	                                 ▼                                 ▼
//	                       sequence.go: order.Order (local or remote, next batch)
//	                                 │
//	            apply.go (applier connection) ── lockwatch.go, maintain.go (control connection)
//
// order (a pure state machine) decides; the rest is I/O around it. The
// agent holds two connections to its database: the apply connection,
// registered as the replica's applier (tashkent.register_applier, whose
// hello the socket accepts only from that connection's backend), and the
// control connection (lock watch, dooms, cancels, versions, health).
//
// # A certification
//
// A backend connects once (Hello, Welcome with the agent generation) and
// then sends Certify{start version, writeset} at each writing commit. The
// agent registers a transaction id (origin = name + random bits of this
// run, sequence number) as local, sends the writeset bytes as they came
// (certclient pipelines them on one stream), and answers Commit{version},
// Abort{conflicting version, reason, detail}, Unknown (no reply within 90%
// of tashkent.certify_timeout) or Unavailable (not serving). The version
// is delivered before the reply, so the order knows it is local; the
// backend commits it itself, in its turn. A backend that aborts after its
// Commit sends Abandon; one whose socket closes after a Commit is looked
// up in tashkent.committed_version(); either way a version not committed
// becomes remote and is applied (Tashkent §8.1).
//
// A backend with tashkent.sync_wait on sends Sync at the start of each
// transaction (sync.go); the agent asks the certifier's SyncVersion and
// answers Synced with it, or with why not (not serving, no answer within
// the backend's timeout). The backend waits for the version itself.
//
// A backend asks a transaction's state with StateQuery{version, epoch}
// (tashkent.txn_state, wait_durable; txnstate.go): the agent judges from
// the replica's history and the certifier's durable version, once a
// certifier stream has admitted that history (admission.go). The
// server's durability feed (a background worker of the extension) says
// hello as RoleFeed and then only reads: Durable{version} at once and at
// each advance of the durable version an admitted stream brings
// (feed.go), and Failed{after} at once and at each change (failed.go):
// in mode ed the versions above it failed, and the extension ends the
// backends that hold one.
//
// In mode ed (config.go) the agent's stream takes commit replies at the
// commit point (certclient.Options.EarlyDelivery); each Decision carries
// the durable version the agent knew, and a safe commit above it waits in
// the extension until the feed brings durability (extension/src/safe.c).
//
// # Applying
//
// Remote versions are applied in batches of consecutive versions, one
// transaction each (replica.Applier: tashkent.apply_versions first), one
// batch in flight. A batch is sent as soon as it is delivered; its COMMIT
// waits inside PostgreSQL for the versions before it. If one of those is
// abandoned, the batch is cancelled and planned again from it. While a
// batch runs, lockwatch.go dooms the local transactions that block it
// (Tashkent §8.2). Deadlocks and cancels are retried; a version already
// committed is skipped; a lost connection is replaced if the database is
// the same one; any other failure halts the replica (gate closed,
// certifications refused): it must be rebuilt.
//
// A streamed transaction comes as a span of versions, one entry per
// fragment of its writeset (order's package comment). A remote span is
// applied one fragment per batch in one transaction that stays open from
// its first fragment to its last (replica.ApplySpan), each fragment's
// bytes let go once applied. A span that cannot be finished from what
// the order kept (its transaction lost midway, a local span abandoned)
// ends the run (errRestart); the next run delivers it again from the
// database's version.
//
// # Start and recovery
//
// Run finds the socket (tashkent.agent_socket, relative to the data
// directory), listens, and then runs the start sequence (start.go) for
// each life of the database: connect, CREATE EXTENSION, close the gate,
// sequences and DDL trust, end earlier appliers, register, wait for
// backends that asked an earlier agent, take the versions backends hold
// as local (inherited, watched until committed or released), read the
// database's version, open the certifier stream from it, catch up to the
// certifier's durable version, open the gate. A database that restarts or
// loses commits ends the run; the next one starts from what it kept
// (Tashkent §7.1, case 2).
//
// # Where to start debugging
//
// The log says each step of a start with the version; /healthz says the
// state and why; tashkent.backends() shows every backend's slot (state,
// version, the version it waits for, its agent generation, a doom), and
// tashkent.status() the replica's version, the applier and the gate.
package agent
