package pgwire

import (
	"sync"
	"testing"
)

func TestRegistry(t *testing.T) {
	var r Registry // the zero value works
	secret := []byte{9, 8, 7, 6}
	k, err := r.Register(BackendKey{Addr: "a:1", ProcessID: 77, SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	if k.ProcessID == 0 || k.ProcessID > 0x7fffffff {
		t.Errorf("proxy PID %d does not look like a PID", k.ProcessID)
	}
	secret[0] = 0 // the registry keeps its own copy
	got, ok := r.Lookup(k)
	if !ok || got.Addr != "a:1" || got.ProcessID != 77 || string(got.SecretKey) != string([]byte{9, 8, 7, 6}) {
		t.Fatalf("Lookup = %+v, %v", got, ok)
	}
	got.SecretKey[1] = 0
	if again, _ := r.Lookup(k); again.SecretKey[1] != 8 {
		t.Fatal("Lookup returned the registry's own slice")
	}
	if _, ok := r.Lookup(ProxyKey{ProcessID: k.ProcessID, SecretKey: k.SecretKey + 1}); ok {
		t.Fatal("a wrong secret matched")
	}
	r.Unregister(k)
	r.Unregister(k) // twice is fine
	if _, ok := r.Lookup(k); ok || r.Len() != 0 {
		t.Fatal("key still registered")
	}
}

func TestRegistryConcurrentUnique(t *testing.T) {
	r := NewRegistry()
	const n = 2000
	keys := make(chan ProxyKey, n)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/4; i++ {
				k, err := r.Register(BackendKey{ProcessID: uint32(i)})
				if err != nil {
					t.Error(err)
					return
				}
				keys <- k
			}
		}()
	}
	wg.Wait()
	close(keys)
	seen := map[ProxyKey]bool{}
	for k := range keys {
		if seen[k] {
			t.Fatalf("duplicate key %+v", k)
		}
		seen[k] = true
	}
	if r.Len() != n {
		t.Fatalf("Len = %d, want %d", r.Len(), n)
	}
}
