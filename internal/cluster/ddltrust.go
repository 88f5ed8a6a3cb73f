package cluster

import (
	"fmt"
	"strconv"
)

// checkDDLTrust refuses to change an existing cluster's --trust-ddl-roles
// while one of its agents runs: up only starts what is not running, so a
// running agent would go on with the old setting while cluster.json said
// the new one. Each agent writes the setting into its replica's database
// when it starts (replica.SetDDLTrust), so after `tashkent down` the next
// up applies it everywhere.
func checkDDLTrust(st *State, o Options) error {
	if o.TrustDDLRoles == nil || *o.TrustDDLRoles == st.TrustDDLRoles {
		return nil
	}
	for _, r := range st.Replicas {
		if r.Agent.PID != 0 && agentIdentity(&r.Agent).check(r.Agent.PID) == nil {
			return fmt.Errorf("the cluster in %s runs its agents with --trust-ddl-roles=%s and %s's agent is running (pid %d): "+
				"run `tashkent down --data-dir %s` first, then `tashkent up --trust-ddl-roles=%s`",
				st.Dir, strconv.FormatBool(st.TrustDDLRoles), r.Name, r.Agent.PID, st.Dir, strconv.FormatBool(*o.TrustDDLRoles))
		}
	}
	return nil
}
