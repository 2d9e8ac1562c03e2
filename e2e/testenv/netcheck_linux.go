package testenv

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Connection is one TCP socket of a control plane process, from
// /proc/<pid>/net/tcp{,6} (proc(5)).
type Connection struct {
	// Component is the component whose process (or descendant) holds it.
	Component string
	// PID and Program (the process's comm) hold the socket.
	PID     int
	Program string
	// Local and Remote are host:port; Remote is 0.0.0.0:0 for a listener.
	Local, Remote string
	// State is the kernel's TCP state number in hex (01 ESTABLISHED, 0A LISTEN).
	State string
	// NetNS is the process's network namespace (readlink of
	// /proc/<pid>/ns/net, e.g. "net:[4026531840]").
	NetNS string
}

// Connections lists the TCP sockets of every running component of e and of
// their descendant processes (the opm servers and operators under
// netns-run), with their network namespace. The socket inodes come from
// /proc/<pid>/fd, matched against /proc/<pid>/net/tcp and tcp6, so sockets
// of other processes sharing a namespace are not counted.
func (e *Env) Connections() ([]Connection, error) {
	pids := map[int]string{}
	procs := e.procs
	if e.ops != nil {
		procs = append(slices.Clone(procs), e.ops.processes()...)
	}
	for _, p := range procs {
		if !p.alive() {
			continue
		}
		pids[p.pid] = p.name
	}
	for pid, comp := range descendants(pids) {
		pids[pid] = comp
	}
	var out []Connection
	for pid, comp := range pids {
		inodes := socketInodes(pid)
		if len(inodes) == 0 {
			continue
		}
		ns, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"))
		comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
		for _, f := range []string{"tcp", "tcp6"} {
			rows, err := readProcNetTCP(filepath.Join("/proc", strconv.Itoa(pid), "net", f))
			if err != nil {
				continue // the process exited meanwhile
			}
			for _, r := range rows {
				if !inodes[r.inode] {
					continue
				}
				out = append(out, Connection{Component: comp, PID: pid, Program: strings.TrimSpace(string(comm)),
					Local: r.local, Remote: r.remote, State: r.state, NetNS: ns})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Component != out[j].Component {
			return out[i].Component < out[j].Component
		}
		return out[i].Local+out[i].Remote < out[j].Local+out[j].Remote
	})
	return out, nil
}

// LeavesLoopback reports whether c's remote end is anything but a loopback
// or unspecified (listening) address.
func (c Connection) LeavesLoopback() bool {
	host, _, err := net.SplitHostPort(c.Remote)
	if err != nil {
		return true
	}
	ip := net.ParseIP(host)
	return ip == nil || !(ip.IsLoopback() || ip.IsUnspecified())
}

// StaysInNamespace reports whether c, a connection to a pod or Service IP,
// cannot have left its process's network namespace: the process is in a
// namespace other than hostNS (the caller's, readlink of
// /proc/self/ns/net), and the remote end is in kwok's pod range or the
// Service range, which netns-run --addr puts on that namespace's lo
// (Options.RealCNPG, cnpg.go): there every such address is local, and
// the namespace has no interface but lo.
func (c Connection) StaysInNamespace(hostNS string) bool {
	if c.NetNS == "" || c.NetNS == hostNS {
		return false
	}
	host, _, err := net.SplitHostPort(c.Remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	for _, r := range []string{cnpgPodCIDR, cnpgServiceCIDR} {
		if _, n, err := net.ParseCIDR(r); err == nil && n.Contains(ip) {
			return true
		}
	}
	return false
}

func (c Connection) String() string {
	return fmt.Sprintf("%s pid %d (%s) %s -> %s state %s in %s", c.Component, c.PID, c.Program, c.Local, c.Remote, c.State, c.NetNS)
}

// descendants returns every process below roots, each with its root's
// component name.
func descendants(roots map[int]string) map[int]string {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b)[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[pid] = pp
		}
	}
	out := map[int]string{}
	for pid := range parent {
		for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if comp, ok := roots[p]; ok {
				out[pid] = comp
				break
			}
		}
	}
	return out
}

// socketInodes returns the inodes of the sockets pid holds open.
func socketInodes(pid int) map[string]bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil {
			continue
		}
		if in, ok := strings.CutPrefix(l, "socket:["); ok {
			out[strings.TrimSuffix(in, "]")] = true
		}
	}
	return out
}

type tcpRow struct{ local, remote, state, inode string }

// readProcNetTCP parses /proc/<pid>/net/tcp or tcp6: columns sl,
// local_address, rem_address, st, ..., inode (the 10th).
func readProcNetTCP(path string) ([]tcpRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []tcpRow
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 {
			continue
		}
		l, err1 := parseHexAddr(fl[1])
		r, err2 := parseHexAddr(fl[2])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, tcpRow{local: l, remote: r, state: fl[3], inode: fl[9]})
	}
	return out, sc.Err()
}

// parseHexAddr turns the kernel's "0100007F:1F90" (an address as 32-bit
// words in host byte order, little-endian here, then the port in hex) into
// "127.0.0.1:8080".
func parseHexAddr(s string) (string, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return "", fmt.Errorf("address %q", s)
	}
	for i := 0; i+4 <= len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return "", fmt.Errorf("port %q", s)
	}
	return net.JoinHostPort(net.IP(raw).String(), strconv.FormatUint(port, 10)), nil
}
