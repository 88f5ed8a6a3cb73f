package netutil

import (
	"net"
	"os"
	"testing"
)

func TestSocketsAreFoundWithTheirOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	listening := ListeningInode(port)
	if listening == "" || !OwnsSocket(os.Getpid(), listening) {
		t.Fatalf("listening socket of port %d: inode %q, owned by this process: %v", port, listening, OwnsSocket(os.Getpid(), listening))
	}
	if OwnsSocket(os.Getppid(), listening) {
		t.Errorf("the parent process owns this process's listening socket")
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	local := c.LocalAddr().(*net.TCPAddr).Port
	connected, err := ConnectedInode(local, port)
	if err != nil || connected == listening || !OwnsSocket(os.Getpid(), connected) {
		t.Fatalf("connected socket %d -> %d: inode %q, %v", local, port, connected, err)
	}
	if _, err := ConnectedInode(port, local+1); err == nil {
		t.Error("a connection that does not exist was found")
	}
	if ListeningInode(local) != "" {
		t.Error("a connected socket was taken for a listening one")
	}
}
