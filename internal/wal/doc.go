// Package wal is the certifier's durable, append-only log of committed writesets.
//
// The certifier assigns every committed transaction a version (1, 2, 3, ...) and appends it here
// before acknowledging the commit. Replicas that fall behind catch up by reading the log from their
// last applied version. The log is therefore written by one group-commit loop, read by many, and must
// never hand out an entry that was not durable or lose one that was acknowledged.
//
// # Files
//
// The log is a directory of segment files plus a LOCK file (an exclusive flock, so that two
// certifiers never append to the same log). Each segment is named after the version of its first
// record, zero-padded to 20 digits ("00000000000000000001.wal"), so lexical order is version order
// and the in-memory index (segment start versions) is rebuilt from a directory listing. A new segment
// is started when the next record would push the active one past Options.SegmentBytes; a record
// larger than that gets a segment of its own. Old segments are removed whole by TruncateBefore.
//
// All integers are little-endian (the byte order of every platform we run on, so encoding is a copy).
// A segment starts with a 20-byte header:
//
//	magic "TKWL" (4) | format version = 1 (uint32) | first version (uint64) | CRC-32C of the 16 bytes before (uint32)
//
// followed by records:
//
//	payload length (uint32) | CRC-32C of version+payload (uint32) | version (uint64) | payload
//
// The version is stored in every record (8 bytes) so that a record can be recognised on its own:
// recovery and readers verify that versions are consecutive, and the torn-tail check below can test
// whether a stray byte range is a real record. CRC-32C (Castagnoli) is hardware-accelerated and
// detects all burst errors up to 32 bits. A payload is limited to 64 MiB (EntryBytesMax): readers
// allocate what a length field claims, so a damaged length must not turn into a huge allocation, and
// no sane writeset is that large.
//
// # Writing
//
// Append takes a whole batch (group commit), encodes it into one reused buffer and issues one write
// and one sync per segment touched; a batch that stays within the active segment costs exactly one
// write and one fdatasync. The active segment grows by zero-filled, fsynced chunks of 1 MiB written
// ahead of the records (preallocation, as PostgreSQL does with its WAL segments): records are written
// over those zeros, so the file's size and block map do not change and fdatasync flushes only data,
// with no journal commit for metadata. On this project's machines that halves the cost of a sync.
// When a segment file is created, its header goes in the same write as its first records, and the
// directory is fsynced too. The previous segment is trimmed to its records, fsynced and closed before
// the next one is created: a later segment never exists on disk before the earlier one is complete,
// and only the last segment ends in zeros. Readers see a batch only after its fsync returned (the index is updated afterwards), so
// they never read bytes that a crash could take back. If a write or fsync fails, the log refuses
// further writes: after a failed fsync the kernel may have dropped the dirty pages and will not report
// it again, so the only safe continuation is a restart and recovery from what is actually on disk.
//
// # Recovery
//
// Open scans every segment and verifies the header, each record's checksum, and that versions are
// consecutive across the whole log (segment names included). The first defect of a segment — an
// incomplete header or record, a checksum mismatch, zero-filled bytes, an implausible length — ends
// its good prefix. Then:
//
//   - Zeros from the end of the last good record to the end of the last segment are preallocated
//     space (or a batch that never reached the disk, which was not acknowledged either): they are
//     left in place for the next Append, without a warning.
//   - Any other defect in the last segment with no valid record anywhere after it is a torn tail, left by a
//     crash during an Append that was never acknowledged. The file is truncated at the end of its last
//     good record (removed if no good record is left), the change is fsynced, and one slog.Warn line
//     reports the file, the bytes dropped and the last good version.
//   - A defect followed by at least one valid record, or a defect in a segment that is not the last,
//     is corruption: Open returns a *CorruptError (errors.Is(err, ErrCorrupt)) naming the file, offset
//     and version, and modifies nothing. A record that verifies but carries the wrong version is
//     corruption too. Data past a defect is never skipped: that would silently lose committed
//     transactions.
//
// "Valid record after the defect" is searched at every byte offset, not by following length fields,
// since the damaged part may be the length itself; a candidate counts only if its checksum verifies and
// its version could follow the good prefix. This classification is deliberately conservative: if a
// crash persisted the later pages of an unacknowledged write but not the earlier ones, Open reports
// corruption rather than guessing, and an operator decides.
//
// Records are whole entries to the log; what an entry means is its caller's. A caller whose own
// recovery finds the log's tail incomplete in its terms (the certifier's copy of a streamed
// transaction, interrupted by a crash) cuts it with TruncateAfter: newest segments removed first,
// then the segment holding the version cut after its record, each step synced.
//
// Pipelined group commit (pipeline.go: Write, then Pending.Wait) lets the next batch be written while
// the previous batch's fdatasync runs; nothing is published or acknowledged before its own fsync and
// every earlier one returned. It widens that conservative case: after a power loss (not a process
// crash: the page cache survives kill -9) with two unacknowledged batches in flight, the later one may
// have reached the disk without the earlier one, and Open reports corruption at the gap although both
// were unacknowledged. So the certifier keeps one batch in flight (certifier's singleLog.write); more
// needs batch boundaries in the format first, so that recovery can tell an unacknowledged gap from
// damage to acknowledged entries.
package wal
