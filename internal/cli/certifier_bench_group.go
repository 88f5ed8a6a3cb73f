package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tashkent-db/tashkent/internal/netutil"
)

// startBenchGroup starts the certifier the bench measures: one process, or
// a group of members processes on loopback. stop ends them by PID.
func startBenchGroup(noSync bool, members int, metricsAddr string) (string, func(), error) {
	if members <= 1 {
		return startBenchCertifier(noSync, metricsAddr)
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "tashkent-certifier-bench-")
	if err != nil {
		return "", nil, err
	}
	var addrs, peers []string
	for id := 1; id <= members; id++ {
		port, err := netutil.FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
		peers = append(peers, fmt.Sprintf("%d=%s", id, addrs[id-1]))
	}
	var children []*exec.Cmd
	stop := func() {
		for _, c := range children {
			c.Process.Signal(os.Interrupt)
		}
		for _, c := range children {
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				c.Process.Kill()
				<-done
			}
		}
		os.RemoveAll(dir)
	}
	for id := 1; id <= members; id++ {
		args := []string{"certifier", "--data-dir", filepath.Join(dir, strconv.Itoa(id)), "--id", strconv.Itoa(id),
			"--peers", strings.Join(peers, ","), "--listen", addrs[id-1], "--metrics-listen", "", "--log-level", "warn"}
		if noSync {
			args = append(args, "--unsafe-no-fsync")
		}
		child := exec.Command(self, args...)
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			stop()
			return "", nil, err
		}
		children = append(children, child)
	}
	for _, a := range addrs {
		if err := netutil.WaitListening(a, 10*time.Second); err != nil {
			stop()
			return "", nil, errors.Join(errors.New("a member of the bench's certifier group did not start"), err)
		}
	}
	fmt.Fprintf(os.Stderr, "started a certifier group of %d members on %s (data in %s)\n", members, strings.Join(addrs, ","), dir)
	return strings.Join(addrs, ","), stop, nil
}
