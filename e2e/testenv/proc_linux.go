package testenv

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts a detached component in a new session (it outlives the
// caller and no terminal signal reaches it); otherwise in its own process
// group with PR_SET_PDEATHSIG=SIGKILL, so it dies with the test process.
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// spawner runs cmd.Start on one OS thread that never exits. The kernel sends
// the parent-death signal when the *thread* that forked the child exits
// (prctl(2), PR_SET_PDEATHSIG; golang/go#27505), and the Go runtime may end
// an arbitrary thread; a locked, never-returning goroutine pins one.
var spawner struct {
	once sync.Once
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

func startCmd(cmd *exec.Cmd, detach bool) error {
	if detach {
		return cmd.Start()
	}
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread lives as long as the process
			for r := range spawner.reqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- spawnRequest{cmd: cmd, errc: errc}
	return <-errc
}

// waitPID returns a channel closed when pid (not our child) has exited. It
// uses a pidfd, which becomes readable when the process terminates, zombie
// or not; where pidfd_open is unavailable it checks every 50 ms.
func waitPID(pid int) <-chan struct{} {
	done := make(chan struct{})
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			close(done)
			return done
		}
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
	go func() {
		defer close(done)
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
	return done
}

// pidRunning reports whether pid exists and is not a zombie.
func pidRunning(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// Format: "pid (comm) S ..."; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// pidIsComponent reports whether pid runs and its argv[0] is the
// component's binary, so a pid reused by another program is never signalled.
func pidIsComponent(pid int, name string) bool {
	if !pidRunning(pid) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(b, []byte{0})
	return filepath.Base(string(argv0)) == name
}
