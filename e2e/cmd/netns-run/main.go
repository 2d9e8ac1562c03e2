// Command netns-run runs programs in a network namespace of their own, with
// chosen loopback ports forwarded to the host's loopback. The local control
// plane (package e2e/testenv) starts OLM's olm and catalog operators through
// it: both hard-code their health and metrics listeners (:8080, and :8443
// with TLS), so two control planes on one machine would collide on them,
// and inside a private namespace nothing they start can reach beyond it.
//
//	netns-run [--addr CIDR]... [--forward PORT]... [--forward-from NSADDR:NSPORT=HOSTPORT]... [--expose NSPORT:HOSTPORT]... [--restart [--restart-backoff=D]] -- PROG ARGS... [--- PROG ARGS...]...
//
// Each --addr CIDR (e.g. 10.244.0.1/16, kwok's pod range) is added to lo
// of the new namespace, what `ip addr add 10.244.0.1/16 dev lo` does:
// on a loopback device the kernel makes the whole prefix a local route
// (fib_add_ifaddr in net/ipv4/fib_frontend.c), so inside the namespace
// every address of the range is the namespace's own. A program there that
// dials a pod IP (CNPG dials https://<podIP>:8000) reaches a listener of
// the namespace, or is refused; no packet leaves the namespace.
// Each --forward-from NSADDR:NSPORT=HOSTPORT listens inside the namespace
// on NSADDR:NSPORT (0.0.0.0 for every address of the namespace, pod IPs
// of an --addr range included) and copies every connection to
// 127.0.0.1:HOSTPORT of the host namespace: a stand-in the test harness
// serves on the host's loopback for a server that would listen on a pod IP.
//
// Each --forward PORT listens on 127.0.0.1:PORT inside the new namespace and
// copies every connection to 127.0.0.1:PORT of the host namespace (the
// kube-apiserver's port, so one kubeconfig serves both sides). Each
// --expose NSPORT:HOSTPORT is the other way round: it listens on
// 127.0.0.1:HOSTPORT of the host namespace and copies every connection to
// 127.0.0.1:NSPORT inside the new one (a server a program there runs, such
// as Authorino's ext_authz listener, reached from the host). Programs are
// separated by "---"; they all run in the one namespace and inherit stdout
// and stderr. netns-run exits when the first program exits (with its
// status), after SIGTERM to the others; SIGTERM or SIGINT to netns-run is
// passed on to every program. It needs CAP_SYS_ADMIN (root).
//
// With --restart a program that exits is started again instead, as the
// kubelet restarts the container of a Deployment's pod (restartPolicy
// Always): after a back-off of 10 s that doubles with each exit up to
// 5 min, and starts again from 10 s once the program has run for 10 min
// (Kubernetes docs, "Pod Lifecycle", Container restarts); --restart-backoff
// sets the first back-off (a Go duration; the doubling and the cap stay).
// Each restart is logged to stderr as a line starting "netns-run: restart";
// netns-run then exits only on SIGTERM or SIGINT (or when a program cannot
// be started again).
//
// How: one OS thread (locked, never unlocked, so never reused by another
// goroutine) calls unshare(CLONE_NEWNET), brings lo up (SIOCSIFFLAGS), makes
// the namespace's listeners, dials the --expose connections into it and
// forks the programs; a namespace is a
// property of the thread, so every other thread of this process stays in the
// host namespace and dials the host's loopback from there. A socket keeps
// the namespace it was made in, whichever thread uses it later
// (network_namespaces(7), unshare(2)). Written here rather than taken from
// a library because the one it would be (vishvananda/netns) covers setns of
// existing namespaces, not this unshare of one thread.
package main

import (
	"encoding/binary"
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
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	a, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "netns-run:", err)
		os.Exit(2)
	}
	code, err := run(a)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netns-run:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// runArgs is netns-run's parsed command line.
type runArgs struct {
	addrs    []*net.IPNet  // --addr ranges for lo
	froms    []fromAddr    // --forward-from listeners
	forwards []int         // --forward ports
	exposes  []exposed     // --expose port pairs
	restart  bool          // --restart
	backoff  time.Duration // --restart-backoff: the first back-off
	progs    [][]string    // the programs, each argv
}

// exposed is one --expose NSPORT:HOSTPORT.
type exposed struct{ ns, host int }

// fromAddr is one --forward-from NSADDR:NSPORT=HOSTPORT.
type fromAddr struct {
	ns   string // NSADDR:NSPORT
	host int
}

const usage = "usage: netns-run [--addr CIDR]... [--forward PORT]... [--forward-from NSADDR:NSPORT=HOSTPORT]... [--expose NSPORT:HOSTPORT]... [--restart [--restart-backoff=D]] -- PROG ARGS... [--- PROG ARGS...]"

// parsePort parses a TCP port 1-65535 of flag.
func parsePort(flag, v string) (int, error) {
	p, err := strconv.Atoi(v)
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("%s %q: want a TCP port 1-65535", flag, v)
	}
	return p, nil
}

// parseArgs splits the command line into forwarded and exposed ports, the
// restart flag and programs.
func parseArgs(args []string) (runArgs, error) {
	r := runArgs{backoff: restartBackoff}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if a == "--restart" {
			r.restart = true
			continue
		}
		if v, ok := strings.CutPrefix(a, "--restart-backoff="); ok {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return r, fmt.Errorf("--restart-backoff %q: want a positive Go duration such as 10s", v)
			}
			r.backoff = d
			continue
		}
		if v, ok := strings.CutPrefix(a, "--addr="); ok {
			ip, n, err := net.ParseCIDR(v)
			if err != nil || ip.To4() == nil {
				return r, fmt.Errorf("--addr %q: want an IPv4 CIDR such as 10.244.0.1/16", v)
			}
			n.IP = ip.To4() // the address itself, with the range's mask
			r.addrs = append(r.addrs, n)
			continue
		}
		if v, ok := strings.CutPrefix(a, "--forward-from="); ok {
			nsAddr, hostPort, found := strings.Cut(v, "=")
			host, port, err := net.SplitHostPort(nsAddr)
			if !found || err != nil || net.ParseIP(host) == nil {
				return r, fmt.Errorf("--forward-from %q: want NSADDR:NSPORT=HOSTPORT", v)
			}
			if _, err := parsePort("--forward-from", port); err != nil {
				return r, err
			}
			f := fromAddr{ns: nsAddr}
			if f.host, err = parsePort("--forward-from", hostPort); err != nil {
				return r, err
			}
			r.froms = append(r.froms, f)
			continue
		}
		if v, ok := strings.CutPrefix(a, "--expose="); ok {
			nsPort, hostPort, found := strings.Cut(v, ":")
			if !found {
				return r, fmt.Errorf("--expose %q: want NSPORT:HOSTPORT", v)
			}
			var e exposed
			var err error
			if e.ns, err = parsePort("--expose", nsPort); err != nil {
				return r, err
			}
			if e.host, err = parsePort("--expose", hostPort); err != nil {
				return r, err
			}
			r.exposes = append(r.exposes, e)
			continue
		}
		v, ok := strings.CutPrefix(a, "--forward=")
		if !ok && a == "--forward" && i+1 < len(args) {
			i++
			v, ok = args[i], true
		}
		if !ok {
			return r, fmt.Errorf("unknown argument %q (%s)", a, usage)
		}
		p, err := parsePort("--forward", v)
		if err != nil {
			return r, err
		}
		r.forwards = append(r.forwards, p)
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
			return r, errors.New("no program after -- (or an empty one between ---)")
		}
	}
	r.progs = progs
	return r, nil
}

// nsThread is the one goroutine (and OS thread) inside the new namespace.
type nsThread struct {
	reqs chan func()
}

func startNSThread(addrs []*net.IPNet) (*nsThread, error) {
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
		for _, a := range addrs {
			if err := loAddr(a); err != nil {
				errc <- err
				return
			}
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

// loAddr adds address a (with its range's prefix length) to lo of the
// calling thread's namespace, what `ip addr add A/N dev lo` does: one
// RTM_NEWADDR request on a NETLINK_ROUTE socket (rtnetlink(7), struct
// ifaddrmsg with IFA_LOCAL and IFA_ADDRESS attributes), acknowledged by an
// NLMSG_ERROR message whose error is 0. Through golang.org/x/sys/unix, as
// loUp does with its ioctls: the ioctl way (SIOCSIFADDR) sets only lo's
// first address, and lo already has 127.0.0.1.
func loAddr(a *net.IPNet) error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink bind: %w", err)
	}
	msg := newAddrRequest(lo.Index, a, 1)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("RTM_NEWADDR %s dev lo: %w", a, err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("RTM_NEWADDR %s dev lo: read the ack: %w", a, err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return fmt.Errorf("RTM_NEWADDR %s dev lo: %w", a, err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
			continue
		}
		if code := int32(nativeEndian.Uint32(m.Data[:4])); code != 0 {
			return fmt.Errorf("RTM_NEWADDR %s dev lo: %w", a, syscall.Errno(-code))
		}
		return nil
	}
	return fmt.Errorf("RTM_NEWADDR %s dev lo: no acknowledgement", a)
}

// nativeEndian is the byte order of netlink messages (the host's).
var nativeEndian = binary.NativeEndian

// newAddrRequest is the RTM_NEWADDR message that adds IPv4 address a to
// the interface of index ifIndex (scope host, as ip(8) gives an address
// on lo): nlmsghdr, ifaddrmsg, then the IFA_LOCAL and IFA_ADDRESS
// attributes, each 4-byte aligned (rtnetlink(7), netlink(7)).
func newAddrRequest(ifIndex int, a *net.IPNet, seq uint32) []byte {
	ones, _ := a.Mask.Size()
	ip := a.IP.To4()
	attr := func(typ uint16, v []byte) []byte {
		b := make([]byte, unix.SizeofRtAttr, unix.SizeofRtAttr+len(v))
		nativeEndian.PutUint16(b[0:2], uint16(unix.SizeofRtAttr+len(v)))
		nativeEndian.PutUint16(b[2:4], typ)
		return append(b, v...) // 4+4 bytes: already aligned
	}
	body := make([]byte, unix.SizeofIfAddrmsg)
	body[0] = unix.AF_INET
	body[1] = byte(ones)
	body[2] = 0 // flags
	body[3] = unix.RT_SCOPE_HOST
	nativeEndian.PutUint32(body[4:8], uint32(ifIndex))
	body = append(body, attr(unix.IFA_LOCAL, ip)...)
	body = append(body, attr(unix.IFA_ADDRESS, ip)...)
	hdr := make([]byte, unix.SizeofNlMsghdr)
	nativeEndian.PutUint32(hdr[0:4], uint32(unix.SizeofNlMsghdr+len(body)))
	nativeEndian.PutUint16(hdr[4:6], unix.RTM_NEWADDR)
	nativeEndian.PutUint16(hdr[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	nativeEndian.PutUint32(hdr[8:12], seq)
	return append(hdr, body...)
}

func run(a runArgs) (int, error) {
	t, err := startNSThread(a.addrs)
	if err != nil {
		return 1, err
	}
	for _, f := range a.froms {
		var l net.Listener
		var lerr error
		t.do(func() { l, lerr = net.Listen("tcp", f.ns) })
		if lerr != nil {
			return 1, fmt.Errorf("listen in the namespace on %s (--forward-from): %w", f.ns, lerr)
		}
		target := "127.0.0.1:" + strconv.Itoa(f.host)
		go relay(l, func() (net.Conn, error) { return net.DialTimeout("tcp", target, dialTimeout) })
	}
	for _, p := range a.forwards {
		var l net.Listener
		var lerr error
		t.do(func() { l, lerr = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)) })
		if lerr != nil {
			return 1, fmt.Errorf("listen in the namespace on 127.0.0.1:%d: %w", p, lerr)
		}
		target := "127.0.0.1:" + strconv.Itoa(p)
		go relay(l, func() (net.Conn, error) { return net.DialTimeout("tcp", target, dialTimeout) })
	}
	for _, e := range a.exposes {
		// Listened for here, on a host-namespace thread; dialled on the
		// namespace's thread, whose socket stays in the namespace.
		l, lerr := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(e.host))
		if lerr != nil {
			return 1, fmt.Errorf("listen in the host namespace on 127.0.0.1:%d (--expose %d:%d): %w", e.host, e.ns, e.host, lerr)
		}
		target := "127.0.0.1:" + strconv.Itoa(e.ns)
		go relay(l, func() (c net.Conn, err error) {
			t.do(func() { c, err = net.DialTimeout("tcp", target, dialTimeout) })
			return c, err
		})
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	s := &supervisor{t: t, restart: a.restart, backoff: a.backoff, cmds: make([]*exec.Cmd, len(a.progs)), stop: make(chan struct{})}
	exited := make(chan exit, len(a.progs))
	for i, argv := range a.progs {
		cmd, serr := s.start(argv)
		if serr != nil {
			s.shutdown(syscall.SIGKILL)
			return 1, serr
		}
		s.set(i, cmd)
		go s.watch(i, argv, cmd, exited)
	}
	var first exit
	select {
	case first = <-exited:
		s.shutdown(syscall.SIGTERM)
	case sig := <-sigs:
		s.shutdown(sig)
		first = <-exited
	}
	for range len(a.progs) - 1 {
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

// exit is how program i ended for good (not restarted).
type exit struct {
	i   int
	err error
}

// The kubelet's back-off between restarts of a container that exits
// (Kubernetes docs, "Pod Lifecycle": 10 s, doubled each time, capped at
// 300 s, reset once the container has run for 10 min).
const (
	restartBackoff    = 10 * time.Second
	restartBackoffMax = 5 * time.Minute
	restartReset      = 10 * time.Minute
)

// nextBackoff is the wait before the next restart of a program that ran
// for ran after a restart that waited prev (0: it has not been restarted);
// first is the first back-off.
func nextBackoff(prev, ran, first time.Duration) time.Duration {
	if prev == 0 || ran >= restartReset {
		return first
	}
	return min(2*prev, restartBackoffMax)
}

// supervisor runs the programs in the namespace and, with restart, starts
// again those that exit until shutdown.
type supervisor struct {
	t       *nsThread
	restart bool
	backoff time.Duration // the first back-off

	mu       sync.Mutex
	cmds     []*exec.Cmd // the current process of each program
	stopping bool
	stop     chan struct{} // closed by shutdown
}

// start forks argv on the namespace's thread.
func (s *supervisor) start(argv []string) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Dies with this process: the parent-death signal fires when the
	// forking thread exits, and the namespace thread never does before
	// the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	s.t.do(func() { err = cmd.Start() })
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	return cmd, nil
}

// set records cmd as program i's process; one started after shutdown is
// killed at once (its watch then reports it).
func (s *supervisor) set(i int, cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmds[i] = cmd
	if s.stopping {
		_ = cmd.Process.Kill()
	}
}

// shutdown ends restarts and sends sig to every program's process.
func (s *supervisor) shutdown(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopping {
		s.stopping = true
		close(s.stop)
	}
	for _, c := range s.cmds {
		if c != nil {
			_ = c.Process.Signal(sig) // an exited one: "process already finished"
		}
	}
}

func (s *supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// watch waits for program i's process cmd and, with restart and until
// shutdown, starts it again after the back-off; it sends the program's
// final exit to exited.
func (s *supervisor) watch(i int, argv []string, cmd *exec.Cmd, exited chan<- exit) {
	var backoff time.Duration
	for {
		started := time.Now()
		err := cmd.Wait()
		if !s.restart || s.isStopping() {
			exited <- exit{i, err}
			return
		}
		backoff = nextBackoff(backoff, time.Since(started), s.backoff)
		status := "exit status 0"
		if err != nil {
			status = err.Error()
		}
		fmt.Fprintf(os.Stderr, "netns-run: restart %s in %s: it exited (%s) after %s\n", argv[0], backoff, status, time.Since(started).Round(time.Millisecond))
		select {
		case <-time.After(backoff):
		case <-s.stop:
			exited <- exit{i, err}
			return
		}
		next, serr := s.start(argv)
		if serr != nil {
			fmt.Fprintln(os.Stderr, "netns-run:", serr)
			exited <- exit{i, serr}
			return
		}
		s.set(i, next)
		cmd = next
	}
}

// dialTimeout bounds one dial of a relayed connection (both ends are
// loopback: a refused port fails at once).
const dialTimeout = 5 * time.Second

// relay accepts connections on l and copies each, both ways, to a
// connection from dial: for --forward, l is inside the namespace and dial
// runs on a host-namespace thread; for --expose, the other way round. A
// connection whose dial fails is closed.
func relay(l net.Listener, dial func() (net.Conn, error)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := dial()
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
