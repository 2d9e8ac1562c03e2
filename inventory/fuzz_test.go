package inventory

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FuzzLoad feeds arbitrary bytes to Load as an inventory file. Load and
// Validate must not panic, and whatever Load accepts must survive a round
// trip through YAML() unchanged. The seeds run in every go test.
func FuzzLoad(f *testing.F) {
	if golden, err := os.ReadFile(defaultGolden); err == nil {
		f.Add(golden)
	}
	for _, s := range []string{
		"",
		"null",
		"[]",
		"42",
		"gateway: {hostname: '*.apps.example.com'}",
		"externalModels: [{name: m, port: 99999999999999999999}]",
		"externalModels: [null, {}, [], 1]",
		"operators:\n- id: a\n  minVersion: v1\n- id: a\n",
		"subscriptions: [{modelRefs: [{tokenRateLimits: [{limit: -1, window: 0d}]}]}]",
		"database: {storageSize: '1e999999', vaultPath: /}",
		"rhoai: {managedComponents: [kserve, kserve], removedComponents: [kserve]}",
		"a: &a [*a]",
		"gateway: {name: x, name: y}",
		"waitTimeoutSeconds: 1.0e3",
		"vault: {address: 'http://[::1'}",
		"kuadrant: {operatorSelector: 'a in ('}",
		"? [a]\n: b\n",
		"1: 2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "inv.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		inv, err := Load([]string{p}, nil)
		if err != nil {
			return
		}
		_ = inv.Validate()
		out, err := inv.YAML()
		if err != nil {
			t.Fatalf("YAML() of a loaded inventory: %v", err)
		}
		if err := os.WriteFile(p, out, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := Load([]string{p}, nil)
		if err != nil {
			t.Fatalf("Load(YAML()) = %v\n%s", err, out)
		}
		if again.Hash() != inv.Hash() {
			t.Fatalf("round trip changed the inventory:\n%s", out)
		}
	})
}

// FuzzSet feeds arbitrary --set strings to Load; it must not panic.
func FuzzSet(f *testing.F) {
	for _, s := range []string{
		"externalModels[0].port=8081",
		"operators[rhoai].channel=stable-3.6",
		"subscriptions[llama-coder-default].modelRefs[0].tokenRateLimits[0].window=1h",
		"rhoai.managedComponents=[a,b]",
		"a[",
		"a[]]=",
		"[0]=1",
		"gateway.name.x[1]=2",
		"authPolicies[0].modelRefs=[{name: a}, null, 3]",
		"vault={address: x}",
		"=",
		"operators[99999999999999999999999].id=x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, set string) {
		inv, err := Load(nil, []string{set})
		if err != nil {
			return
		}
		_ = inv.Validate()
		_ = inv.Hash()
	})
}

// maasctlBinary is the maasctl binary FuzzInstallRejectsBeforeWrites runs:
// $MAASCTL_BIN/maasctl (make test sets it), else one built once into a
// temporary folder.
var maasctlBinary struct {
	once sync.Once
	path string
	err  error
}

func buildMaasctl(t *testing.T) string {
	t.Helper()
	maasctlBinary.once.Do(func() {
		if dir := os.Getenv("MAASCTL_BIN"); dir != "" {
			maasctlBinary.path = filepath.Join(dir, "maasctl")
			return
		}
		dir, err := os.MkdirTemp("", "maasctl-fuzz-bin")
		if err != nil {
			maasctlBinary.err = err
			return
		}
		maasctlBinary.path = filepath.Join(dir, "maasctl")
		out, err := exec.Command("go", "build", "-o", maasctlBinary.path, "../cmd/maasctl").CombinedOutput()
		if err != nil {
			maasctlBinary.err = fmt.Errorf("go build ../cmd/maasctl: %v\n%s", err, out)
		}
	})
	if maasctlBinary.err != nil {
		t.Fatal(maasctlBinary.err)
	}
	return maasctlBinary.path
}

// countingAPI stands in for both the API server and Vault: it counts every
// request by kind and refuses each with 403 Forbidden, so an accepted
// inventory ends at its first request instead of installing.
type countingAPI struct {
	reads, writes atomic.Int64
}

func (c *countingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		c.reads.Add(1)
	default:
		c.writes.Add(1)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusForbidden)
	_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"forbidden by the fuzz test's counting server"}`)
}

// FuzzInstallRejectsBeforeWrites runs `maasctl install -f fuzzed.yaml
// --set fuzzed` against a server that counts requests. Whenever Load or
// Validate rejects the input, maasctl must exit 2 (bad input) without a
// single write request to the API server or Vault; and whenever maasctl
// exits 2, it must not have written. The seeds run in every go test.
func FuzzInstallRejectsBeforeWrites(f *testing.F) {
	if golden, err := os.ReadFile(defaultGolden); err == nil {
		f.Add(golden, "")
	}
	for _, s := range [][2]string{
		{"", ""},
		{"", "externalModels[0].port=99999"},
		{"", "gateway.hostname=*.apps.example.com"},
		{"", "nosuchkey=1"},
		{"", "operators[rhcl].minVersion=1.4.0"},
		{"gateway: {hostname: '*.apps.example.com'}", ""},
		{"externalModels: [{name: m, port: 99999999999999999999}]", ""},
		{"externalModels: [null, {}, [], 1]", ""},
		{"operators:\n- id: a\n  minVersion: v1\n- id: a\n", ""},
		{"subscriptions: [{modelRefs: [{tokenRateLimits: [{limit: -1, window: 0d}]}]}]", ""},
		{"database: {storageSize: '1e999999', vaultPath: /}", ""},
		{"rhoai: {managedComponents: [kserve, kserve], removedComponents: [kserve]}", ""},
		{"waitTimeoutSeconds: 0", ""},
		{"waitTimeoutSeconds: -5", ""},
		{"vault: {address: 'http://[::1'}", ""},
		{"gateway: {name: x, name: y}", ""},
		{"[]", ""},
	} {
		f.Add([]byte(s[0]), s[1])
	}
	f.Fuzz(func(t *testing.T, data []byte, set string) {
		if strings.ContainsRune(set, 0) {
			t.Skip("a command-line argument cannot hold NUL")
		}
		bin := buildMaasctl(t)
		dir := t.TempDir()
		p := filepath.Join(dir, "inv.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		var sets []string
		args := []string{"install", "-o", "json", "-f", p}
		if set != "" {
			sets = []string{set}
			args = append(args, "--set", set)
		}
		inv, err := Load([]string{p}, sets)
		if err == nil {
			err = inv.Validate()
		}
		rejected := err != nil

		api := &countingAPI{}
		srv := httptest.NewServer(api)
		defer srv.Close()
		kubeconfig := filepath.Join(dir, "kubeconfig")
		kc := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: " + srv.URL + "}\n" +
			"users:\n- name: u\n  user: {token: fuzz}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n"
		if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append(args, "--kubeconfig", kubeconfig)...)
		cmd.Env = []string{"HOME=" + dir, "VAULT_ADDR=" + srv.URL, "VAULT_TOKEN=fuzz", "PATH=" + os.Getenv("PATH")}
		out, runErr := cmd.CombinedOutput()
		if cmd.ProcessState == nil {
			t.Fatalf("run maasctl: %v", runErr)
		}
		code := cmd.ProcessState.ExitCode()
		if ctx.Err() != nil {
			t.Fatalf("maasctl did not finish within a minute: %v\n%s", runErr, out)
		}
		if rejected && code != 2 {
			t.Fatalf("Load/Validate rejected the inventory (%v) but maasctl exited %d, want 2\n%s", err, code, out)
		}
		if !rejected && code == 2 {
			t.Fatalf("Load/Validate accepted the inventory but maasctl exited 2\n%s", out)
		}
		if !rejected && api.reads.Load()+api.writes.Load() == 0 {
			t.Fatalf("an accepted inventory reached neither the API server nor Vault (exit %d): the counting server is not wired\n%s", code, out)
		}
		if code == 2 && api.writes.Load() != 0 {
			t.Fatalf("maasctl rejected the inventory after %d write requests (%d reads); rejection must come before any write\n%s",
				api.writes.Load(), api.reads.Load(), out)
		}
	})
}
