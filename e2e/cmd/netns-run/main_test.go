package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNextBackoff(t *testing.T) {
	first := 10 * time.Second
	var got []time.Duration
	var b time.Duration
	for range 7 {
		b = nextBackoff(b, time.Second, first)
		got = append(got, b)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("back-offs (-want +got):\n%s", d)
	}
	if b := nextBackoff(5*time.Minute, 10*time.Minute, first); b != first {
		t.Errorf("after 10 min of running: back-off %s, want %s (reset)", b, first)
	}
}

func TestParseArgs(t *testing.T) {
	a, err := parseArgs([]string{"--forward=6443", "--expose=50051:31234", "--restart", "--restart-backoff=250ms", "--", "a", "x", "---", "b"})
	if err != nil {
		t.Fatal(err)
	}
	want := runArgs{forwards: []int{6443}, exposes: []exposed{{ns: 50051, host: 31234}}, restart: true, backoff: 250 * time.Millisecond, progs: [][]string{{"a", "x"}, {"b"}}}
	if d := cmp.Diff(want, a, cmp.AllowUnexported(runArgs{}, exposed{})); d != "" {
		t.Errorf("parseArgs (-want +got):\n%s", d)
	}
	if a, _ := parseArgs([]string{"--", "a"}); a.restart || a.backoff != restartBackoff {
		t.Errorf("defaults: restart %v, back-off %s; want false, %s", a.restart, a.backoff, restartBackoff)
	}
	for _, bad := range [][]string{{"--restart-backoff=soon", "--", "a"}, {"--restart-backoff=-1s", "--", "a"}, {"--", "a", "---"},
		{"--expose=50051", "--", "a"}, {"--expose=0:1", "--", "a"}, {"--expose=50051:http", "--", "a"}} {
		if _, err := parseArgs(bad); err == nil {
			t.Errorf("parseArgs(%q): no error", bad)
		}
	}
}

// buildNetnsRun builds this command into a temporary folder; it needs root
// to run (unshare).
func buildNetnsRun(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns-run needs root (unshare CLONE_NEWNET)")
	}
	bin := filepath.Join(t.TempDir(), "netns-run")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestRestart runs a program that always fails under --restart: it is
// started again after 100 ms, then 200 ms, each restart logged, and
// netns-run ends on SIGTERM. Without --restart the first exit ends
// netns-run with the program's status.
func TestRestart(t *testing.T) {
	bin := buildNetnsRun(t)
	runs := filepath.Join(t.TempDir(), "runs")
	prog := []string{"--", "sh", "-c", "echo run >> " + runs + "; exit 3"}

	cmd := exec.Command(bin, append([]string{"--restart", "--restart-backoff=100ms"}, prog...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(runs)
		if strings.Count(string(b), "run\n") >= 3 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("netns-run ended (%v) before the third run; stderr:\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no third run in 20 s; stderr:\n%s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("netns-run still runs 5 s after SIGTERM")
	}
	for _, want := range []string{
		"netns-run: restart sh in 100ms: it exited (exit status 3)",
		"netns-run: restart sh in 200ms: it exited (exit status 3)",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}

	err := exec.Command(bin, prog...).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("without --restart: %v, want exit status 3", err)
	}
}

// envServe makes the test binary, run by netns-run in TestExpose, a
// server: it listens on 127.0.0.1 at the port this names and answers each
// connection with the network namespace it runs in (/proc/self/ns/net).
const envServe = "NETNS_RUN_TEST_SERVE"

func TestMain(m *testing.M) {
	if port := os.Getenv(envServe); port != "" {
		l, err := net.Listen("tcp", "127.0.0.1:"+port)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ns, _ := os.Readlink("/proc/self/ns/net")
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			_, _ = fmt.Fprintln(c, ns)
			_ = c.Close()
		}
	}
	os.Exit(m.Run())
}

// TestExpose runs a server inside the namespace (this test binary, see
// envServe) on a port that --expose publishes on the host's loopback: a
// connection to the host port reaches it, and it answers from a network
// namespace other than the test's. A server on the same port in the
// host's namespace is not what answers: the namespace port is taken there
// by the test itself, so only the namespace's copy can serve it.
func TestExpose(t *testing.T) {
	bin := buildNetnsRun(t)
	// Both ports free on the host now; nsPort stays held by this test, so
	// that a dial of it on the host's loopback could only reach the test.
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	nsPort := held.Addr().(*net.TCPAddr).Port
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostPort := free.Addr().(*net.TCPAddr).Port
	_ = free.Close()

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, fmt.Sprintf("--expose=%d:%d", nsPort, hostPort), "--", self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", envServe, nsPort))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })

	hostNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var answer string
	deadline := time.Now().Add(20 * time.Second)
	for answer == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no answer through 127.0.0.1:%d in 20 s; netns-run stderr:\n%s", hostPort, stderr.String())
		}
		// Until the server listens, netns-run accepts and closes the
		// connection at once (its dial is refused): an empty answer.
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort), time.Second); err == nil {
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			b, _ := io.ReadAll(c)
			_ = c.Close()
			answer = strings.TrimSpace(string(b))
		}
		if answer == "" {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !strings.HasPrefix(answer, "net:[") {
		t.Fatalf("answer %q, want the server's network namespace (net:[inode])", answer)
	}
	if answer == hostNS {
		t.Errorf("the server answered from the host's network namespace %s, want its own", answer)
	}
}

// TestAddrAndForwardFrom runs a program in a namespace with --addr
// 10.244.0.1/16 on lo: it can bind an address of that range other than
// the one added (the whole prefix is local), and a connection to a pod IP
// on the --forward-from port reaches a server of the test on the host's
// loopback.
func TestAddrAndForwardFrom(t *testing.T) {
	bin := buildNetnsRun(t)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintln(c, "host-standin")
			_ = c.Close()
		}
	}()
	hostPort := host.Addr().(*net.TCPAddr).Port
	// Inside: bind 10.244.7.9:9999 (only local with the /16 on lo), then
	// read what 10.244.3.4:8000 answers (the relay to the host's server).
	script := `python3 - <<'PY'
import socket
s = socket.socket(); s.bind(("10.244.7.9", 9999)); s.close()
c = socket.create_connection(("10.244.3.4", 8000), timeout=5)
print("got", c.recv(100).decode().strip())
PY`
	cmd := exec.Command(bin, "--addr=10.244.0.1/16", fmt.Sprintf("--forward-from=0.0.0.0:8000=%d", hostPort), "--", "sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("netns-run: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "got host-standin" {
		t.Errorf("output %q, want %q", got, "got host-standin")
	}
}

func TestParseAddrArgs(t *testing.T) {
	a, err := parseArgs([]string{"--addr=10.244.0.1/16", "--forward-from=0.0.0.0:8000=31000", "--", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.addrs) != 1 || a.addrs[0].String() != "10.244.0.1/16" {
		t.Errorf("addrs %v, want [10.244.0.1/16]", a.addrs)
	}
	if d := cmp.Diff([]fromAddr{{ns: "0.0.0.0:8000", host: 31000}}, a.froms, cmp.AllowUnexported(fromAddr{})); d != "" {
		t.Errorf("froms (-want +got):\n%s", d)
	}
	for _, bad := range [][]string{{"--addr=10.244.0.1", "--", "a"}, {"--addr=::1/64", "--", "a"},
		{"--forward-from=0.0.0.0:8000", "--", "a"}, {"--forward-from=host:8000=1", "--", "a"}, {"--forward-from=0.0.0.0:0=1", "--", "a"}} {
		if _, err := parseArgs(bad); err == nil {
			t.Errorf("parseArgs(%q): no error", bad)
		}
	}
	msg := newAddrRequest(1, a.addrs[0], 7)
	// nlmsghdr 16 + ifaddrmsg 8 + two 8-byte attributes.
	if len(msg) != 40 || msg[16] != 2 || msg[17] != 16 || !bytes.Equal(msg[28:32], []byte{10, 244, 0, 1}) {
		t.Errorf("RTM_NEWADDR message %v: want length 40, AF_INET, prefix 16, IFA_LOCAL 10.244.0.1", msg)
	}
}
