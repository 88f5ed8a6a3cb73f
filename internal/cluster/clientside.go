package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/tashkent-db/tashkent/internal/certs"
)

// The proxies' client side: every proxy of a local cluster serves TLS with
// one self-signed certificate for 127.0.0.1 and localhost, generated in
// the cluster directory (tls/server.crt, tls/server.key) the first time and
// kept afterwards; clients that verify use server.crt as their root
// (sslrootcert). Replace the two files with your own to use another
// certificate.

// tlsFilesMu serializes tlsFiles: `tashkent up` starts proxies in
// parallel, and two first uses would each write a pair over the other's.
var tlsFilesMu sync.Mutex

// tlsFiles returns the cluster's certificate and key, creating them if
// they do not exist yet.
func tlsFiles(dir string) (cert, key string, err error) {
	tlsFilesMu.Lock()
	defer tlsFilesMu.Unlock()
	tlsDir := filepath.Join(dir, "tls")
	cert, key = filepath.Join(tlsDir, "server.crt"), filepath.Join(tlsDir, "server.key")
	if _, err := os.Stat(cert); err == nil {
		return cert, key, nil
	}
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return "", "", err
	}
	if err := certs.WriteSelfSigned(cert, key, "tashkent proxy", []string{"127.0.0.1", "localhost"}); err != nil {
		return "", "", fmt.Errorf("generating the proxies' TLS certificate: %w", err)
	}
	return cert, key, nil
}

// clientSideArgs are the proxy flags for replica r: its index for the
// per-replica sequence offsets (its position in the cluster, 1-based) and
// the TLS files, and --trust-ddl-roles when the cluster records it.
func (u *upper) clientSideArgs(r *Replica) ([]string, error) {
	index := 0
	for i, other := range u.st.Replicas {
		if other == r {
			index = i + 1
		}
	}
	if index == 0 {
		return nil, fmt.Errorf("replica %s is not in the cluster", r.Name)
	}
	cert, key, err := tlsFiles(u.st.Dir)
	if err != nil {
		return nil, err
	}
	args := []string{"--replica-index", strconv.Itoa(index), "--tls-cert", cert, "--tls-key", key}
	if u.st.TrustDDLRoles {
		args = append(args, "--trust-ddl-roles")
	}
	return args, nil
}
