package netutil

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Which process holds a loopback TCP socket, from /proc (Linux): the
// tools tell a process they started from one that held its port before
// it, and find the socket of a connection to cut it.

// ListeningInode is the inode of the socket listening on 127.0.0.1:port
// ("" if none).
func ListeningInode(port int) string {
	return tcpInode(func(local, _, state string) bool {
		return local == loopback(port) && state == "0A" // TCP_LISTEN
	})
}

// ConnectedInode is the inode of the TCP socket bound to 127.0.0.1:port
// and connected to 127.0.0.1:peer.
func ConnectedInode(port, peer int) (string, error) {
	inode := tcpInode(func(local, remote, _ string) bool {
		return local == loopback(port) && remote == loopback(peer)
	})
	if inode == "" {
		return "", fmt.Errorf("no socket 127.0.0.1:%d -> 127.0.0.1:%d", port, peer)
	}
	return inode, nil
}

// OwnsSocket reports whether process pid has the socket inode open.
func OwnsSocket(pid int, inode string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == want {
			return true
		}
	}
	return false
}

func loopback(port int) string { return fmt.Sprintf("0100007F:%04X", port) }

// tcpInode is the inode of the first socket of /proc/net/tcp that match
// accepts ("" if none).
func tcpInode(match func(local, remote, state string) bool) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) >= 10 && match(fields[1], fields[2], fields[3]) {
			return fields[9]
		}
	}
	return ""
}
