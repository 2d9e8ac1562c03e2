package testenv

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

const helperEnv = "MAASCTL_TESTENV_PDEATHSIG_HELPER"

// TestComponentsDieWithTestProcess starts a control plane in a child test
// process, SIGKILLs that process (no Stop runs) and checks that
// PR_SET_PDEATHSIG took etcd and kube-apiserver down with it.
func TestComponentsDieWithTestProcess(t *testing.T) {
	if state := os.Getenv(helperEnv); state != "" {
		// Never stopped: the point is what happens when this process dies.
		if _, err := Start(t.Context(), Options{StateDir: state, NoControllers: true, NoFixture: true}); err != nil {
			t.Fatalf("helper Start: %v", err)
		}
		os.Stdout.WriteString("READY\n")
		select {} // wait to be killed
	}
	t.Parallel()
	requireBinaries(t, Etcd, KubeAPIServer)
	state := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestComponentsDieWithTestProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "READY" {
				exited <- nil
				return
			}
		}
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("helper exited before ready: %v", err)
		}
	case <-time.After(DefaultStartTimeout):
		_ = cmd.Process.Kill()
		t.Fatal("helper not ready in time")
	}
	loaded, err := Load(state)
	if err != nil {
		t.Fatal(err)
	}
	comps := loaded.Components()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, c := range comps[:2] { // etcd, kube-apiserver
		if c.PID == 0 {
			t.Fatalf("%s: no pid recorded", c.Name)
		}
		select {
		case <-waitPID(c.PID):
		case <-time.After(10 * time.Second):
			t.Errorf("%s (pid %d) still runs 10 s after its parent was killed", c.Name, c.PID)
			_ = syscall.Kill(c.PID, syscall.SIGKILL)
		}
	}
}
