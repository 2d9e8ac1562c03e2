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

// EnvGOGC, when set, is the GOGC of kube-apiserver and etcd (Go's garbage
// collector target, a percentage; "off" disables it); unset, they inherit
// this process's environment, Go's default 100 unless GOGC is set. Why it
// is there: kube-apiserver is about half of the machine's CPU while the
// e2e tests run, and a CPU profile of it there spent about a quarter in
// the garbage collector (runtime.gcBgMarkWorker 18%, gcAssistAlloc 6%,
// bgsweep 2%). At GOGC=400, three e2e tests two at a time took 12% less
// wall and 14% less CPU (2026-12-05, two runs each), and an API server's
// RSS grew to 2-3 GiB over a test (1.1 GiB at 100); but the whole e2e
// package then took 3534 s against 3215 s at 100 (one run each, the
// slower one beside a metrics scraper), so nothing is set by default
// until a clean whole-package comparison says otherwise.
const EnvGOGC = "MAASCTL_TESTENV_GOGC"

// componentEnv is what component name's environment adds to this
// process's: GOGC for kube-apiserver and etcd when EnvGOGC is set.
func componentEnv(name string) []string {
	v := os.Getenv(EnvGOGC)
	if v == "" {
		return nil
	}
	switch name {
	case KubeAPIServer, Etcd:
		return []string{"GOGC=" + v}
	}
	return nil
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
