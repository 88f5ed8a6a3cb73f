package pgwire

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"sync"
)

// ProxyKey is the cancel key the proxy gives a client in BackendKeyData.
type ProxyKey struct {
	ProcessID uint32
	SecretKey uint32
}

// BackendKey is the cancel key of a PostgreSQL backend and where that backend is.
type BackendKey struct {
	Addr      string // host:port of the PostgreSQL server
	ProcessID uint32
	// SecretKey is the backend's secret: 4 bytes with protocol 3.0 (PostgreSQL
	// 15); protocol 3.2 allows up to 256.
	SecretKey []byte
}

// Registry maps the keys the proxy handed out to the keys of the PostgreSQL
// backends behind them. It is safe for concurrent use; the zero value is ready.
type Registry struct {
	mu sync.Mutex
	m  map[ProxyKey]BackendKey
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{} }

// registryAttemptsMax bounds the search for an unused random key; with 2^62
// possible keys a collision is already astronomically unlikely.
const registryAttemptsMax = 16

// Register stores backend under a fresh random proxy key and returns that key.
// The process id looks like a PID (positive int32) because some clients print it.
func (r *Registry) Register(backend BackendKey) (ProxyKey, error) {
	backend.SecretKey = append([]byte(nil), backend.SecretKey...)
	var b [8]byte
	for range registryAttemptsMax {
		if _, err := rand.Read(b[:]); err != nil {
			return ProxyKey{}, err
		}
		k := ProxyKey{
			ProcessID: binary.BigEndian.Uint32(b[:4])&0x7fffffff | 1<<16, // >= 65536, never 0
			SecretKey: binary.BigEndian.Uint32(b[4:]),
		}
		r.mu.Lock()
		if r.m == nil {
			r.m = make(map[ProxyKey]BackendKey)
		}
		if _, taken := r.m[k]; !taken {
			r.m[k] = backend
			r.mu.Unlock()
			return k, nil
		}
		r.mu.Unlock()
	}
	return ProxyKey{}, errors.New("pgwire: no free cancel key found")
}

// Unregister forgets a key; unknown keys are ignored.
func (r *Registry) Unregister(k ProxyKey) {
	r.mu.Lock()
	delete(r.m, k)
	r.mu.Unlock()
}

// Lookup returns the backend key registered under k.
func (r *Registry) Lookup(k ProxyKey) (BackendKey, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.m[k]
	if ok {
		b.SecretKey = append([]byte(nil), b.SecretKey...)
	}
	return b, ok
}

// Len returns the number of registered keys.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
