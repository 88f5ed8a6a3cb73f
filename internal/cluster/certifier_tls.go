package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/grpc"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
	"github.com/tashkent-db/tashkent/internal/certs"
	"github.com/tashkent-db/tashkent/internal/grpctls"
)

// Certifier TLS of a local cluster (`tashkent up --certifier-tls`):
// mutual TLS on every certifier channel (agents to members, members among
// themselves, status). Up creates, in <dir>/certifier-tls, a CA and one
// certificate per process, for 127.0.0.1 and localhost, keys mode 0600:
//
//	ca.crt ca.key                 the cluster CA (ca.key signs; keep it)
//	certifier.crt/.key            a single certifier
//	certifier-K.crt/.key          member K of a certifier group
//	replicaN.crt/.key             replica N's agent
//	admin.crt/.key                tashkent status, certifier members, tests
//
// Files that exist are kept, so a restart (`up` again) reuses them, and an
// operator may replace any of them with their own (same CA). The choice is
// made when the cluster is created and recorded in cluster.json; it is off
// by default (see docs/OPERATIONS.md for why).

// certifierTLSDirName is the directory of the files, inside the cluster's.
const certifierTLSDirName = "certifier-tls"

// adminTLSName is the certificate of the tools that query the certifier.
const adminTLSName = "admin"

// CertifierTLS records a cluster's certifier TLS.
type CertifierTLS struct {
	// Dir holds the CA and every process's certificate and key.
	Dir string `json:"dir"`
}

// Files are the CA, certificate and key of the process called name.
func (t *CertifierTLS) Files(name string) grpctls.Files {
	return grpctls.Files{
		CA:   filepath.Join(t.Dir, "ca.crt"),
		Cert: filepath.Join(t.Dir, name+".crt"),
		Key:  filepath.Join(t.Dir, name+".key"),
	}
}

// tlsName is the certificate name of a certifier (member).
func (c *Certifier) tlsName() string {
	if c.ID == 0 {
		return "certifier"
	}
	return "certifier-" + strconv.Itoa(c.ID)
}

// certifierTLSFiles are the files of the process called name, or none
// (plaintext) when the cluster runs without certifier TLS.
func (s *State) certifierTLSFiles(name string) grpctls.Files {
	if s.CertifierTLS == nil {
		return grpctls.Files{}
	}
	return s.CertifierTLS.Files(name)
}

// AdminTLSFiles are the files a tool uses to talk to the cluster's
// certifiers (none without certifier TLS).
func (s *State) AdminTLSFiles() grpctls.Files { return s.certifierTLSFiles(adminTLSName) }

// CertifierDialOptions dial the cluster's certifiers as a tool (status,
// tests): plaintext, or mutual TLS with the admin certificate.
func (s *State) CertifierDialOptions() ([]grpc.DialOption, error) {
	return s.AdminTLSFiles().DialOptions()
}

// QueryCertifier is the package's QueryCertifier with this cluster's
// certifier TLS, if any.
func (s *State) QueryCertifier(ctx context.Context, addr string) (*pb.StatusReply, error) {
	dial, err := s.CertifierDialOptions()
	if err != nil {
		return nil, err
	}
	return QueryCertifier(ctx, addr, dial...)
}

// newCertifierTLS is the record of a new cluster: TLS on or off.
func newCertifierTLS(dir string, on bool) *CertifierTLS {
	if !on {
		return nil
	}
	return &CertifierTLS{Dir: filepath.Join(dir, certifierTLSDirName)}
}

// checkCertifierTLS refuses to turn certifier TLS on for a cluster created
// without it: its running processes would keep talking plaintext.
func checkCertifierTLS(st *State, o Options) error {
	if o.CertifierTLS && st.CertifierTLS == nil {
		return fmt.Errorf("the cluster in %s was created without --certifier-tls (certifier TLS is chosen when the cluster is "+
			"created; `tashkent down`, then start its processes yourself with the --certifier-tls-* flags, or create a new cluster)", st.Dir)
	}
	return nil
}

// ensureCertifierTLS creates the CA and every process's certificate that
// does not exist yet.
func ensureCertifierTLS(st *State) error {
	t := st.CertifierTLS
	if t == nil {
		return nil
	}
	if err := os.MkdirAll(t.Dir, 0o700); err != nil {
		return err
	}
	ca := t.Files(adminTLSName).CA
	caKey := filepath.Join(t.Dir, "ca.key")
	if !exists(ca) {
		if err := certs.WriteCA(ca, caKey, "tashkent cluster CA ("+st.Dir+")"); err != nil {
			return fmt.Errorf("generating the certifier TLS CA: %w", err)
		}
	}
	names := []string{adminTLSName}
	for _, c := range st.CertifierMembers() {
		names = append(names, c.tlsName())
	}
	for _, r := range st.Replicas {
		names = append(names, r.Name)
	}
	for _, name := range names {
		f := t.Files(name)
		if exists(f.Cert) && exists(f.Key) {
			continue
		}
		if err := certs.Issue(ca, caKey, f.Cert, f.Key, name, []string{"127.0.0.1", "localhost"}); err != nil {
			return fmt.Errorf("generating the certifier TLS certificate of %s: %w", name, err)
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// writeCertifierTLS tells `up`'s user where the files are and the flags
// the tools need.
func (s *State) writeCertifierTLS(w io.Writer) {
	if s.CertifierTLS == nil {
		return
	}
	fmt.Fprintf(w, "Certifier channels use mutual TLS (CA and certificates in %s); to ask the members yourself:\n", s.CertifierTLS.Dir)
	fmt.Fprintf(w, "  tashkent certifier members --certifier %s %s\n", hostPort(s.Certifier.Port), strings.Join(s.AdminTLSFiles().Args(), " "))
}
