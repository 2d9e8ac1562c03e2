//go:build !linux

package testenv

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr puts a detached component in a new session. Without Linux's
// parent-death signal, test components are only stopped by Env.Stop.
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true}
}

func startCmd(cmd *exec.Cmd, _ bool) error { return cmd.Start() }

// waitPID returns a channel closed when pid has exited, checked every 50 ms.
func waitPID(pid int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if !pidRunning(pid) {
				return
			}
		}
	}()
	return done
}

func pidRunning(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// pidIsComponent cannot check the command line portably; it checks that
// the pid exists.
func pidIsComponent(pid int, _ string) bool { return pidRunning(pid) }
