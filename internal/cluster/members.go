package cluster

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tashkent-db/tashkent/internal/pgserver"
)

// Replica membership. Each replica has an index, 1 to replicasMax, fixed
// for its life: its name (replicaK), its directory (DIR/replicaK) and its
// agent's --replica-index, which offsets its sequences (every sequence
// advances by the agents' --sequence-stride, 16, so a replica can join
// without changing anyone's sequences). Removing a replica frees its
// index; the next one added takes the smallest free index. Every commit of
// the removed replica is in the certifier's log, and the agent aligns each
// sequence, once it has caught up, past the values of the column that
// owns it and of every column whose default calls it: the values the
// index handed out before are never handed out again. A sequence that no
// column owns or calls in its default (nextval() in the application's own
// statements) is tied to no values: after a copy it continues from the
// donor's position, and may hand out again what this index handed out
// before (docs/GUARANTEES.md, limitations). The same holds for a rebuild.

// Rebuilt records a replica's last rebuild (`tashkent replica rebuild`, or
// the supervisor's after its agent halted).
type Rebuilt struct {
	At        time.Time `json:"at"`
	Donor     string    `json:"donor"`
	Reason    string    `json:"reason"`
	Automatic bool      `json:"automatic"`
}

// replicaName is the name of replica index k.
func replicaName(k int) string { return "replica" + strconv.Itoa(k) }

// newReplica is the record of replica index k of the cluster in dir: its
// layout, and its PostgreSQL port when the cluster's ports derive from a
// base port. Nothing runs yet.
func newReplica(dir string, k, basePort int) (*Replica, error) {
	name := replicaName(k)
	rd := filepath.Join(dir, name)
	pgdata := filepath.Join(rd, "pgdata")
	r := &Replica{Name: name, Index: k, Dir: rd}
	r.Postgres = Postgres{DataDir: pgdata, Log: filepath.Join(pgdata, pgserver.LogFile)}
	if basePort > 0 {
		r.Postgres.Port = basePort + k - 1
	}
	r.Agent = Agent{Socket: filepath.Join(pgdata, agentSocketName), Log: filepath.Join(rd, "agent.log"),
		Config: filepath.Join(rd, agentConfigName)}
	if len(r.Agent.Socket) > unixSocketPathMax {
		return nil, fmt.Errorf("the path of %s's agent socket, %s, is longer than a Unix socket's %d bytes: "+
			"give `tashkent up` a --data-dir with a shorter path", name, r.Agent.Socket, unixSocketPathMax)
	}
	return r, nil
}

// numberReplicas gives replicas recorded without an index their position
// (1-based): an index is always recorded, but a cluster.json without the
// field is still a cluster whose replicas were numbered so.
func (s *State) numberReplicas() {
	for i, r := range s.Replicas {
		if r.Index == 0 {
			r.Index = i + 1
		}
	}
}

// ReplicaByIndex returns replica index k, or nil.
func (s *State) ReplicaByIndex(k int) *Replica {
	for _, r := range s.Replicas {
		if r.Index == k {
			return r
		}
	}
	return nil
}

// indexes lists the replicas' indexes, in order.
func (s *State) indexes() []int {
	var ks []int
	for _, r := range s.Replicas {
		ks = append(ks, r.Index)
	}
	slices.Sort(ks)
	return ks
}

// nextFreeIndex is the smallest index no replica has.
func (s *State) nextFreeIndex() (int, error) {
	for k := 1; k <= replicasMax; k++ {
		if s.ReplicaByIndex(k) == nil {
			return k, nil
		}
	}
	return 0, fmt.Errorf("the cluster in %s has %d replicas, the most a cluster can have "+
		"(every sequence advances by the agents' --sequence-stride, %d, one value per replica)", s.Dir, len(s.Replicas), replicasMax)
}

// addReplica records r, keeping the replicas ordered by index.
func (s *State) addReplica(r *Replica) {
	s.Replicas = append(s.Replicas, r)
	slices.SortFunc(s.Replicas, func(a, b *Replica) int { return a.Index - b.Index })
}

// dropReplica forgets replica r.
func (s *State) dropReplica(r *Replica) {
	s.Replicas = slices.DeleteFunc(s.Replicas, func(x *Replica) bool { return x == r })
}

// errNoReplica says that index k names no replica, and which do.
func (s *State) errNoReplica(k int) error {
	return fmt.Errorf("the cluster in %s has no replica %d (its replicas: %v)", s.Dir, k, s.indexes())
}
