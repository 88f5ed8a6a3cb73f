package cluster

import (
	"fmt"
	"strconv"
)

// checkDDLTrust refuses to change an existing cluster's --trust-ddl-roles
// while one of its proxies runs: up only starts what is not running, so a
// running proxy would go on with the old setting while cluster.json said
// the new one. Each proxy writes the setting into its replica's database
// when it starts (replica.SetDDLTrust), so after `tashkent down` the next
// up applies it everywhere.
func checkDDLTrust(st *State, o Options) error {
	if o.TrustDDLRoles == nil || *o.TrustDDLRoles == st.TrustDDLRoles {
		return nil
	}
	for _, r := range st.Replicas {
		if r.Proxy.PID != 0 && proxyIdentity(&r.Proxy).check(r.Proxy.PID) == nil {
			return fmt.Errorf("the cluster in %s runs its proxies with --trust-ddl-roles=%s and %s's proxy is running (pid %d): "+
				"run `tashkent down --data-dir %s` first, then `tashkent up --trust-ddl-roles=%s`",
				st.Dir, strconv.FormatBool(st.TrustDDLRoles), r.Name, r.Proxy.PID, st.Dir, strconv.FormatBool(*o.TrustDDLRoles))
		}
	}
	return nil
}
