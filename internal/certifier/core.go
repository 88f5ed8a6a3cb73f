package certifier

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
	"github.com/tashkent-db/tashkent/internal/wal"
)

// The service's decisions, without its I/O: what it answers to a
// message's requests, what a stream sends and when, where recovery
// starts. The service's goroutines call these functions around its locks,
// its log and its gRPC streams; the simulation (internal/sim) calls the
// same functions around its simulated network, disk and clock, so that it
// runs what the service decides rather than a model of it.

// StagedWriteset is what Stage holds for a streamed transaction
// (stage.go): what its certify request must match, and where the writer
// copies the fragments from.
type StagedWriteset struct {
	Fragments uint32
	Bytes     uint64 // the fragments' total size
	// LastFragmentBytes is the size of the last fragment, which shares
	// its log entry with the certified writeset.
	LastFragmentBytes int
	// Checksum is the fragments' logentry.SpanChecksum, computed as they
	// were spooled: it goes into the span's last entry, against which a
	// group member checks its own copy.
	Checksum uint32
	Spool    string // the spool file
}

// ClaimStage takes the complete stage of a transaction for its certify
// request, so that no other request and no expiry takes it; ok is false
// when none is staged (or not completely, or another request took it).
// A nil ClaimStage has nothing staged (the simulation).
type ClaimStage func(txn *pb.TxnID) (staged StagedWriteset, ok bool)

// prepareRequest checks a request's limits, reads its keys and encodes
// its log entry; a request refused here gets its reply at once (reply set).
// A streamed request (req.Streamed) claims its stage through claim
// (prepareStreamed) instead of having its log entry encoded.
func prepareRequest(req *pb.CertifyRequestEncoded, overloaded bool, limits Limits) certifying {
	c := certifying{req: req, overloaded: overloaded}
	if overloaded {
		return c
	}
	refuse := func(reason pb.AbortReason, detail string) certifying {
		c.reply = abortReply(&pb.CertifyReply{RequestId: req.RequestId, Txn: req.Txn}, reason, detail)
		return c
	}
	if n, limit := len(req.Writeset), limits.WritesetBytesMax; n > limit {
		// Before the keys are read, so an oversized writeset is not parsed.
		return refuse(pb.AbortReason_ABORT_REASON_LIMIT, fmt.Sprintf("writeset is %d bytes, over the limit of %d (writeset bytes max)", n, limit))
	}
	// The state keeps the keys (its window): a slice of their own.
	keys, err := keysOfEncoded(make([]certification.Key, 0, keysCapacityGuess), req.Writeset)
	if n := len(keys); n > limits.WritesetKeysMax {
		return refuse(pb.AbortReason_ABORT_REASON_LIMIT,
			fmt.Sprintf("writeset has %d rows, over the limit of %d (writeset keys max)", n, limits.WritesetKeysMax))
	}
	if err != nil || req.Txn == nil || req.Txn.Origin == "" {
		if err == nil {
			err = errors.New("missing transaction id")
		}
		return refuse(pb.AbortReason_ABORT_REASON_INVALID, err.Error())
	}
	c.request = certification.Request{Txn: txnOf(req.Txn), StartVersion: req.StartVersion, Keys: keys}
	c.barrier = slices.ContainsFunc(keys, certification.Key.WritesWholeTable)
	if req.Streamed != nil {
		return prepareStreamed(c)
	}
	c.prefix = logentry.EncodePrefixOfEncoded(req.Txn, req.Writeset)
	if len(c.prefix)+logentry.VersionBytesMax > wal.EntryBytesMax {
		return refuse(pb.AbortReason_ABORT_REASON_LIMIT,
			fmt.Sprintf("the log entry would be %d bytes, over the log's limit of %d", len(c.prefix), wal.EntryBytesMax))
	}
	return c
}

// prepareStreamed prepares a streamed request: certified on its own
// (small) writeset's keys, committed as one version per staged fragment;
// its stage is claimed when it is decided (claimStages).
func prepareStreamed(c certifying) certifying {
	req := c.req
	if req.Streamed.Fragments == 0 {
		c.reply = abortReply(&pb.CertifyReply{RequestId: req.RequestId, Txn: req.Txn}, pb.AbortReason_ABORT_REASON_INVALID,
			"a streamed writeset has at least one fragment")
		return c
	}
	c.request.Versions = int(req.Streamed.Fragments)
	return c
}

// claimStages takes the stage of every streamed request of a batch, under
// the lock its decisions are taken in (decideSingle): a request re-sent
// while the first is in flight then finds either the stage or the
// transaction's decision, never neither (it would be told that nothing
// was committed while the first commits). Refused and overloaded requests
// claim theirs too, so that the decision lets it go (settleStages): their
// backends retry under new transaction ids, and nothing else would ever
// claim it. A nil claim has nothing staged (the simulation). A request
// whose stage is missing or does not match is refused in decideSingle,
// which first answers a retry of a transaction that committed (its stage
// is gone by then) with its span.
func claimStages(batch []certifying, claim ClaimStage) {
	for i := range batch {
		c := &batch[i]
		if c.req.Streamed == nil || c.req.Txn == nil {
			continue
		}
		if claim != nil {
			c.staged, _ = claim(c.req.Txn)
		}
		if c.reply == nil && !c.overloaded {
			checkStage(c)
		}
	}
}

// checkStage compares a streamed request with the stage it claimed.
func checkStage(c *certifying) {
	req, staged := c.req, c.staged
	switch {
	case staged.Spool == "":
		c.stageProblem = "the certifier does not hold the transaction's streamed writeset (it restarted since it was sent, or it expired); nothing was committed"
		c.notStaged = true
	case staged.Fragments != req.Streamed.Fragments || staged.Bytes != req.Streamed.Bytes:
		c.stageProblem = fmt.Sprintf("the streamed writeset does not match what was staged: the request says %d fragments of %d bytes, the certifier staged %d fragments of %d bytes",
			req.Streamed.Fragments, req.Streamed.Bytes, staged.Fragments, staged.Bytes)
	default:
		if last := logentry.SpanEntryBytesMax(req.Txn, staged.LastFragmentBytes, len(req.Writeset)); last > wal.EntryBytesMax {
			c.reply = abortReply(&pb.CertifyReply{RequestId: req.RequestId, Txn: req.Txn}, pb.AbortReason_ABORT_REASON_LIMIT,
				fmt.Sprintf("the streamed writeset's last log entry (its last fragment and the certified writeset) would be %d bytes, over the log's limit of %d", last, wal.EntryBytesMax))
		}
	}
}

// decideSingle is a single certifier's decision for prepared requests:
// state certifies them in order (those lookedUp are only looked up), and
// each new commit's log entry is appended to pending, in version order.
func decideSingle(state *certification.State, epoch uint64, batch []certifying, pending []logentry.Entry) []logentry.Entry {
	for i := range batch {
		c := &batch[i]
		switch {
		case c.reply != nil:
		case c.lookedUp():
			lookUp(c, state.CommittedSpan)
		default:
			c.outcome = state.Certify(c.request)
			if c.outcome.Decision == certification.Commit && !c.outcome.Duplicate && c.req.Streamed == nil {
				// A span's entries are copied from its stage by the writer
				// (single.go, writeSpan): see committedSpans.
				pending = append(pending, c.prefix.WithVersion(c.outcome.CommitVersion, epoch))
			}
			c.lowWaterMark, c.latest = state.LowWaterMark(), state.Version()
		}
	}
	return pending
}

// lookedUp reports whether a prepared request is only looked up, not
// certified: it arrived over the in-flight limit, or it is streamed and
// has no stage that matches it (claimStages).
func (c *certifying) lookedUp() bool { return c.overloaded || c.stageProblem != "" }

// CommittedSpanOf reports the versions a transaction committed as (first
// == last for one version), if it is inside the window:
// certification.State.CommittedSpan, or a group's lookup.
type CommittedSpanOf func(txn certification.TxnID) (first, last uint64, ok bool)

// lookUp decides a request that is only looked up (lookedUp) from what
// committed: a retry of a transaction that committed gets its versions
// back; otherwise an overloaded request is refused as overloaded
// (replyTo), and a streamed one without its stage as invalid.
func lookUp(c *certifying, committed CommittedSpanOf) {
	if c.overloaded {
		c.firstBefore, c.committedBefore, _ = committed(txnOf(c.req.Txn))
		return
	}
	if first, last, ok := committed(c.request.Txn); ok {
		c.outcome = certification.Outcome{Decision: certification.Commit, CommitVersion: last, FirstVersion: first, Duplicate: true}
	} else {
		c.outcome = certification.Outcome{Decision: certification.Abort, Reason: certification.ReasonInvalid}
	}
}

// replyTo builds a decided request's reply; it may be sent once the
// durable version reaches waitFor. inFlightMax is the limit an overloaded
// request's abort names.
func replyTo(c *certifying, inFlightMax int) (reply *pb.CertifyReply, waitFor uint64) {
	if c.reply != nil {
		return c.reply, 0
	}
	reply = &pb.CertifyReply{RequestId: c.req.RequestId, Txn: c.req.Txn}
	if c.overloaded {
		if c.committedBefore != 0 {
			// A retry of a transaction that committed gets its version back.
			reply.Decision, reply.CommitVersion = pb.Decision_DECISION_COMMIT, c.committedBefore
			if c.req.Streamed != nil {
				reply.FirstVersion = c.firstBefore
			}
			return reply, c.committedBefore
		}
		return abortReply(reply, pb.AbortReason_ABORT_REASON_OVERLOADED,
			fmt.Sprintf("certifier overloaded: more requests in flight than the limit of %d (in-flight requests max); retry", inFlightMax)), 0
	}
	if c.outcome.Decision == certification.Commit {
		reply.Decision = pb.Decision_DECISION_COMMIT
		reply.CommitVersion = c.outcome.CommitVersion
		if c.req.Streamed != nil {
			reply.FirstVersion = c.outcome.FirstVersion
		}
		return reply, c.outcome.CommitVersion
	}
	if c.notStaged {
		return abortReply(reply, pb.AbortReason_ABORT_REASON_NOT_STAGED, c.stageProblem), 0
	}
	if c.stageProblem != "" {
		return abortReply(reply, pb.AbortReason_ABORT_REASON_INVALID, c.stageProblem), 0
	}
	reply.ConflictVersion = c.outcome.ConflictVersion
	return abortReply(reply, reasonOf(c.outcome.Reason), describeEncodedAbort(c.req, c.outcome, c.lowWaterMark, c.latest)), 0
}

// Answer is the certifier's answer to one request.
type Answer struct {
	Reply *pb.CertifyReply
	// WaitFor is the version that must be durable before Reply is sent
	// (0: none).
	WaitFor uint64
	// Outcome is the state machine's, zero for a request it never saw
	// (refused by a limit, or overloaded).
	Outcome certification.Outcome
}

// CertifyMessage is what a single certifier does with one message's
// requests (stream.go certifyMessage, with singleLog's decide): each is
// prepared, decided by state in order and answered. overloaded[i] says
// request i arrived over the in-flight limit. It returns the answers in
// request order, and pending with each new commit's log entry appended in
// version order: what the log must make durable before an answer that
// waits for it is sent. New entries carry epoch.
func CertifyMessage(state *certification.State, epoch uint64, limits Limits, reqs []*pb.CertifyRequestEncoded, overloaded []bool, pending []logentry.Entry) ([]Answer, []logentry.Entry) {
	batch := make([]certifying, len(reqs))
	for i, req := range reqs {
		batch[i] = prepareRequest(req, overloaded[i], limits)
	}
	claimStages(batch, nil)
	pending = decideSingle(state, epoch, batch, pending)
	answers := make([]Answer, len(batch))
	for i := range batch {
		a := &answers[i]
		a.Reply, a.WaitFor = replyTo(&batch[i], limits.InFlightRequestsMax)
		a.Outcome = batch[i].outcome
	}
	return answers, pending
}

// committedSpan is a streamed transaction's commit that the writer copies
// into the log from its stage (single.go, writeSpan).
type committedSpan struct {
	first, last uint64
	txn         *pb.TxnID
	certified   []byte // the request's writeset: the last entry's certified
	// bytes and checksum: the staged fragments' size and checksum, on the
	// last entry (StagedWriteset).
	bytes    uint64
	checksum uint32
	spool    string
	epoch    uint64 // the epoch that certified it, on every entry
}

// committedSpans appends the spans a decided batch committed in epoch, in
// version order, to spans.
func committedSpans(batch []certifying, epoch uint64, spans []committedSpan) []committedSpan {
	for i := range batch {
		c := &batch[i]
		if c.reply == nil && !c.overloaded && c.req.Streamed != nil && c.stageProblem == "" &&
			c.outcome.Decision == certification.Commit && !c.outcome.Duplicate {
			spans = append(spans, committedSpan{first: c.outcome.FirstVersion, last: c.outcome.CommitVersion,
				txn: c.req.Txn, certified: c.req.Writeset, bytes: c.staged.Bytes, checksum: c.staged.Checksum, spool: c.staged.Spool, epoch: epoch})
		}
	}
	return spans
}

// TakeSendable moves the replies that can be sent now, those whose
// dependencies are durable (waitFor), from waiting to ready, each in
// arrival order. A reply is sent as soon as it can be, not in the order
// the requests came: one stream carries every session of a replica, and
// an abort (which depends on nothing durable) or a catch-up does not wait
// for the flush of another session's commit. Its client learns of the
// abort, and retries, up to a whole flush sooner. Entries still go out in
// version order, each before any reply that depends on it (SendReplies).
func TakeSendable[Q any](waiting []Q, durable uint64, waitFor func(Q) uint64, ready []Q) (sendable, still []Q) {
	still = waiting[:0]
	for _, q := range waiting {
		if waitFor(q) <= durable {
			ready = append(ready, q)
		} else {
			still = append(still, q)
		}
	}
	return ready, still
}

// PushDue reports whether a stream is sent the durable entries it lacks
// although no reply of its is ready: it asked for pushes
// (OpenSession.push) and the durable version is past what it was sent.
func PushDue(push bool, sendable int, delivered, durable uint64) bool {
	return sendable == 0 && push && durable > delivered
}

// EntryReader reads the encoded durable entries (after, upTo] into dst,
// stopping early, when they come from disk, after the entry that brings
// what it read to maxBytes (0: no bound).
type EntryReader func(dst [][]byte, after, upTo uint64, maxBytes int) ([][]byte, error)

// ChunkEntries calls emit with the encoded entries (after, upTo] in order,
// in groups of at most messageEntryBytesMax bytes (or one entry), with the
// version of the group's last entry.
func ChunkEntries(read EntryReader, after, upTo uint64, emit func(entries [][]byte, last uint64) error) error {
	var group [][]byte
	groupBytes := 0
	for after < upTo {
		to := min(upTo, after+readChunkEntries)
		entries, err := read(nil, after, to, readChunkBytes)
		if err != nil {
			return fmt.Errorf("read log for delivery: %w", err)
		}
		if len(entries) == 0 || uint64(len(entries)) > to-after {
			// Never deliver a gap: the reader would take the versions
			// it did not get as delivered.
			return fmt.Errorf("read log for delivery: %d entries for versions %d..%d", len(entries), after+1, to)
		}
		for i, e := range entries {
			if len(group) > 0 && groupBytes+len(e) > messageEntryBytesMax {
				if err := emit(group, after+uint64(i)); err != nil {
					return err
				}
				group, groupBytes = nil, 0
			}
			group = append(group, e)
			groupBytes += len(e)
		}
		after += uint64(len(entries))
	}
	if len(group) > 0 {
		return emit(group, upTo)
	}
	return nil
}

// SendReplies sends a stream the entries (delivered, through] it has not
// carried, in chunks (ChunkEntries), and then replies, whose dependencies
// are durable, in the message with the last chunk: every entry reaches the
// replica before any reply that depends on it. Each message names the
// durable version: through itself, unless entries are delivered before
// they are durable (early.go). It returns the highest version sent.
func SendReplies(read EntryReader, delivered, through, durable uint64, replies []*pb.CertifyReply, send func(*pb.CertifyStreamReply) error) (uint64, error) {
	var last *pb.CertifyStreamReply
	err := ChunkEntries(read, delivered, through, func(entries [][]byte, upTo uint64) error {
		if last != nil {
			if err := send(last); err != nil {
				return err
			}
		}
		last = &pb.CertifyStreamReply{Entries: entries, DurableVersion: min(upTo, durable)}
		delivered = upTo
		return nil
	})
	if err != nil {
		return delivered, err
	}
	if last == nil {
		last = &pb.CertifyStreamReply{}
	}
	last.DurableVersion = durable
	last.Replies = replies
	return delivered, send(last)
}

// errBehindLog refuses a replica that needs versions the log no longer
// holds (it keeps the versions after startsAfter).
func errBehindLog(replica string, version, startsAfter uint64) error {
	return status.Errorf(codes.FailedPrecondition,
		"%s: replica %q is at version %d, but this certifier's log keeps only the versions after %d "+
			"(log retention removed the older ones): rebuild the replica from a peer (tashkent replica rebuild; the supervisor does it by itself)",
		pb.NeedsStateTransfer, replica, version, startsAfter)
}

// WindowBase is the version after which the last window of a log holding
// versions first..last starts (first 0: the log is empty): the versions
// (base, last] are what recovery restores into the state machine.
func WindowBase(first, last, window uint64) uint64 {
	base := uint64(0)
	if first > 0 {
		base = first - 1
	}
	if last > window && last-window > base {
		base = last - window
	}
	return base
}
