// Package certification is the certifier's decision logic: generalized
// snapshot isolation certification and the assignment of the global commit
// order (Tashkent §2 and §6.1, ../../../shared/papers/000_*.txt).
//
// A transaction that wrote something asks to commit with the version its
// snapshot was labelled with (start_version) and the keys it wrote. It may
// commit if no transaction that committed after start_version wrote an
// overlapping key (first-committer-wins). On commit it gets the next version.
//
// The package is a pure, deterministic state machine in the style of
// etcd-io/raft's RawNode: no I/O, no clock, no goroutines. The same sequence of
// calls always yields the same decisions and versions, which is what lets the
// certifier group (Raft) replay its log on every member, and what lets the
// tests compare it with a naive reference model on random histories.
//
// # Keys
//
// A Key names a row (table and encoded primary key), a whole table (Row is
// zero: TRUNCATE, table DDL) or the whole schema (Table and Row zero: DDL
// whose reach is not known). Keys are hashes; see Key. Two keys overlap when they are equal, when one is
// a whole table and the other is in it, or when either is the whole schema.
//
// A row of a table without a primary key is named by its whole old row
// when it is updated or deleted (a RowKey like any other). Rows inserted
// into such a table have no name: they are a KeylessInsert into the
// table, which conflicts only with writes of the whole table and of the
// schema, in either order, never with rows or other inserts, and leaves
// nothing in the row index (it counts as a write of some row of the
// table: lastRowWrite).
//
// # Foreign-key references
//
// Two transactions on different replicas can write different rows and still
// break an invariant every replica then shares: one deletes a parent row,
// the other inserts a child that references it, both certify, and every
// replica ends with the orphan child (each replica's foreign-key check saw
// only its own snapshot, and remote writesets are applied without checks).
// So a transaction also names the parent rows its new rows reference, as
// keys of kind Reference (Galera does the same with its reference keys). A
// reference is a shared key: it conflicts with a write of the same row (or
// its table, or the schema) committed after the transaction's snapshot, a
// write conflicts with a reference committed after the writer's snapshot,
// and two references never conflict, so children of one parent are
// inserted concurrently on any number of replicas. The conflict is reported
// as ReasonReferenceConflict. References have an index of their own, kept
// to the window like the row index; a workload without foreign keys leaves
// it empty and never probes it.
//
// A reference depends on the parent row's existence under the key the
// child points to, not on the parent's other columns. So an update that
// keeps the row (it moved no primary key and changed no value any foreign
// key references: a keeping update, which the replica's capture decides)
// is certified as a KeepingWrite: it conflicts with writes and keeping
// writes of the row, its table and the schema (first-committer-wins, as
// a write), but not with references, in either order. That is
// PostgreSQL's own rule on one server: a child's FOR KEY SHARE lock on
// its parent does not block a non-key (FOR NO KEY UPDATE) update. For
// that the row index keeps, per row, the last version of any write (for
// write-write conflicts) and the last version of a plain write (what a
// reference conflicts with); a plain write is an insert, a delete, a
// key-moving update, an update of a table some foreign key references
// through other columns than its primary key, or any write from a replica
// that does not mark keeping updates. A row leaves the index with its
// last write; its last plain write is never later, so it is out of the
// window by then too.
//
// # The conflict index and the low-water mark
//
// Instead of scanning the log (the paper's step 1), State keeps for each row
// the last version that wrote it, and for each table the last version that
// wrote any of its rows and the last whole-table write. A request conflicts if
// any of those is above its start_version. Memory is bounded by forgetting row
// entries older than a window of versions: the low-water mark. A request whose
// start_version is below the low-water mark can no longer be checked, so it is
// aborted (ReasonTooOld), never waved through (BRIEF.md, "easy to get wrong").
//
// # Idempotence
//
// Requests carry a transaction id. A request for a transaction already
// committed inside the window gets the original version back (Duplicate), so a
// agent that lost a reply can ask again without committing twice.
package certification
