package cluster

import "context"

// resize grows the running cluster to n replicas (replica add, one after
// the other, each copied from the serving replica with the highest
// version) or shrinks it (replica remove, highest index first, data kept
// in DIR/removed/). n 0 keeps the cluster as it is.
func (u *upper) resize(ctx context.Context, n int) error {
	if n == 0 || n == len(u.st.Replicas) {
		return nil
	}
	// A copy's agent catches up from the log before it is ready.
	u.o.ReadyTimeout = max(u.o.ReadyTimeout, catchUpTimeout)
	for len(u.st.Replicas) < n {
		if _, err := u.addReplica(ctx, 0, copyOptions{}); err != nil {
			return err
		}
	}
	for len(u.st.Replicas) > n {
		last := u.st.Replicas[len(u.st.Replicas)-1]
		if _, err := u.removeReplica(ctx, last, false); err != nil {
			return err
		}
	}
	return nil
}
