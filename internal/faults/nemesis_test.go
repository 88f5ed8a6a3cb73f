package faults

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tashkent-db/tashkent/internal/cluster"
)

// Regression test: a refactoring once dropped the pause case from
// nemesis.inject, and pause faults were recorded without being injected.
// The process must really be stopped during the hold and running after.
func TestNemesisPauseStopsAndContinuesTheProcess(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	ctl := &control{st: &cluster.State{Certifier: cluster.Certifier{PID: pid}}}
	n := &nemesis{ctl: ctl, log: &faultLog{start: time.Now()}, hold: 500 * time.Millisecond,
		rng: rand.New(rand.NewPCG(1, 1)), logf: t.Logf}
	done := make(chan struct{})
	go func() { n.inject(context.Background(), PauseCertifier); close(done) }()
	stopped := false
	for deadline := time.Now().Add(400 * time.Millisecond); time.Now().Before(deadline) && !stopped; {
		stopped = procState(t, pid) == "T"
		time.Sleep(10 * time.Millisecond)
	}
	<-done
	if !stopped {
		t.Fatal("the paused process was never stopped")
	}
	if s := procState(t, pid); s == "T" {
		t.Fatal("the process is still stopped after the fault healed")
	}
	f := n.log.all()
	if len(f) != 1 || f[0].Kind != PauseCertifier || f[0].Error != "" || f[0].Healed <= f[0].At {
		t.Fatalf("recorded faults: %+v", f)
	}
}

func TestNemesisRefusesUnknownKinds(t *testing.T) {
	ctl := &control{st: &cluster.State{Certifier: cluster.Certifier{PID: 0}}}
	n := &nemesis{ctl: ctl, log: &faultLog{start: time.Now()}, rng: rand.New(rand.NewPCG(1, 1)), logf: t.Logf}
	n.inject(context.Background(), ClientDisconnect) // injected by the clients, not the nemesis
	if f := n.log.all(); len(f) != 1 || !strings.Contains(f[0].Error, "cannot inject") {
		t.Fatalf("recorded faults: %+v", f)
	}
}

// procState returns the state letter of /proc/PID/stat.
func procState(t *testing.T, pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return s[i+2 : i+3]
}
