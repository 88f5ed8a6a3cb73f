package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/tashkent-db/tashkent/internal/certgroup"
	"github.com/tashkent-db/tashkent/internal/certifier"
)

const defaultCertifierListen = "127.0.0.1:7400"

// parsePeers reads id=host:port,... into a map.
func parsePeers(s string) (map[uint64]string, error) {
	out := map[uint64]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		n, err := strconv.ParseUint(id, 10, 64)
		if !ok || err != nil || n == 0 || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not id=host:port with a positive id", part)
		}
		if _, dup := out[n]; dup {
			return nil, fmt.Errorf("--peers: member id %d given twice", n)
		}
		out[n] = addr
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--peers: no member")
	}
	return out, nil
}

// openGroupMember opens this member's Raft node; its log lives beside the
// versioned log, in <data-dir>/raft.
func openGroupMember(cfg certifier.Config, id uint64, peers string, join bool, faults groupFaults, dial []grpc.DialOption,
	snapshots groupSnapshotFlags) (*certgroup.Node, error) {
	members, err := parsePeers(peers)
	if err != nil {
		return nil, err
	}
	if _, ok := members[id]; !ok {
		return nil, fmt.Errorf("--id %d is not among the members in --peers (%s)", id, peers)
	}
	return certgroup.OpenNode(certgroup.NodeConfig{
		Core: certgroup.Config{
			ID: id, Join: join, WindowVersions: cfg.WindowVersions, Decode: certifier.GroupEntryKeys,
			UnsafeSkipConflictCheck: cfg.UnsafeSkipConflictCheck,
			SnapshotEntries:         snapshots.entries,
			SnapshotBytes:           snapshots.mib << 20,
			CatchUpEntries:          snapshots.catchUp,
		},
		DataDir:   filepath.Join(cfg.DataDir, "raft"),
		Members:   members,
		NoSync:    cfg.NoSync,
		SyncDelay: cfg.SyncDelay,
		Logger:    slog.Default(),
		// The member dials its peers with the certifier TLS it serves with.
		DialOptions: dial,

		UnsafeFaultPartitionFile: faults.partitionFile,
		UnsafeFaultPeerDelay:     faults.peerDelay,
	})
}

// groupFaults are a group member's fault points (hidden flags): for fault
// tests and benchmarks only.
type groupFaults struct {
	partitionFile string
	peerDelay     time.Duration
}

func (g *groupFaults) addFlags(f *pflag.FlagSet) {
	f.StringVar(&g.partitionFile, "unsafe-fault-partition-file", "",
		"drop Raft messages to and from the member ids listed in this file while it exists: real-process fault tests only")
	_ = f.MarkHidden("unsafe-fault-partition-file")
	f.DurationVar(&g.peerDelay, "unsafe-fault-peer-delay", 0,
		"send every Raft message to another group member this long after it is ready, as over a link with that one-way latency (an emulated distant member): benchmarks and tests only")
	_ = f.MarkHidden("unsafe-fault-peer-delay")
}

// check refuses a negative delay, and the peer delay on a single
// certifier (it has no peers to delay).
func (g *groupFaults) check(peers string) error {
	if g.peerDelay < 0 {
		return errors.New("--unsafe-fault-peer-delay must not be negative")
	}
	if g.peerDelay > 0 && peers == "" {
		return errors.New("--unsafe-fault-peer-delay delays the Raft messages between certifier group members: it needs --id and --peers")
	}
	return nil
}

// groupSnapshotFlags: when a group member snapshots its state and compacts
// its Raft log.
type groupSnapshotFlags struct {
	entries, mib, catchUp uint64
}

func (g *groupSnapshotFlags) addFlags(f *pflag.FlagSet) {
	f.Uint64Var(&g.entries, "snapshot-entries", certgroup.DefaultSnapshotEntries,
		"group member: snapshot the certifier state and compact the Raft log every this many applied log entries (versions)")
	f.Uint64Var(&g.mib, "snapshot-mib", certgroup.DefaultSnapshotBytes>>20,
		"group member: snapshot once this many MiB of entries were applied since the last snapshot")
	f.Uint64Var(&g.catchUp, "snapshot-catch-up-entries", certgroup.DefaultCatchUpEntries,
		"group member: Raft entries kept behind a snapshot, so that a follower that little behind catches up from the log")
}
