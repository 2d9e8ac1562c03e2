package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/e2e/vaultserver"
	"github.com/maasctl/maasctl/steps"
)

// simUserAgent is the User-Agent of the simulators' requests.
const simUserAgent = "maasctl-sim"

// cluster is one fresh local control plane with simulated operators, a
// Vault-API server and, when asked for, a recording proxy in front of the
// API server that maasctl (and the simulators) go through.
type cluster struct {
	te         *testenv.Env
	proxy      *faultproxy.Proxy
	vault      *vaultserver.Server
	vaultAddr  string
	vaultToken string
	dir        string
	// kubeconfig is what maasctl and Ansible use: the proxy's when there
	// is one, else the API server's.
	kubeconfig string
	stops      []func()
	sim        *sim.Handle
}

type clusterOptions struct {
	delays map[string]time.Duration
	// record puts a recording proxy between the clients and the API
	// server; the simulators go through it too (User-Agent simUserAgent),
	// and maasctl's watch streams are recorded event by event.
	record bool
}

// startCluster starts a control plane in dir (a new folder). Stop it with
// stop, also after an error.
func startCluster(ctx context.Context, dir string, o clusterOptions) (*cluster, error) {
	c := &cluster{dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	olmDelay, _ := sim.SplitOLMDelay(o.delays)
	te, err := testenv.Start(ctx, testenv.Options{StateDir: filepath.Join(dir, "testenv"), OperatorPodReadyDelay: olmDelay, RealKuadrant: true})
	if err != nil {
		return nil, fmt.Errorf("start the local control plane: %w", err)
	}
	c.te = te
	c.stops = append(c.stops, func() {
		// Keep the logs and kubeconfig; drop the etcd data (tens of MB).
		if te.Stop() == nil {
			_ = os.RemoveAll(filepath.Join(dir, "testenv", "etcd"))
		}
	})
	c.kubeconfig = te.Kubeconfig()
	simCfg := te.RESTConfig()
	if o.record {
		p, err := faultproxy.Start(ctx, faultproxy.Options{
			Upstream: te.RESTConfig(), Record: true,
			RecordWatchEvents: func(r *http.Request) bool { return isMaasctl(r.UserAgent()) },
		})
		if err != nil {
			c.stop()
			return nil, err
		}
		c.proxy = p
		c.stops = append(c.stops, func() { _ = p.Close() })
		c.kubeconfig = filepath.Join(dir, "proxy.kubeconfig")
		if err := p.WriteKubeconfig(c.kubeconfig); err != nil {
			c.stop()
			return nil, err
		}
		simCfg = p.RESTConfig()
	}
	simCfg.UserAgent = simUserAgent
	// The simulators without a client-side rate limit, with or without the
	// proxy (whose config has none either): they stand for many
	// controllers, each with a client of its own, and at the sim package's
	// default of 200 requests per second for all of them they were the
	// bottleneck of the scale figure, which is to measure maasctl. At
	// 1,000 models they make about 17,800 requests (the recording proxy's
	// count), 89 s at 200/s: through the proxy (no limit) the install took
	// 113 s, directly 217 s.
	simCfg.QPS = -1
	sctx, cancel := context.WithCancel(ctx)
	logger, closeLog, err := simLogger(filepath.Join(dir, "sim.log"))
	if err != nil {
		cancel()
		c.stop()
		return nil, err
	}
	so := sim.Options{Delay: simOnly(o.delays), Logger: logger, Postgres: te.Postgres().AdminConnString()}
	if ca := te.ServiceCA(); ca != nil {
		so.ServiceCABundle = ca.PEM() // the published service CA bundle holds the control plane's CA too
	}
	if so.IstioCRDs, err = testenv.IstioCRDFile(ctx); err != nil {
		cancel()
		closeLog()
		c.stop()
		return nil, err
	}
	h, err := sim.Start(sctx, simCfg, so)
	if err != nil {
		cancel()
		closeLog()
		c.stop()
		return nil, fmt.Errorf("start the simulators: %w", err)
	}
	c.sim = h
	c.stops = append(c.stops, func() { cancel(); _ = h.Stop(); closeLog() })
	c.vaultToken = "bench-root-token"
	c.vault = vaultserver.New(vaultserver.Options{RootToken: c.vaultToken})
	c.vaultAddr, err = c.vault.Start(ctx)
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("start the Vault-API server: %w", err)
	}
	c.stops = append(c.stops, func() { _ = c.vault.Close() })
	return c, nil
}

// stop stops what startCluster started, in reverse order.
func (c *cluster) stop() {
	for i := len(c.stops) - 1; i >= 0; i-- {
		c.stops[i]()
	}
	c.stops = nil
}

func isMaasctl(userAgent string) bool { return strings.HasPrefix(userAgent, "maasctl/") }

// runResult is one finished maasctl run.
type runResult struct {
	Args    []string
	Exit    int
	Wall    time.Duration
	Events  []steps.Event
	Summary *steps.Summary
	// PeakRSS is the run's maximum resident set size in bytes, the last
	// VmHWM read (pollPeakRSS).
	PeakRSS int64
	// CPU is the run's user plus system CPU time (getrusage).
	CPU            time.Duration
	Stdout, Stderr string
	Start          time.Time
}

// maasctl runs `install -o json` with args to completion, reading its
// JSON events and summary.
func (c *cluster) maasctl(ctx context.Context, bin string, extraEnv []string, args ...string) (*runResult, error) {
	return c.run(ctx, bin, extraEnv, append([]string{"install", "-o", "json"}, args...)...)
}

// run runs the binary with args (the command included) to completion
// against c; Events and Summary are filled when it writes JSON events.
// A non-zero exit is an error, with the result and the end of stderr.
func (c *cluster) run(ctx context.Context, bin string, extraEnv []string, args ...string) (*runResult, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+c.kubeconfig, "VAULT_ADDR="+c.vaultAddr, "VAULT_TOKEN="+c.vaultToken, "HOME="+c.dir)
	cmd.Env = append(cmd.Env, extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	r := &runResult{Args: args, Start: time.Now()}
	err := cmd.Start()
	if err != nil {
		return nil, fmt.Errorf("run maasctl: %w", err)
	}
	done := make(chan struct{})
	peak := pollPeakRSS(cmd.Process.Pid, done)
	err = cmd.Wait()
	r.Wall = time.Since(r.Start)
	close(done)
	r.PeakRSS = <-peak
	r.Stdout, r.Stderr = out.String(), errb.String()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
	case err != nil:
		return nil, fmt.Errorf("run maasctl: %w", err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev steps.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type != "" {
			r.Events = append(r.Events, ev)
			if ev.Type == steps.EventRunDone {
				r.Summary = ev.Summary
			}
		}
	}
	if r.Exit != 0 {
		return r, fmt.Errorf("maasctl %s: exit %d\n%s", strings.Join(args, " "), r.Exit, tail(r.Stderr, 20))
	}
	return r, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// simLogger is the simulators' debug log: JSON lines with RFC 3339
// nanosecond timestamps in path, one per reconcile decision (delays,
// status writes, creations), so that each step's time can be split into
// the simulated delays and the simulators' own work. close flushes it.
func simLogger(path string) (l *zap.Logger, close func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("simulator log: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(f), zapcore.DebugLevel)
	l = zap.New(core)
	return l, func() { _ = l.Sync(); _ = f.Close() }, nil
}

// simOnly is d without the OLM delay, which the control plane applies
// (testenv.Options.OperatorPodReadyDelay): OLM is real.
func simOnly(d map[string]time.Duration) map[string]time.Duration {
	_, out := sim.SplitOLMDelay(d)
	return out
}

// pollPeakRSS reads the VmHWM of process pid (/proc/<pid>/status: the
// peak resident set of its address space since exec) every 5 ms until done
// is closed, and then sends the last value read, in bytes (0 if none).
// getrusage's ru_maxrss of the child cannot be used: Go starts children
// with CLONE_VM|CLONE_VFORK, and exec carries the high-water mark of that
// shared address space (the bench's own memory, simulators and proxy
// records included) into the child's maxrss.
func pollPeakRSS(pid int, done <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	path := fmt.Sprintf("/proc/%d/status", pid)
	go func() {
		var peak int64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if v := vmHWM(path); v > peak {
				peak = v
			}
			select {
			case <-done:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// vmHWM is the VmHWM line of a /proc status file in bytes; 0 when it
// cannot be read (the process has exited).
func vmHWM(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib); err == nil {
				return kib * 1024
			}
		}
	}
	return 0
}
