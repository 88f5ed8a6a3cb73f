package netutil

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoServerEnv makes the test binary an echo server (TestMain): NETWORK
// and ADDRESS, as net.Listen takes them.
const echoServerEnv = "TASHKENT_ECHO_SERVER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(echoServerEnv); spec != "" {
		network, addr, _ := strings.Cut(spec, " ")
		if err := serveEcho(network, addr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveEcho answers each message of its one connection with a reply of
// replyBytes, on one Go thread, as the agent and the certifier run
// beside the replicas; it says "ready" once it listens and exits when
// the connection closes.
func serveEcho(network, addr string) error {
	runtime.GOMAXPROCS(1)
	ln, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	buf := make([]byte, requestBytes)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return nil
		}
		if _, err := c.Write(buf[:replyBytes]); err != nil {
			return nil
		}
	}
}

// About a certify request and its reply on the agent's certifier stream.
const (
	requestBytes = 400
	replyBytes   = 300
)

// BenchmarkSocketRoundTrip measures a request and its reply between two
// processes, over TCP on loopback and over a Unix socket: what a commit's
// hop from one tashkent process to the next costs on this machine. It
// reports the client's and the server's CPU per round trip; the wake-ups
// at both ends are most of it, whichever the transport.
//
//	go test -run '^$' -bench SocketRoundTrip -benchtime 3s ./internal/netutil/
func BenchmarkSocketRoundTrip(b *testing.B) {
	for _, network := range []string{"tcp", "unix"} {
		b.Run(network, func(b *testing.B) {
			var addr string
			if network == "unix" {
				addr = filepath.Join(b.TempDir(), "echo.sock")
			} else {
				port, err := FreePort()
				if err != nil {
					b.Fatal(err)
				}
				addr = fmt.Sprintf("127.0.0.1:%d", port)
			}
			server, c := startEchoServer(b, network, addr)
			defer server.Wait()
			defer c.Close()
			req, reply := make([]byte, requestBytes), make([]byte, replyBytes)
			runtime.GOMAXPROCS(1)
			defer runtime.GOMAXPROCS(runtime.NumCPU())
			serverCPU, clientCPU := processCPU(b, server.Process.Pid), selfCPU()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, reply); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(selfCPU()-clientCPU)/float64(time.Microsecond)/n, "client-cpu-µs/op")
			b.ReportMetric(float64(processCPU(b, server.Process.Pid)-serverCPU)/float64(time.Microsecond)/n, "server-cpu-µs/op")
		})
	}
}

// startEchoServer runs this test binary as an echo server at addr and
// connects to it.
func startEchoServer(b *testing.B, network, addr string) (*exec.Cmd, net.Conn) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), echoServerEnv+"="+network+" "+addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		cmd.Process.Kill()
		b.Fatalf("echo server: %q, %v", line, err)
	}
	c, err := net.Dial(network, addr)
	if err != nil {
		cmd.Process.Kill()
		b.Fatal(err)
	}
	return cmd, c
}

// selfCPU is this process's user and system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is process pid's user and system CPU time so far, from
// /proc/PID/stat (in clock ticks of 10 ms: enough over a benchmark's
// second).
func processCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// after it. utime and stime are fields 14 and 15.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	var utime, stime int64
	fmt.Sscan(fields[11], &utime)
	fmt.Sscan(fields[12], &stime)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
