package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// mainModule is the module whose go.mod marks the repository root.
const mainModule = "github.com/maasctl/maasctl"

// repoRoot walks up from the working folder, then from the running
// executable's folder, to the go.mod of mainModule, skipping nested modules
// (the tools modules under e2e/testenv).
func repoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err == nil && modulePath(b) == mainModule {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("find repository root: no go.mod of module %s above the working folder or the executable", mainModule)
}

// defaultBinDir is $MAASCTL_TESTENV_BIN, else <repo>/bin/testenv.
func defaultBinDir() (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		return d, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("default binary folder (set %s): %w", EnvBinDir, err)
	}
	return filepath.Join(root, "bin", "testenv"), nil
}

// defaultCRDDir is $MAASCTL_CRDS, else <repo>/../shared/crds.
func defaultCRDDir() (string, error) {
	if d := os.Getenv(EnvCRDDir); d != "" {
		return d, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("default CRD folder (set %s): %w", EnvCRDDir, err)
	}
	return filepath.Join(filepath.Dir(root), "shared", "crds"), nil
}

// checkBinaries returns an error wrapping ErrNotBuilt that names every
// missing or non-executable binary.
func checkBinaries(binDir string, names ...string) error {
	var missing []string
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(binDir, n))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing in %s: %s", ErrNotBuilt, binDir, strings.Join(missing, ", "))
	}
	return nil
}

// goModCache returns `go env GOMODCACHE`, or $GOMODCACHE when the go
// command is not available (a test binary run on its own).
func goModCache(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output()
	if dir := string(bytes.TrimSpace(out)); err == nil && dir != "" {
		return dir, nil
	}
	if dir := os.Getenv("GOMODCACHE"); dir != "" {
		return dir, nil
	}
	if err == nil {
		err = errors.New("empty output")
	}
	return "", fmt.Errorf("%w: find the module cache: go env GOMODCACHE: %w", ErrNotBuilt, err)
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 right now. All
// listeners are held until every port is chosen, so the n are distinct; a
// parallel process may still take one before the component binds it, which
// Start detects ("address already in use") and retries.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// modulePath returns the module path declared in a go.mod file's content.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}
