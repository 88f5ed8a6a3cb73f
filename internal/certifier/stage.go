package certifier

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certification"
	"github.com/tashkent-db/tashkent/internal/logentry"
)

// Staging (Certifier.Stage): a transaction too large for one log entry
// sends its writeset in fragments ahead of its certify request. Each
// transaction's fragments go to a spool file of its own in the data
// directory's stage/ directory, never into memory past the few fragments
// being received and copied; on commit the writer copies them into the
// log, one entry per fragment (span.go, copySpan), and removes the file;
// on abort the file is removed at once. A complete stage that no certify
// request claims within its idle time (stageIdleMax) is removed.
//
// A single certifier does not sync its spool: a crash loses it, and the
// transaction, which nobody was told committed, with it (Open empties
// stage/). In a certifier group the leader copies every fragment to the
// other members as it spools it (group_stage.go, StageCopy), and the
// stage succeeds once it is synced on as many members as a commit needs:
// a committed span then has its fragments on a majority, each of which
// writes them into its own versioned log when it applies the commit
// (group_writer.go). A group keeps complete spools across restarts
// (stage_keep.go).

// stageDirName is the spool directory inside the data directory.
const stageDirName = "stage"

// DefaultStageBytesMax bounds the bytes held in stage/ at once, over every
// transaction being staged or waiting for its decision: two streamed
// transactions at the extension's default limit (tashkent.writeset_max_bytes).
const DefaultStageBytesMax int64 = 8 << 30

// stageIdleMax is how long a complete stage waits for its certify request
// before it is removed: an agent certifies right after its stage, so a
// stage left this long belongs to an agent or backend that went away. A
// group member keeps a copy it received (or found at Open) twice as long:
// the leader's clock, not its own, started the wait.
const stageIdleMax = 10 * time.Minute

// stagingArea holds the spool files of the transactions being staged or
// waiting for their decision.
type stagingArea struct {
	dir      string
	bytesMax int64
	// keep: spools are synced when complete and kept across restarts (a
	// certifier group, stage_keep.go).
	keep bool
	mu   sync.Mutex
	held int64 // bytes of the spool files, over all of them
	txns map[certification.TxnID]*stagedTxn
}

// stagedTxn is one transaction's spool file.
type stagedTxn struct {
	path      string
	staged    StagedWriteset // the fragments received so far
	fileBytes int64          // what the file holds, counted in held
	complete  bool           // its Stage call returned
	claimed   bool           // a certify request took it (claim)
	inUse     bool           // the writer copies it into the log (take)
	completed time.Time
	idleMax   time.Duration // unclaimed this long after completed: removed
	copied    bool          // copied to the other members of a group (its leader's Stage)
}

// openStagingArea empties dir/stage (spool files left by a crash hold
// nothing anybody was told committed) and returns the area.
func openStagingArea(dataDir string, bytesMax int64) (*stagingArea, error) {
	dir := filepath.Join(dataDir, stageDirName)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("remove the stage directory left by the last run: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the stage directory: %w", err)
	}
	return newStagingArea(dir, bytesMax), nil
}

func newStagingArea(dir string, bytesMax int64) *stagingArea {
	return &stagingArea{dir: dir, bytesMax: bytesMax, txns: make(map[certification.TxnID]*stagedTxn)}
}

// spoolPath names a transaction's spool file: the origin hex-encoded (a
// replica name may hold any character) and the sequence number.
func (a *stagingArea) spoolPath(txn certification.TxnID) string {
	return filepath.Join(a.dir, fmt.Sprintf("%x-%d"+spoolSuffix, txn.Origin, txn.Seq))
}

// begin creates the spool file of txn, replacing an earlier stage of it
// that no request claimed (a Stage retried after a broken stream). Once
// complete, the stage waits idleMax for its request.
func (a *stagingArea) begin(txn certification.TxnID, idleMax time.Duration) (*os.File, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old := a.txns[txn]; old != nil {
		if old.claimed || old.inUse || !old.complete {
			return nil, status.Errorf(codes.FailedPrecondition, "transaction %s/%d is already being staged or certified", txn.Origin, txn.Seq)
		}
		a.removeLocked(txn, old)
	}
	path := a.spoolPath(txn)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "create the spool file: %v", err)
	}
	a.txns[txn] = &stagedTxn{path: path, staged: StagedWriteset{Spool: path}, idleMax: idleMax}
	return f, nil
}

// reserve counts a fragment of n bytes (taking frameBytes in the file)
// against --stage-bytes-max before it is written; checksum is the stage's
// checksum with it.
func (a *stagingArea) reserve(txn certification.TxnID, n, frameBytes int, checksum uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.txns[txn]
	if a.held+int64(frameBytes) > a.bytesMax {
		return status.Errorf(codes.ResourceExhausted,
			"staged writesets would hold %d bytes, over the limit of %d (--stage-bytes-max); the transaction is not certified",
			a.held+int64(frameBytes), a.bytesMax)
	}
	a.held += int64(frameBytes)
	t.fileBytes += int64(frameBytes)
	t.staged.Fragments++
	t.staged.Bytes += uint64(n)
	t.staged.LastFragmentBytes = n
	t.staged.Checksum = checksum
	return nil
}

// complete marks txn's stage whole: a certify request may claim it.
func (a *stagingArea) complete(txn certification.TxnID, now time.Time) StagedWriteset {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.txns[txn]
	t.complete, t.completed = true, now
	return t.staged
}

// markCopied records that txn's stage was copied to the other members:
// they hear when it goes without a commit.
func (a *stagingArea) markCopied(txn certification.TxnID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.txns[txn].copied = true
}

// claim takes txn's complete stage for its certify request (ClaimStage).
// A stage the writer copies belongs to a transaction that committed.
func (a *stagingArea) claim(id *pb.TxnID) (StagedWriteset, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.txns[txnOf(id)]
	if t == nil || !t.complete || t.claimed || t.inUse {
		return StagedWriteset{}, false
	}
	t.claimed = true
	return t.staged, true
}

// release gives a claimed stage back, its idle time starting again at
// now: the request was not decided here, or its decision may not stand
// (a group member that lost its leadership), and another request, or
// this member's writer, may still need it.
func (a *stagingArea) release(txn certification.TxnID, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.txns[txn]; t != nil && t.claimed {
		t.claimed, t.completed = false, now
	}
}

// releaseAll releases every claimed stage (release).
func (a *stagingArea) releaseAll(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.txns {
		if t.claimed {
			t.claimed, t.completed = false, now
		}
	}
}

// take gives the writer txn's complete stage to copy into the log,
// claimed by a request or not (a group member's copy); neither a request
// nor the expiry takes it afterwards. The writer discards it once copied.
func (a *stagingArea) take(txn certification.TxnID) (StagedWriteset, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.txns[txn]
	if t == nil || !t.complete {
		return StagedWriteset{}, false
	}
	t.inUse = true
	return t.staged, true
}

// discard removes txn's stage: its Stage failed, its request was
// aborted, or its fragments are in the log.
func (a *stagingArea) discard(txn certification.TxnID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.txns[txn]; t != nil {
		a.removeLocked(txn, t)
	}
}

func (a *stagingArea) removeLocked(txn certification.TxnID, t *stagedTxn) {
	delete(a.txns, txn)
	a.held -= t.fileBytes
	_ = os.Remove(t.path) // gone already, or removed at the next start
	if a.keep {
		_ = os.Remove(completionPath(t.path))
	}
}

// discardCopy removes txn's stage at its leader's word (StageDiscard)
// if it is complete and neither claimed nor taken; false if there was
// none such.
func (a *stagingArea) discardCopy(txn certification.TxnID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.txns[txn]
	if t == nil || !t.complete || t.claimed || t.inUse {
		return false
	}
	a.removeLocked(txn, t)
	return true
}

// unclaimed lists the complete stages neither claimed nor taken.
func (a *stagingArea) unclaimed() []certification.TxnID {
	a.mu.Lock()
	defer a.mu.Unlock()
	var txns []certification.TxnID
	for txn, t := range a.txns {
		if t.complete && !t.claimed && !t.inUse {
			txns = append(txns, txn)
		}
	}
	return txns
}

// expire removes the complete stages that nothing claimed or took within
// their idle time of now, and returns those of them that were copied to
// other members.
func (a *stagingArea) expire(now time.Time) (copied []certification.TxnID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for txn, t := range a.txns {
		if t.complete && !t.claimed && !t.inUse && now.Sub(t.completed) > t.idleMax {
			a.removeLocked(txn, t)
			if t.copied {
				copied = append(copied, txn)
			}
		}
	}
	return copied
}

// heldBytes is what the spool files hold now.
func (a *stagingArea) heldBytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held
}

// Stage receives a streamed writeset's fragments into its spool file, and
// in a group copies them to the other members. A fragment is a non-empty
// StageRequest.fragment (the first message may carry the transaction id
// alone). See the comment at the top of this file.
func (s *Service) Stage(stream pb.Certifier_StageServer) error {
	if err := s.order.admitStage(stream); err != nil {
		return err
	}
	// Accepted: a client of a group starts sending once it hears so.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	first, txn, err := recvFirst(stream)
	if err != nil {
		return err
	}
	copies := s.order.copyStage(first.Txn)
	staged, err := s.receiveStage(stream, txn, first, stageIdleMax, copies.add, noStageEnd)
	if err != nil {
		copies.cancel()
		return err
	}
	if err := copies.wait(staged); err != nil {
		s.staging.discard(txn)
		return err
	}
	if copies != nil {
		s.staging.markCopied(txn)
	}
	s.staging.complete(txn, time.Now())
	return stream.SendAndClose(&pb.StageReply{Fragments: staged.Fragments, Bytes: staged.Bytes})
}

// recvFirst receives a stage's first message and the transaction it
// names.
func recvFirst(stream stageStream) (*pb.StageRequest, certification.TxnID, error) {
	first, err := stream.Recv()
	if err != nil {
		return nil, certification.TxnID{}, err
	}
	if first.Txn.GetOrigin() == "" {
		return nil, certification.TxnID{}, status.Error(codes.InvalidArgument, "the first message of a Stage stream must carry the transaction id")
	}
	return first, txnOf(first.Txn), nil
}

// stageStream is the receiving side of Stage and StageCopy.
type stageStream interface {
	Recv() (*pb.StageRequest, error)
}

// noStageEnd is a Stage's end check: the agent closes its side, and
// StageEnd belongs to StageCopy.
func noStageEnd(end *pb.StageEnd, _ StagedWriteset) error {
	if end != nil {
		return status.Error(codes.InvalidArgument, "StageEnd closes a StageCopy, not a Stage")
	}
	return nil
}

// receiveStage spools first and every later fragment of the stream into
// txn's spool file until the client closes its side, each one handed to
// copied once it is written, checks how the stream ended (ended: the
// StageEnd it carried, if any, against what was spooled), and seals the
// file (synced, in a group). On an error the stage is discarded. The
// stage is not complete yet: no request may claim it before the caller
// says so.
func (s *Service) receiveStage(stream stageStream, txn certification.TxnID, first *pb.StageRequest, idleMax time.Duration,
	copied func([]byte), ended func(*pb.StageEnd, StagedWriteset) error) (StagedWriteset, error) {
	f, err := s.staging.begin(txn, idleMax)
	if err != nil {
		return StagedWriteset{}, err
	}
	end, err := s.spool(stream, txn, first, f, copied)
	if err == nil {
		err = ended(end, s.staging.staged(txn))
	}
	if err == nil {
		err = s.staging.seal(txn, f)
	}
	if closeErr := f.Close(); err == nil && closeErr != nil {
		err = status.Errorf(codes.Internal, "write the spool file: %v", closeErr)
	}
	if err != nil {
		s.staging.discard(txn)
		return StagedWriteset{}, err
	}
	return s.staging.staged(txn), nil
}

// spool writes msg's fragment and every later one to f until the client
// closes its side, checksumming the fragments as it goes
// (StagedWriteset.Checksum), and returns the StageEnd the stream ended
// with, if any: nothing may follow it.
func (s *Service) spool(stream stageStream, txn certification.TxnID, msg *pb.StageRequest, f *os.File, copied func([]byte)) (*pb.StageEnd, error) {
	w := bufio.NewWriterSize(f, 1<<20)
	var end *pb.StageEnd
	var checksum uint32
	for {
		if msg.Txn != nil && txnOf(msg.Txn) != txn {
			return nil, status.Error(codes.InvalidArgument, "a Stage stream carries one transaction")
		}
		if end != nil {
			return nil, status.Error(codes.InvalidArgument, "a message follows the StageEnd of a StageCopy")
		}
		if len(msg.Fragment) > 0 {
			checksum = logentry.SpanChecksum(checksum, msg.Fragment)
			if err := s.spoolFragment(w, txn, msg.Fragment, checksum); err != nil {
				return nil, err
			}
			copied(msg.Fragment)
		}
		end = msg.End
		var err error
		msg, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if err := w.Flush(); err != nil {
		return nil, status.Errorf(codes.Internal, "write the spool file: %v", err)
	}
	return end, nil
}

// spoolFragment checks one fragment and appends it to the spool: its
// length (uvarint), then its bytes; checksum is the stage's with it.
func (s *Service) spoolFragment(w *bufio.Writer, txn certification.TxnID, fragment []byte, checksum uint32) error {
	if n, limit := len(fragment), s.cfg.Limits.WritesetBytesMax; n > limit {
		return status.Errorf(codes.ResourceExhausted,
			"a fragment of %d bytes is over the limit of %d (--writeset-bytes-max): each fragment becomes one log entry", n, limit)
	}
	if err := checkEncodedWriteset(fragment); err != nil {
		return status.Errorf(codes.InvalidArgument, "fragment %d: %v", s.staging.fragments(txn)+1, err)
	}
	var length [binary.MaxVarintLen64]byte
	lengthBytes := binary.PutUvarint(length[:], uint64(len(fragment)))
	if err := s.staging.reserve(txn, len(fragment), lengthBytes+len(fragment), checksum); err != nil {
		return err
	}
	if _, err := w.Write(length[:lengthBytes]); err != nil {
		return status.Errorf(codes.Internal, "write the spool file: %v", err)
	}
	if _, err := w.Write(fragment); err != nil {
		return status.Errorf(codes.Internal, "write the spool file: %v", err)
	}
	return nil
}

// fragments is how many fragments of txn were staged so far.
func (a *stagingArea) fragments(txn certification.TxnID) uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.txns[txn].staged.Fragments
}

// staged is what txn's stage holds.
func (a *stagingArea) staged(txn certification.TxnID) StagedWriteset {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.txns[txn].staged
}

// checkEncodedWriteset checks that b decodes as a Writeset whose changes
// parse (parseChange), reading it in place: every fragment becomes a log
// entry every replica must decode.
func checkEncodedWriteset(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errors.New("malformed writeset")
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("malformed writeset: field %d", num)
		}
		if num == writesetChangesField {
			if typ != protowire.BytesType {
				return fmt.Errorf("malformed writeset: changes encoded as wire type %d", typ)
			}
			raw, _ := protowire.ConsumeBytes(b)
			if _, err := parseChange(raw); err != nil {
				return err
			}
		}
		b = b[m:]
	}
	return nil
}

// spoolReader reads a spool file's fragments back, one at a time, into
// one reused buffer.
type spoolReader struct {
	f   *os.File
	r   *bufio.Reader
	buf []byte
}

func openSpool(path string) (*spoolReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &spoolReader{f: f, r: bufio.NewReaderSize(f, 1<<20)}, nil
}

// next returns the next fragment, valid until the next call.
func (r *spoolReader) next() ([]byte, error) {
	n, err := binary.ReadUvarint(r.r)
	if err != nil {
		return nil, fmt.Errorf("read the spool file %s: %w", r.f.Name(), err)
	}
	if n > uint64(DefaultLimits.WritesetBytesMax) {
		return nil, fmt.Errorf("spool file %s: a fragment of %d bytes", r.f.Name(), n)
	}
	if uint64(cap(r.buf)) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(r.r, r.buf); err != nil {
		return nil, fmt.Errorf("read the spool file %s: %w", r.f.Name(), err)
	}
	return r.buf, nil
}

func (r *spoolReader) close() { r.f.Close() }
