// Command netns-run runs programs in a network namespace of their own, with
// chosen loopback ports forwarded to the host's loopback. The local control
// plane (package e2e/testenv) starts OLM's olm and catalog operators through
// it: both hard-code their health and metrics listeners (:8080, and :8443
// with TLS), so two control planes on one machine would collide on them,
// and inside a private namespace nothing they start can reach beyond it.
//
//	netns-run [--forward PORT]... [--log NAME=FILE]... -- PROG ARGS... [--- PROG ARGS...]...
//
// Each --forward PORT listens on 127.0.0.1:PORT inside the new namespace and
// copies every connection to 127.0.0.1:PORT of the host namespace (the
// kube-apiserver's port, so one kubeconfig serves both sides). Programs are
// separated by "---"; they all run in the one namespace and inherit stdout
// and stderr. netns-run exits when the first program exits (with its
// status), after SIGTERM to the others; SIGTERM or SIGINT to netns-run is
// passed on to every program. It needs CAP_SYS_ADMIN (root).
//
// How: one OS thread (locked, never unlocked, so never reused by another
// goroutine) calls unshare(CLONE_NEWNET), brings lo up (SIOCSIFFLAGS), makes
// the namespace's listeners and forks the programs; a namespace is a
// property of the thread, so every other thread of this process stays in the
// host namespace and dials the host's loopback from there. A socket keeps
// the namespace it was made in, whichever thread uses it later
// (network_namespaces(7), unshare(2)). Written here rather than taken from
// a library because the one it would be (vishvananda/netns) covers setns of
// existing namespaces, not this unshare of one thread.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	forwards, progs, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "netns-run:", err)
		os.Exit(2)
	}
	code, err := run(forwards, progs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netns-run:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// parseArgs splits the command line into forwarded ports and programs.
func parseArgs(args []string) ([]int, [][]string, error) {
	var ports []int
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		v, ok := strings.CutPrefix(a, "--forward=")
		if !ok && a == "--forward" && i+1 < len(args) {
			i++
			v, ok = args[i], true
		}
		if !ok {
			return nil, nil, fmt.Errorf("unknown argument %q (usage: netns-run [--forward PORT]... -- PROG ARGS... [--- PROG ARGS...])", a)
		}
		p, err := strconv.Atoi(v)
		if err != nil || p <= 0 || p > 65535 {
			return nil, nil, fmt.Errorf("--forward %q: want a TCP port 1-65535", v)
		}
		ports = append(ports, p)
	}
	var progs [][]string
	cur := []string{}
	for ; i < len(args); i++ {
		if args[i] == "---" {
			progs = append(progs, cur)
			cur = []string{}
			continue
		}
		cur = append(cur, args[i])
	}
	progs = append(progs, cur)
	for _, p := range progs {
		if len(p) == 0 {
			return nil, nil, errors.New("no program after -- (or an empty one between ---)")
		}
	}
	return ports, progs, nil
}

// nsThread is the one goroutine (and OS thread) inside the new namespace.
type nsThread struct {
	reqs chan func()
}

func startNSThread() (*nsThread, error) {
	t := &nsThread{reqs: make(chan func())}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the process
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_NEWNET) (needs root): %w", err)
			return
		}
		if err := loUp(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for f := range t.reqs {
			f()
		}
	}()
	return t, <-errc
}

// do runs f on the namespace's thread.
func (t *nsThread) do(f func()) {
	done := make(chan struct{})
	t.reqs <- func() { f(); close(done) }
	<-done
}

// loUp sets IFF_UP on lo of the calling thread's namespace, what
// `ip link set lo up` does, through the SIOCGIFFLAGS/SIOCSIFFLAGS ioctls
// (netdevice(7)).
func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for lo: %w", err)
	}
	defer unix.Close(fd)
	var req [unix.IFNAMSIZ + 24]byte // struct ifreq: name, then a union (flags: short)
	copy(req[:], "lo")
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", e)
	}
	flags := *(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ]))
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = flags | unix.IFF_UP | unix.IFF_RUNNING
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		return fmt.Errorf("SIOCSIFFLAGS lo up: %w", e)
	}
	return nil
}

func run(forwards []int, progs [][]string) (int, error) {
	t, err := startNSThread()
	if err != nil {
		return 1, err
	}
	for _, p := range forwards {
		var l net.Listener
		var lerr error
		t.do(func() { l, lerr = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)) })
		if lerr != nil {
			return 1, fmt.Errorf("listen in the namespace on 127.0.0.1:%d: %w", p, lerr)
		}
		go forward(l, "127.0.0.1:"+strconv.Itoa(p))
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	type exit struct {
		i   int
		err error
	}
	exited := make(chan exit, len(progs))
	var cmds []*exec.Cmd
	for i, argv := range progs {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		// Dies with this process: the parent-death signal fires when the
		// forking thread exits, and the namespace thread never does
		// before the process.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var serr error
		t.do(func() { serr = cmd.Start() })
		if serr != nil {
			for _, c := range cmds {
				_ = c.Process.Kill()
			}
			return 1, fmt.Errorf("start %s: %w", argv[0], serr)
		}
		cmds = append(cmds, cmd)
		go func() { exited <- exit{i, cmd.Wait()} }()
	}
	var first exit
	select {
	case first = <-exited:
	case s := <-sigs:
		for _, c := range cmds {
			_ = c.Process.Signal(s)
		}
		first = <-exited
	}
	for j, c := range cmds {
		if j != first.i {
			_ = c.Process.Signal(syscall.SIGTERM)
		}
	}
	for range len(cmds) - 1 {
		<-exited
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(first.err, &ee) {
		code = ee.ExitCode()
		if code < 0 {
			code = 1 // killed by a signal
		}
	} else if first.err != nil {
		return 1, first.err
	}
	return code, nil
}

// forward accepts connections on l (inside the namespace) and copies each
// to target, dialled from a host-namespace thread.
func forward(l net.Listener, target string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer u.Close()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(u, c)
				if tc, ok := u.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}()
			_, _ = io.Copy(c, u)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			wg.Wait()
		}()
	}
}
