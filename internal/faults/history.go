package faults

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OpType is the type of one history operation, as Elle and Jepsen name
// them: an invocation, then exactly one completion on the same process.
type OpType string

const (
	Invoke OpType = "invoke"
	// OK: the transaction committed (its COMMIT was acknowledged).
	OK OpType = "ok"
	// Fail: the transaction certainly did not commit (SQLSTATE 40001, an
	// error before COMMIT was sent).
	Fail OpType = "fail"
	// Info: the outcome is unknown (the connection broke during COMMIT).
	Info OpType = "info"
)

// MopKind is a list-append micro-operation.
type MopKind string

const (
	Append MopKind = "append"
	Read   MopKind = "r"
)

// Mop is one micro-operation of a list-append transaction. For a read,
// Values is the list read (nil with Nil set when the key did not exist, or
// when the read is not known, in an invocation).
type Mop struct {
	Kind   MopKind
	Key    int
	Value  int   // the appended element
	Values []int // a read's result
	Nil    bool  // a read of nothing (key absent, or result unknown)
}

// Op is one line of the history.
type Op struct {
	Index   int
	Type    OpType
	Process int
	Time    time.Duration // since the history started
	Value   []Mop
	Error   string
}

// History records list-append operations from concurrent clients in the
// order they happened, and writes them as Jepsen's history.edn, the format
// Elle and adya read.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []Op
}

// NewHistory starts an empty history.
func NewHistory() *History { return &History{start: time.Now()} }

// Add appends an operation and returns its index.
func (h *History) Add(t OpType, process int, value []Mop, errText string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	op := Op{Index: len(h.ops), Type: t, Process: process, Time: time.Since(h.start), Value: value, Error: errText}
	h.ops = append(h.ops, op)
	return op.Index
}

// SetOutcome changes the type and error of the completion at index: the
// outcome of a fast transaction of mode ed is known only after the run.
func (h *History) SetOutcome(index int, t OpType, errText string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops[index].Type, h.ops[index].Error = t, errText
}

// TypeAt returns the type of the operation at index.
func (h *History) TypeAt(index int) OpType {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ops[index].Type
}

// Ops returns a copy of the operations so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Counts returns how many completions of each type the history holds.
func (h *History) Counts() map[OpType]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[OpType]int{}
	for _, op := range h.ops {
		if op.Type != Invoke {
			out[op.Type]++
		}
	}
	return out
}

// WriteEDN writes one op map per line:
//
//	{:index 0, :type :invoke, :f :txn, :process 3, :time 1200, :value [[:append 4 17] [:r 5 nil]]}
func (h *History) WriteEDN(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, op := range h.Ops() {
		if _, err := bw.WriteString(op.EDN() + "\n"); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// EDN renders one operation.
func (op Op) EDN() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{:index %d, :type :%s, :f :txn, :process %d, :time %d, :value [", op.Index, op.Type, op.Process, op.Time.Nanoseconds())
	for i, m := range op.Value {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.EDN())
	}
	b.WriteByte(']')
	if op.Error != "" {
		b.WriteString(", :error ")
		b.WriteString(strconv.Quote(op.Error))
	}
	b.WriteByte('}')
	return b.String()
}

// EDN renders one micro-operation.
func (m Mop) EDN() string {
	switch {
	case m.Kind == Append:
		return fmt.Sprintf("[:append %d %d]", m.Key, m.Value)
	case m.Nil:
		return fmt.Sprintf("[:r %d nil]", m.Key)
	}
	parts := make([]string, len(m.Values))
	for i, v := range m.Values {
		parts[i] = strconv.Itoa(v)
	}
	return fmt.Sprintf("[:r %d [%s]]", m.Key, strings.Join(parts, " "))
}
