package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNoKubeconfigIsNamed (issue 17, smaller items): with no kubeconfig
// and no --server, a command that needs the cluster stops with exit 2
// naming the missing kubeconfig and the fix, instead of client-go's
// fallback to localhost:8080 and its klog warning.
func TestNoKubeconfigIsNamed(t *testing.T) {
	parallel(t)
	home := t.TempDir()
	cmd := exec.Command(maasctlBin, "status")
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "KUBECONFIG=" + home + "/none"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stderr.String()
	if !strings.Contains(out, "--kubeconfig: no cluster to talk to") || !strings.Contains(out, "oc login") {
		t.Errorf("stderr should name the missing kubeconfig and the fix:\n%s", out)
	}
	if strings.Contains(out, "localhost:8080") || strings.Contains(out, "Neither --kubeconfig nor --master") {
		t.Errorf("stderr shows client-go's localhost fallback:\n%s", out)
	}
}
