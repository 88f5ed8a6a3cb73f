package faults

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

// Config configures one run of the harness.
type Config struct {
	// Dir is the output directory: the cluster (cluster/), the histories,
	// adya's reports, faults.json and summary.json. Kept after the run.
	Dir string
	// Binary is the tashkent executable run as certifier and agents.
	Binary string
	// Duration is how long the workloads run under faults.
	Duration time.Duration
	// ClientsPerReplica is the number of list-append clients on each
	// replica (the bank and long-fork workloads add one client each per
	// replica).
	ClientsPerReplica int
	// Certifiers is the size of the certifier group (0 or 1: a single
	// certifier; 3 or 5: a Raft group, `tashkent up --certifiers N`).
	Certifiers int
	// Mode is the cluster's durability mode (`tashkent up --mode`; empty:
	// mw). In mode ed a certifier kill -9 fails the versions it decided
	// and had not made durable (ed.go).
	Mode cluster.Mode
	// FastShare is, in mode ed, the percentage of list-append transactions
	// run fast (SET LOCAL synchronous_commit = off); the rest are safe.
	FastShare int
	// FaultWriteDelay, when positive, starts the single certifier with its
	// hidden fault flags --unsafe-deliver-before-durable and
	// --unsafe-fault-write-delay: it sleeps this long before writing each
	// batch, so that a kill -9 lands while decided versions are not yet
	// durable and fails them (mode ed).
	FaultWriteDelay time.Duration
	// FaultPeerDelay, when positive, starts the members of a certifier
	// group with the hidden fault flag --unsafe-fault-peer-delay: every
	// Raft message between them arrives this much later, so that a leader
	// killed or cut off holds versions it decided that no other member
	// has, which fail (mode ed).
	FaultPeerDelay time.Duration
	// Faults are the kinds injected; empty runs without faults. Group kinds
	// (kill-leader, ...) need Certifiers > 1, the single certifier's kinds
	// (kill-certifier, partition-replica, ...) a single certifier.
	Faults []FaultKind
	// FaultHold is how long a process stays dead or paused; FaultGap is the
	// rest between two faults.
	FaultHold time.Duration
	FaultGap  time.Duration
	// DisconnectEvery: with ClientDisconnect, one list-append transaction in
	// DisconnectEvery closes its connection after its first statement.
	DisconnectEvery int
	// ConvergeTimeout bounds the wait for replicas to converge once faults
	// are healed (30 s by default).
	ConvergeTimeout time.Duration
	// SelfTest runs the detector self-test after the checks: the certifier
	// restarted without its conflict check must be caught.
	SelfTest         bool
	SelfTestDuration time.Duration
	// KeepCluster leaves the cluster running at the end (for inspection;
	// stop it with `tashkent down --data-dir DIR/cluster`).
	KeepCluster bool
	Seed        uint64
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// ShortProfile is what CI runs on every change (internal/faults's test):
// every fault kind at least once, in well under a minute of workload.
func ShortProfile() Config {
	return Config{
		Duration:          40 * time.Second,
		ClientsPerReplica: 2,
		Faults:            append([]FaultKind(nil), AllFaults...),
		FaultHold:         1500 * time.Millisecond,
		FaultGap:          1500 * time.Millisecond,
		DisconnectEvery:   40,
		ConvergeTimeout:   30 * time.Second,
		SelfTest:          true,
		SelfTestDuration:  8 * time.Second,
		Seed:              1,
	}
}

// GroupShortProfile is ShortProfile with a 3-member certifier group and
// every group fault kind.
func GroupShortProfile() Config {
	c := ShortProfile()
	c.Certifiers = 3
	c.Faults = FaultsFor(3)
	return c
}

// LongProfile is `make faults`: ten minutes of faults, each kind many
// times, against a 3-member certifier group.
func LongProfile() Config {
	c := GroupShortProfile()
	c.Duration = 10 * time.Minute
	c.ClientsPerReplica = 3
	c.FaultHold = 3 * time.Second
	c.FaultGap = 5 * time.Second
	c.SelfTestDuration = 15 * time.Second
	return c
}

// EDFaults are the kinds of the ed profile: kill -9 of the certifier
// every other fault (each one fails the versions it had not made durable),
// between kill -9 of the other processes.
var EDFaults = []FaultKind{KillCertifier, KillPostgres, KillCertifier, KillAgent, KillCertifier, KillBackend,
	ClientDisconnect}

// EDShortProfile is what CI runs for mode ed (internal/faults's test): a
// single certifier that waits 300 ms before writing each batch, so that
// its kills fail versions, half of the list-append transactions fast, and
// no self-test (the mw profile runs it).
func EDShortProfile() Config {
	c := ShortProfile()
	c.Mode = cluster.ModeED
	c.FastShare = 50
	c.FaultWriteDelay = 300 * time.Millisecond
	c.Duration = 35 * time.Second
	c.Faults = append([]FaultKind(nil), EDFaults...)
	c.SelfTest = false
	return c
}

// EDGroupFaults are the kinds of the ed-group profile: the leader killed
// or cut off every other fault (each one fails the versions it decided
// that no other member received), between kill -9 of the other
// processes.
var EDGroupFaults = []FaultKind{KillLeader, KillPostgres, PartitionLeader, KillAgent, KillLeader, KillBackend,
	ClientDisconnect}

// EDGroupShortProfile is EDShortProfile against a 3-member certifier
// group whose members hear each other 50 ms late (FaultPeerDelay).
func EDGroupShortProfile() Config {
	c := EDShortProfile()
	c.Certifiers = 3
	c.FaultWriteDelay = 0
	c.FaultPeerDelay = 50 * time.Millisecond
	c.Faults = append([]FaultKind(nil), EDGroupFaults...)
	return c
}

// Profile returns the named profile ("short", "long", "ed" or
// "ed-group").
func Profile(name string) (Config, error) {
	switch name {
	case "short":
		return ShortProfile(), nil
	case "long":
		return LongProfile(), nil
	case "ed":
		return EDShortProfile(), nil
	case "ed-group":
		return EDGroupShortProfile(), nil
	}
	return Config{}, fmt.Errorf("profile must be short, long, ed or ed-group, not %q", name)
}

// mode is the cluster's durability mode (mw by default).
func (c Config) mode() cluster.Mode {
	if c.Mode == "" {
		return cluster.ModeMW
	}
	return c.Mode
}

func (c Config) validate() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("the output directory is required")
	case c.Binary == "":
		return fmt.Errorf("the tashkent binary is required")
	case c.Duration <= 0:
		return fmt.Errorf("the duration must be positive")
	case c.ClientsPerReplica < 1:
		return fmt.Errorf("at least one client per replica is needed")
	case c.ConvergeTimeout <= 0:
		return fmt.Errorf("the convergence timeout must be positive")
	case c.KeepCluster && c.partitions():
		return fmt.Errorf("a kept cluster cannot have partition faults: the relay to the certifier's namespace ends with the run")
	case c.Certifiers != 0 && c.Certifiers != 1 && c.Certifiers != 3 && c.Certifiers != 5:
		return fmt.Errorf("the certifier group must have 1, 3 or 5 members, not %d", c.Certifiers)
	case c.mode() != cluster.ModeMW && c.mode() != cluster.ModeED:
		return fmt.Errorf("the fault test runs mode mw or ed, not %q", c.Mode)
	case c.FaultPeerDelay > 0 && c.Certifiers <= 1:
		return fmt.Errorf("the delay between certifier members needs a certifier group (--certifiers 3)")
	case c.FastShare < 0 || c.FastShare > 100:
		return fmt.Errorf("the fast share is a percentage, not %d", c.FastShare)
	case c.FastShare > 0 && c.mode() != cluster.ModeED:
		return fmt.Errorf("fast transactions need mode ed (a fast share of %d%% in mode %s)", c.FastShare, c.mode())
	case c.FaultWriteDelay > 0 && c.Certifiers > 1:
		return fmt.Errorf("the certifier's write delay is a fault point of a single certifier")
	}
	for _, k := range c.Faults {
		if groupKind(k) && c.Certifiers <= 1 {
			return fmt.Errorf("fault %s needs a certifier group (--certifiers 3)", k)
		}
		if singleCertifierKind(k) && c.Certifiers > 1 {
			return fmt.Errorf("fault %s is for a single certifier; with a group use %s", k, joinKinds(GroupFaults))
		}
	}
	return nil
}

// partitions reports whether a partition fault is wanted: the certifier
// then runs in a network namespace of its own.
func (c Config) partitions() bool {
	return slices.Contains(c.Faults, PartitionCertifier) || slices.Contains(c.Faults, PartitionReplica)
}
