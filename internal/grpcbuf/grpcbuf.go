// Package grpcbuf is a gRPC buffer pool that does not zero the buffers it
// hands out, and the protobuf codec that uses it.
//
// gRPC reads every message into a buffer from its pool, and its default
// pool clears each buffer's whole capacity before handing it out (a 32 KiB
// tier for a 20 KiB message). On the certifier's path, where every message
// is read and written once by the process that owns the buffer and the
// buffer is filled completely before it is read, that clearing was about 8%
// of the CPU of both the certifier and its clients under load. The pool
// here is the same power-of-two tiering without the clearing; gRPC only
// ever reads the bytes it has written into a buffer, so nothing from an
// earlier message can be seen.
package grpcbuf

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

const (
	tierMinShift = 8  // 256 bytes
	tierMaxShift = 20 // 1 MiB; larger buffers are allocated and dropped
)

// Pool is a mem.BufferPool of power-of-two tiers, not zeroed.
type Pool struct {
	tiers [tierMaxShift - tierMinShift + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// Shared is the pool the certifier's server and clients use.
var Shared = &Pool{}

// tierOf returns the index of the smallest tier holding size bytes, or -1
// when size is over the largest tier.
func tierOf(size int) int {
	if size <= 1<<tierMinShift {
		return 0
	}
	shift := bits.Len(uint(size - 1))
	if shift > tierMaxShift {
		return -1
	}
	return shift - tierMinShift
}

// Get returns a buffer of length size; its contents are unspecified.
func (p *Pool) Get(size int) *[]byte {
	t := tierOf(size)
	if t < 0 {
		b := make([]byte, size)
		return &b
	}
	if v, ok := p.tiers[t].Get().(*[]byte); ok {
		*v = (*v)[:size]
		return v
	}
	b := make([]byte, size, 1<<(t+tierMinShift))
	return &b
}

// Put takes back a buffer that Get returned; others are dropped.
func (p *Pool) Put(buf *[]byte) {
	c := cap(*buf)
	if c < 1<<tierMinShift || c&(c-1) != 0 {
		return
	}
	if t := tierOf(c); t >= 0 {
		p.tiers[t].Put(buf)
	}
}

// Codec is gRPC's protobuf codec with its buffers from Shared: gRPC's own
// takes them from the default pool, which zeroes them, whatever pool the
// server or channel was given. Install it with grpc.ForceServerCodecV2 and
// grpc.ForceCodecV2; it is protobuf on the wire, as before.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is the content-subtype of protobuf.
func (Codec) Name() string { return "proto" }

// Marshal encodes a protobuf message.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcbuf: cannot marshal %T, want a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size just computed
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := Shared.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		Shared.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, Shared)}, nil
}

// Unmarshal decodes a protobuf message, or a RawUnmarshaler; it keeps no
// reference to data.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	raw, isRaw := v.(RawUnmarshaler)
	m, isMessage := v.(proto.Message)
	if !isRaw && !isMessage {
		return fmt.Errorf("grpcbuf: cannot unmarshal into %T, want a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(Shared)
	defer buf.Free()
	if isRaw {
		return raw.UnmarshalRaw(buf.ReadOnlyData())
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// RawUnmarshaler is a message that decodes itself from the encoded bytes:
// Codec.Unmarshal hands them over instead of calling proto.Unmarshal, for a
// hot message with a faster decoder of its own. The bytes are only valid
// during the call.
type RawUnmarshaler interface {
	UnmarshalRaw(b []byte) error
}
