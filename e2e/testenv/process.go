package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one component: either a child of this process (cmd set) or a
// process recorded in a pid file by an earlier `testenv up` (cmd nil).
type process struct {
	name    string
	pid     int
	cmd     *exec.Cmd
	logFile string
	pidFile string
	// done is closed when the process has exited (and, for a child, has
	// been reaped); waitErr is its exit status then.
	done    chan struct{}
	waitErr error
}

// startProcess launches bin/name with args, stdout and stderr appended to
// stateDir/name.log, and records its pid in stateDir/name.pid.
func startProcess(stateDir, binDir, name string, detach bool, args ...string) (*process, error) {
	cmd := exec.Command(filepath.Join(binDir, componentBinary(name)), args...)
	if env := componentEnv(name); len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Dir = stateDir
	cmd.SysProcAttr = sysProcAttr(detach)
	return launch(stateDir, name, detach, cmd)
}

// EnvGOGC is the GOGC of kube-apiserver and etcd (Go's garbage collector
// target, a percentage; "off" disables it); unset, DefaultGOGC. Why a
// default: kube-apiserver is about two thirds of the machine's CPU while
// the e2e tests run, and a 25-second CPU profile of it during
// TestB04LegacyKServeSwitchKept (2026-12-06) spent 28 % in the garbage
// collector (runtime.gcBgMarkWorker 17.6 %, gcAssistAlloc 8.5 %, bgsweep
// 2.5 %). Six e2e tests three at a time on this 2-CPU machine, CPU-seconds
// of the whole machine, wall time and peak memory in use (2026-12-06, one
// run per line entry, the settings in alternation):
//
//	kube-apiserver GOGC, GOMEMLIMIT   CPU-s          wall s         peak memory
//	100 (Go's default), none          383, 358, 412  201, 186, 220  5.3-5.7 GiB
//	200, none                         366            189            7.2 GiB
//	400, none                         306, 334       168, 195       10.0-10.2 GiB
//	400, 1 GiB                        380            205            5.3 GiB
//	400, 1536 MiB                     336            180            6.6 GiB
//	400, 2 GiB                        322            172            7.9 GiB
//
// So the default is GOGC 400 with kube-apiserver's heap held to
// DefaultGOMEMLIMIT: about 15 % less CPU and wall time for about 2.5 GiB
// more memory at three control planes. The whole e2e package did not show
// the gain in its one run since: 1888 s in make test from a fresh clone
// against 1819 s the day before at Go's defaults, with 11.6 GiB in use at
// most (about 5.2 GB before). The limit is soft (Go's runtime
// collects more often near it, and goes past it when the live heap needs
// to), so a larger control plane is slower, never killed. EnvGOGC=100 and
// EnvGOMEMLIMIT=off give Go's defaults.
const EnvGOGC = "MAASCTL_TESTENV_GOGC"

// EnvGOMEMLIMIT is the GOMEMLIMIT of kube-apiserver (Go's soft memory
// limit: a byte count with an optional B, KiB, MiB, GiB or TiB suffix, or
// "off" for none); unset, DefaultGOMEMLIMIT. See EnvGOGC.
const EnvGOMEMLIMIT = "MAASCTL_TESTENV_GOMEMLIMIT"

// EnvAPIServerFlags adds flags to kube-apiserver's command line,
// separated by spaces ("--watch-cache=false"), after the control plane's
// own: for measuring a setting's cost without a code change. Unset: none.
const EnvAPIServerFlags = "MAASCTL_TESTENV_APISERVER_FLAGS"

// DefaultGOGC and DefaultGOMEMLIMIT apply while EnvGOGC and EnvGOMEMLIMIT
// are unset (the measurements at EnvGOGC).
const (
	DefaultGOGC       = "400"
	DefaultGOMEMLIMIT = "2GiB"
)

// componentEnv is what component name's environment adds to this
// process's: GOGC for kube-apiserver and etcd, GOMEMLIMIT for
// kube-apiserver (EnvGOGC, EnvGOMEMLIMIT), nothing for the others.
func componentEnv(name string) []string {
	if name != KubeAPIServer && name != Etcd {
		return nil
	}
	env := []string{"GOGC=" + envOr(EnvGOGC, DefaultGOGC)}
	if name == KubeAPIServer {
		if v := envOr(EnvGOMEMLIMIT, DefaultGOMEMLIMIT); v != "off" {
			env = append(env, "GOMEMLIMIT="+v)
		}
	}
	return env
}

// envOr returns environment variable key, or def when it is unset or empty.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// componentBinary is the program a component runs as (argv[0]'s base
// name): the OLM operators run through netns-run.
func componentBinary(name string) string {
	switch name {
	case OLMOperator, CatalogOperator:
		return NetnsRun
	}
	return name
}

// startProcessEnv is startProcess of program bin, with env added to this
// process's environment.
func startProcessEnv(stateDir, bin, name string, detach bool, env []string, args ...string) (*process, error) {
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Dir = stateDir
	cmd.SysProcAttr = sysProcAttr(detach)
	return launch(stateDir, name, detach, cmd)
}

// launch starts cmd (its path, args, folder, environment and SysProcAttr
// set by the caller) as component name: stdout and stderr go to
// stateDir/name.log, its pid to stateDir/name.pid.
func launch(stateDir, name string, detach bool, cmd *exec.Cmd) (*process, error) {
	return launchLog(stateDir, name, detach, cmd, false)
}

// launchLog is launch; with appendLog the log is appended to rather than
// truncated (a component started more than once).
func launchLog(stateDir, name string, detach bool, cmd *exec.Cmd, appendLog bool) (*process, error) {
	p := &process{
		name:    name,
		logFile: filepath.Join(stateDir, name+".log"),
		pidFile: filepath.Join(stateDir, name+".pid"),
		done:    make(chan struct{}),
	}
	mode := os.O_TRUNC
	if appendLog {
		mode = os.O_APPEND
	}
	logf, err := os.OpenFile(p.logFile, os.O_CREATE|os.O_WRONLY|mode, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	defer logf.Close()
	// An *os.File is handed to the child as is (no copying goroutine), so
	// the log keeps working after a detached parent has exited.
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := startCmd(cmd, detach); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.cmd = cmd
	p.pid = cmd.Process.Pid
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := os.WriteFile(p.pidFile, []byte(strconv.Itoa(p.pid)+"\n"), 0o600); err != nil {
		_ = p.stop(0)
		return nil, fmt.Errorf("write %s pid file: %w", name, err)
	}
	return p, nil
}

// loadProcess reads stateDir/name.pid; it returns nil, nil when there is
// no pid file.
func loadProcess(stateDir, name string) (*process, error) {
	pidFile := filepath.Join(stateDir, name+".pid")
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s pid file: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("read %s pid file %s: not a pid: %q", name, pidFile, strings.TrimSpace(string(b)))
	}
	return &process{
		name:    name,
		pid:     pid,
		logFile: filepath.Join(stateDir, name+".log"),
		pidFile: pidFile,
	}, nil
}

// exited reports whether a child has exited; it is always false for a
// loaded process (use alive).
func (p *process) exited() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// alive reports whether the process still runs as this component.
func (p *process) alive() bool {
	if p.cmd != nil {
		return !p.exited()
	}
	return pidIsComponent(p.pid, componentBinary(p.name))
}

// stop sends SIGTERM, waits up to grace, then sends SIGKILL and waits again
// (up to 5 s). A process that is already gone is not an error, and is not
// signalled: its pid may belong to another process by now.
func (p *process) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	var done <-chan struct{} = p.done
	if p.done == nil {
		done = waitPID(p.pid)
	}
	if err := syscall.Kill(p.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s (pid %d): send SIGTERM: %w", p.name, p.pid, err)
	}
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
			return nil
		case <-t.C:
		}
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%s (pid %d): send SIGKILL: %w", p.name, p.pid, err)
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("%s (pid %d) still runs 5 s after SIGKILL", p.name, p.pid)
	}
}

// exitError describes an exited child for an error message: its exit
// status, the first line of a Go panic or fatal error in its log (a
// stack trace pushes it out of the last lines) and the last lines.
func (p *process) exitError() error {
	crash := ""
	if l := firstLineWith(p.logFile, "panic: ", "fatal error: "); l != "" {
		crash = "; it crashed: " + l
	}
	return fmt.Errorf("%s exited (%v)%s; last lines of %s:\n%s", p.name, p.waitErr, crash, p.logFile, tail(p.logFile, 15))
}

// withRestarts adds to err, for each of components whose programs netns-run
// started again, how often and the first panic in its log: a component
// that crashes at every start leaves a wait to run out, not an exit.
func withRestarts(stateDir string, err error, components ...string) error {
	for _, c := range components {
		log := filepath.Join(stateDir, c+".log")
		if n := countLines(log, "netns-run: restart "); n > 0 {
			err = fmt.Errorf("%w (%s was restarted %d times after exiting; first crash: %q; log %s)", err, c, n, firstLineWith(log, "panic: ", "fatal error: "), log)
		}
	}
	return err
}

// firstLineWith returns the first line of a file that starts with one of
// prefixes, "" if none does (or the file cannot be read).
func firstLineWith(path string, prefixes ...string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for l := range strings.Lines(string(b)) {
		for _, pre := range prefixes {
			if strings.HasPrefix(l, pre) {
				return strings.TrimSpace(l)
			}
		}
	}
	return ""
}

// countLines is how many lines of a file contain s (0 when it cannot be
// read).
func countLines(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n := 0
	for l := range strings.Lines(string(b)) {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// tail returns the last n lines of a file, indented, or a note why not.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, "    "+sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// logContains reports whether the file contains s.
func logContains(path, s string) bool {
	b, err := os.ReadFile(path)
	return err == nil && bytes.Contains(b, []byte(s))
}
