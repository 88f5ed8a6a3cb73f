package faults

import (
	"fmt"
	"io"
	"slices"
	"time"
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

// Profile returns the named profile ("short" or "long").
func Profile(name string) (Config, error) {
	switch name {
	case "short":
		return ShortProfile(), nil
	case "long":
		return LongProfile(), nil
	}
	return Config{}, fmt.Errorf("profile must be short or long, not %q", name)
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
