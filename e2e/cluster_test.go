package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/e2e/vaultserver"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/steps"
)

// maasctlBin is the binary under test: $MAASCTL_BIN/maasctl (make test sets
// it), else built into a temporary folder by TestMain.
var maasctlBin string

func TestMain(m *testing.M) {
	code := func() int {
		if dir := os.Getenv("MAASCTL_BIN"); dir != "" {
			maasctlBin = filepath.Join(dir, "maasctl")
		} else {
			tmp, err := os.MkdirTemp("", "maasctl-e2e-bin")
			if err != nil {
				panic(err)
			}
			defer os.RemoveAll(tmp)
			maasctlBin = filepath.Join(tmp, "maasctl")
			out, err := exec.Command("go", "build", "-o", maasctlBin, "../cmd/maasctl").CombinedOutput()
			if err != nil {
				os.Stderr.Write(out)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// cluster is one local control plane with simulated operators and a
// Vault-API server, as a fresh OpenShift cluster meeting the prerequisites.
type cluster struct {
	env        *testenv.Env
	clients    *kube.Clients
	vault      *vaultserver.Server
	vaultAddr  string
	vaultToken string
	dir        string
}

type clusterOptions struct {
	simDelay map[string]time.Duration
}

func newCluster(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	env, err := testenv.Start(ctx, testenv.Options{})
	if errors.Is(err, testenv.ErrNotBuilt) && os.Getenv("MAASCTL_REQUIRE_TESTENV") == "" {
		t.Skipf("local control plane not built (%v): run make testenv", err)
	}
	if err != nil {
		t.Fatalf("start local control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	clients, err := kube.New(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logger, err := zap.Config{
		Level: zap.NewAtomicLevelAt(zap.InfoLevel), Encoding: "json",
		EncoderConfig: zap.NewProductionEncoderConfig(),
		OutputPaths:   []string{filepath.Join(dir, "sim.log")}, ErrorOutputPaths: []string{filepath.Join(dir, "sim.log")},
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	h, err := sim.Start(ctx, env.RESTConfig(), sim.Options{Delay: o.simDelay, Logger: logger})
	if err != nil {
		t.Fatalf("start simulators: %v", err)
	}
	t.Cleanup(func() { _ = h.Stop() })
	token := "e2e-root-token-" + strings.ReplaceAll(t.Name(), "/", "-")
	vs := vaultserver.New(vaultserver.Options{RootToken: token})
	addr, err := vs.Start(ctx)
	if err != nil {
		t.Fatalf("start Vault-API server: %v", err)
	}
	t.Cleanup(func() { _ = vs.Close() })
	return &cluster{env: env, clients: clients, vault: vs, vaultAddr: addr, vaultToken: token, dir: dir}
}

// run is one finished maasctl invocation.
type run struct {
	stdout, stderr string
	exit           int
	events         []steps.Event
	wall           time.Duration
}

func (c *cluster) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, maasctlBin, args...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+c.env.Kubeconfig(),
		"VAULT_ADDR="+c.vaultAddr,
		"VAULT_TOKEN="+c.vaultToken,
		"HOME="+c.dir, // no ~/.vault-token or ~/.kube from the machine
	)
	return cmd
}

// maasctl runs the binary to completion.
func (c *cluster) maasctl(t *testing.T, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := c.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errb.String(), wall: time.Since(t0)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("run maasctl: %v", err)
	}
	r.events = parseEvents(r.stdout)
	return r
}

func parseEvents(s string) []steps.Event {
	var evs []steps.Event
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev steps.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type != "" {
			evs = append(evs, ev)
		}
	}
	return evs
}

// stepsWith returns the step IDs of events of type typ.
func stepsWith(evs []steps.Event, typ steps.EventType) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev.Step)
		}
	}
	return out
}

func summary(t *testing.T, evs []steps.Event) *steps.Summary {
	t.Helper()
	for _, ev := range evs {
		if ev.Type == steps.EventRunDone && ev.Summary != nil {
			return ev.Summary
		}
	}
	t.Fatalf("no run-done event in output")
	return nil
}

func get(t *testing.T, c *cluster, apiVersion, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	live, err := c.clients.Get(context.Background(), u)
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", kind, ns, name, err)
	}
	return live
}
