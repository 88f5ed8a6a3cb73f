package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tashkent-db/tashkent/api/certifierpb"
)

// removedDirName is the directory, inside the cluster's, that keeps the
// directories of removed replicas.
const removedDirName = "removed"

// RemoveReplica takes replica k out of the cluster in o.Dir: its agent is
// stopped (it closes the gate and ends its clients' sessions), then its
// PostgreSQL, and it is removed from cluster.json. Its directory is moved
// to DIR/removed/replicaK-<time>/, or deleted with o.DeleteData, and
// every certifier member forgets it. It returns where the data went (""
// when deleted).
func RemoveReplica(ctx context.Context, o ReplicaOptions, k int) (*State, string, error) {
	u, unlock, err := openCluster(o)
	if err != nil {
		return nil, "", err
	}
	defer unlock()
	r := u.st.ReplicaByIndex(k)
	if r == nil {
		return u.st, "", u.st.errNoReplica(k)
	}
	kept, err := u.removeReplica(ctx, r, o.DeleteData)
	return u.st, kept, err
}

func (u *upper) removeReplica(ctx context.Context, r *Replica, deleteData bool) (string, error) {
	if len(u.st.Replicas) == 1 {
		return "", fmt.Errorf("%s is the cluster's only replica: stop the cluster with `tashkent down --data-dir %s` instead", r.Name, u.st.Dir)
	}
	if err := u.stopReplica(ctx, r); err != nil {
		return "", fmt.Errorf("%s: %w (it stays in the cluster)", r.Name, err)
	}
	u.mu.Lock()
	u.st.dropReplica(r)
	u.mu.Unlock()
	if err := u.save(); err != nil {
		return "", err
	}
	u.forgetOnCertifiers(ctx, r.Name)
	u.removeCertifierTLS(r)
	if deleteData {
		if err := os.RemoveAll(r.Dir); err != nil {
			return "", fmt.Errorf("%s is out of the cluster, but deleting %s failed: %w", r.Name, r.Dir, err)
		}
		u.progress("%s: removed from the cluster; %s deleted", r.Name, r.Dir)
		return "", nil
	}
	kept, err := keepRemovedDir(u.st.Dir, r)
	if err != nil {
		return "", fmt.Errorf("%s is out of the cluster, but moving %s aside failed: %w", r.Name, r.Dir, err)
	}
	u.progress("%s: removed from the cluster; its data is kept in %s", r.Name, kept)
	return kept, nil
}

// keepRemovedDir moves a removed replica's directory to
// DIR/removed/replicaK-<UTC time>, so that its index and directory name
// are free for a replica added later.
func keepRemovedDir(dir string, r *Replica) (string, error) {
	if _, err := os.Stat(r.Dir); os.IsNotExist(err) {
		return "", nil
	}
	parent := filepath.Join(dir, removedDirName)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		return "", err
	}
	kept := filepath.Join(parent, r.Name+"-"+time.Now().UTC().Format("20060102T150405Z"))
	if err := os.Rename(r.Dir, kept); err != nil {
		return "", err
	}
	return kept, nil
}

// removeCertifierTLS deletes a removed replica's certificate and key, so
// that a replica added later under its name gets its own. (There is no
// revocation: the certificate stays valid for whoever kept a copy.)
func (u *upper) removeCertifierTLS(r *Replica) {
	if u.st.CertifierTLS == nil {
		return
	}
	f := u.st.CertifierTLS.Files(r.Name)
	os.Remove(f.Cert)
	os.Remove(f.Key)
}

// forgetWait bounds how long a certifier may go on counting the removed
// replica's session as open: the end of the agent's stream reaches it a
// moment after the agent exits.
const forgetWait = 10 * time.Second

// forgetOnCertifiers asks every running certifier member to forget the
// removed replica, which it would otherwise go on listing as disconnected
// (the dashboard, tashkent_certifier_replica_connected and the alert on
// it). A member that does not is named; the replica is removed anyway, and
// a certifier's list starts empty when it restarts.
func (u *upper) forgetOnCertifiers(ctx context.Context, name string) {
	dial, err := u.st.CertifierDialOptions()
	if err != nil {
		u.progress("%s: the certifiers may still list it: %v", name, err)
		return
	}
	for _, c := range u.st.CertifierMembers() {
		if c.PID == 0 || certifierIdentity(c).check(c.PID) != nil {
			continue
		}
		if err := forgetReplica(ctx, hostPort(c.Port), name, dial); err != nil {
			u.progress("%s: the certifier at %s still lists it: %v", name, hostPort(c.Port), err)
		}
	}
}

// forgetReplica asks the certifier member at addr to forget replica name,
// again while it still counts the replica's session as open.
func forgetReplica(ctx context.Context, addr, name string, dial []grpc.DialOption) error {
	conn, err := dialCertifier(addr, dial...)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := pb.NewCertifierClient(conn)
	deadline := time.Now().Add(forgetWait)
	for {
		cctx, cancel := context.WithTimeout(ctx, statusTimeout)
		_, err := c.ForgetReplica(cctx, &pb.ForgetReplicaRequest{Name: name})
		cancel()
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
