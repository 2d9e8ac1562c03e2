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
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/vault/api"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/e2e/vaultserver"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/vault"
)

// Issue 7: Vault auth methods, KV versions, the cluster token from Vault,
// least privilege, and a token that expires mid-install. Each test gives the
// cluster its own Vault-API server (vaultserver) configured through Vault's
// HTTP API, as an operator would configure a real Vault.

// useVault replaces the cluster's Vault-API server with one built from opts
// (root token generated) and returns a root API client for it.
func useVault(t *testing.T, c *cluster, opts vaultserver.Options) *api.Client {
	t.Helper()
	opts.RootToken = "e2e-vault-root-" + randomSuffix(t)
	vs := vaultserver.New(opts)
	addr, err := vs.Start(context.Background())
	if err != nil {
		t.Fatalf("start Vault-API server: %v", err)
	}
	t.Cleanup(func() { _ = vs.Close() })
	c.vault, c.vaultAddr, c.vaultToken = vs, addr, opts.RootToken
	cfg := api.DefaultConfig()
	cfg.Address, cfg.MaxRetries = addr, 0
	root, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(opts.RootToken)
	return root
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	p, err := vault.GeneratePassword(vault.MinPasswordLength)
	if err != nil {
		t.Fatal(err)
	}
	return p[:12]
}

// serviceAccountToken creates namespace ns and ServiceAccount name (if
// missing), binds it to clusterRole when given, and returns a token from
// the TokenRequest API (valid one hour).
func serviceAccountToken(t *testing.T, cs kubernetes.Interface, ns, name, clusterRole string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create ServiceAccount %s/%s: %v", ns, name, err)
	}
	if clusterRole != "" {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name + "-" + clusterRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: clusterRole},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("bind %s/%s to %s: %v", ns, name, clusterRole, err)
		}
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// configureKubernetesAuth points the Kubernetes auth method at mount to the
// local kube-apiserver, with a reviewer ServiceAccount allowed to create
// TokenReviews (system:auth-delegator), as Vault's docs describe
// (https://developer.hashicorp.com/vault/docs/auth/kubernetes#configuration).
func configureKubernetesAuth(t *testing.T, root *api.Client, env *testenv.Env, cs kubernetes.Interface, mount string) {
	t.Helper()
	reviewer := serviceAccountToken(t, cs, "vault", "token-reviewer", "system:auth-delegator")
	cfg := env.RESTConfig()
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		ca = b
	}
	if err := root.Sys().EnableAuthWithOptions(mount, &api.EnableAuthOptions{Type: "kubernetes"}); err != nil {
		t.Fatalf("enable kubernetes auth: %v", err)
	}
	if _, err := root.Logical().Write("auth/"+mount+"/config", map[string]any{
		"kubernetes_host": cfg.Host, "kubernetes_ca_cert": string(ca), "token_reviewer_jwt": reviewer,
	}); err != nil {
		t.Fatalf("configure kubernetes auth: %v", err)
	}
}

// TestVaultKubernetesAuthTokenReview: Kubernetes auth configured against
// the local kube-apiserver's TokenReview API. A ServiceAccount token from
// the TokenRequest API logs in and reads/creates the secret; a token of a
// ServiceAccount the role does not bind, and a forged JWT, are refused.
func TestVaultKubernetesAuthTokenReview(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, testenv.Options{NoFixture: true, NoControllers: true})
	if errors.Is(err, testenv.ErrNotBuilt) && os.Getenv("MAASCTL_REQUIRE_TESTENV") == "" {
		t.Skipf("local control plane not built (%v): run make testenv", err)
	}
	if err != nil {
		t.Fatalf("start local control plane: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs, err := kubernetes.NewForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{env: env}
	root := useVault(t, c, vaultserver.Options{Policies: map[string]string{
		"maasctl": `path "kv/data/cloudnativepg/*" { capabilities = ["create", "read"] }`,
	}})
	configureKubernetesAuth(t, root, env, cs, "kubernetes")
	if _, err := root.Logical().Write("auth/kubernetes/role/maasctl", map[string]any{
		"bound_service_account_names": "maasctl", "bound_service_account_namespaces": "maasctl-ci", "token_policies": "maasctl", "token_ttl": "20m",
	}); err != nil {
		t.Fatal(err)
	}
	good := serviceAccountToken(t, cs, "maasctl-ci", "maasctl", "")
	other := serviceAccountToken(t, cs, "maasctl-ci", "someone-else", "")
	dir := t.TempDir()
	for _, k := range []string{api.EnvVaultAddress, api.EnvVaultToken, api.EnvVaultAgentAddr, api.EnvVaultNamespace} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", dir)

	tests := []struct {
		name    string
		jwt     string
		wantErr string
	}{
		{name: "bound service account", jwt: good},
		{name: "service account not bound", jwt: other, wantErr: "service account name not authorized"},
		{name: "forged JWT", jwt: good[:len(good)-4] + "AAAA", wantErr: "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jwtFile := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if err := os.WriteFile(jwtFile, []byte(tt.jwt), 0o600); err != nil {
				t.Fatal(err)
			}
			vc, err := vault.NewClient(vault.Options{Address: c.vaultAddr, Auth: vault.AuthOptions{Method: vault.AuthKubernetes, Role: "maasctl", JWTFile: jwtFile}})
			if err != nil {
				t.Fatal(err)
			}
			data, _, err := vc.EnsureSecret(ctx, "kv/cloudnativepg/maas-postgres", func() (map[string]string, error) {
				pw, err := vault.GeneratePassword(40)
				return map[string]string{"username": "maas", "password": pw}, err
			})
			if tt.wantErr != "" {
				t.Logf("error: %v", err)
				if !errors.Is(err, vault.ErrLoginFailed) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "role maasctl") {
					t.Fatalf("error %v, want a login failure with %q naming the role", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), tt.jwt) {
					t.Error("the JWT appears in the error")
				}
				return
			}
			if err != nil {
				t.Fatalf("EnsureSecret after Kubernetes login: %v\nvaultserver login errors: %v", err, c.vault.LoginErrors())
			}
			info, err := vc.LookupSelf(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(info.DisplayName, "maasctl-ci-maasctl") || len(data["password"]) != 40 {
				t.Errorf("token %s; password length %d", info, len(data["password"]))
			}
		})
	}
	if n := c.vault.Counts()["login:kubernetes"]; n != 1 {
		t.Errorf("%d successful logins, want 1", n)
	}

	// --kube-token-from-vault with a token the API server rejects, found
	// through the kubeconfig's cluster or through --server and
	// --certificate-authority without any kubeconfig: the run stops before
	// the install, naming the Vault path; a missing key is named too.
	c.dir = dir
	stale := "eyJhbGciOiJSUzI1NiJ9.stale-" + randomSuffix(t) + ".sig"
	if _, err := root.KVv2("kv").Put(ctx, "lab/rhoai-deployer", map[string]any{"token": stale}); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, env.RESTConfig().CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	host := env.RESTConfig().Host
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{name: "kubeconfig cluster", args: []string{"--kube-token-from-vault", "kv/data/lab/rhoai-deployer:token"},
			want: "the API server " + host + " rejects the token from Vault kv/data/lab/rhoai-deployer:token (401 Unauthorized)"},
		{name: "server flag", env: []string{"KUBECONFIG=" + filepath.Join(dir, "no-kubeconfig")},
			args: []string{"--server", host, "--certificate-authority", caFile, "--kube-token-from-vault", "kv/lab/rhoai-deployer:token"},
			want: "the API server " + host + " rejects the token from Vault kv/lab/rhoai-deployer:token"},
		{name: "missing key", args: []string{"--set", "vault.kubeTokenPath=kv/lab/rhoai-deployer:tokn"},
			want: `has no key "tokn" (keys: token)`},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			r := c.maasctlEnv(t, tt.env, append([]string{"install", "-o", "json"}, tt.args...)...)
			if r.exit != 1 || !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("exit %d, want 1 with %q\nstdout:\n%s\nstderr:\n%s", r.exit, tt.want, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, stale) {
				t.Error("the token from Vault appears in the output")
			}
		})
	}
}

// writeKubeconfigWithoutCredentials copies the cluster's kubeconfig with a
// user token the API server rejects, so that only a token from Vault can
// work.
func writeKubeconfigWithoutCredentials(t *testing.T, c *cluster) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(c.env.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Token = "not-a-valid-token"
	}
	path := filepath.Join(c.dir, "kubeconfig-no-credentials")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestInstallLeastPrivilegeKubernetesAuth is the least-privilege install:
// `maasctl vault policy` prints the policy for an inventory that takes the
// cluster token from Vault (--kube-token-from-vault); the policy is written
// to Vault as is; maasctl logs in with Kubernetes auth (TokenReview against
// the local kube-apiserver) to a role whose tokens carry exactly that policy
// (no default policy); the kubeconfig's own credentials are invalid. The
// full install succeeds, and neither the database password, the deployer
// token nor the login JWT appears in any output, log, ConfigMap
// (checkpoints included) or Event.
func TestInstallLeastPrivilegeKubernetesAuth(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	root := useVault(t, c, vaultserver.Options{})
	cs := c.clients.Kube
	const kubePath = "kv/data/lab/rhoai-deployer:token"

	deployer := serviceAccountToken(t, cs, "lab", "rhoai-deployer", "cluster-admin")
	if _, err := root.KVv2("kv").Put(context.Background(), "lab/rhoai-deployer", map[string]any{"token": deployer}); err != nil {
		t.Fatal(err)
	}

	pol := c.maasctlEnv(t, nil, "vault", "policy", "--kube-token-from-vault", kubePath)
	if pol.exit != 0 {
		t.Fatalf("vault policy exit %d\n%s\n%s", pol.exit, pol.stdout, pol.stderr)
	}
	if !strings.Contains(pol.stdout, "KV versions: as reported by Vault at "+c.vaultAddr) {
		t.Errorf("vault policy did not ask Vault for the KV versions:\n%s", pol.stdout)
	}
	if err := root.Sys().PutPolicy("maasctl", pol.stdout); err != nil {
		t.Fatalf("write the printed policy: %v\n%s", err, pol.stdout)
	}
	wantRules := []string{"auth/token/lookup-self", "auth/token/renew-self", "kv/data/cloudnativepg/maas-postgres", "kv/data/lab/rhoai-deployer", "sys/capabilities-self"}
	rules, err := vaultserver.ParsePolicy(pol.stdout)
	if err != nil {
		t.Fatal(err)
	}
	var gotRules []string
	for _, r := range rules {
		gotRules = append(gotRules, r.Path)
	}
	sort.Strings(gotRules)
	if strings.Join(gotRules, " ") != strings.Join(wantRules, " ") {
		t.Errorf("policy paths %v, want %v", gotRules, wantRules)
	}

	configureKubernetesAuth(t, root, c.env, cs, "kubernetes")
	if _, err := root.Logical().Write("auth/kubernetes/role/maasctl", map[string]any{
		"bound_service_account_names": "maasctl", "bound_service_account_namespaces": "maasctl-ci",
		"token_policies": "maasctl", "token_no_default_policy": true, "token_ttl": "30m",
	}); err != nil {
		t.Fatal(err)
	}
	jwt := serviceAccountToken(t, cs, "maasctl-ci", "maasctl", "")
	jwtFile := filepath.Join(c.dir, "sa-token")
	if err := os.WriteFile(jwtFile, []byte(jwt), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfigWithoutCredentials(t, c)
	logFile := filepath.Join(c.dir, "maasctl.log")
	args := []string{"install", "-o", "json", "--log-file", logFile, "--kubeconfig", kubeconfig, "--kube-token-from-vault", kubePath,
		"--set", "vault.auth.method=kubernetes", "--set", "vault.auth.role=maasctl", "--set", "vault.auth.serviceAccountTokenPath=" + jwtFile}
	noToken := []string{"VAULT_TOKEN="}

	first := c.maasctlEnv(t, noToken, args...)
	if first.exit != 0 {
		t.Fatalf("install with the least-privilege policy: exit %d\nstdout:\n%s\nstderr:\n%s\nvault login errors: %v", first.exit, first.stdout, first.stderr, c.vault.LoginErrors())
	}
	if done, ids := stepsWith(first.events, steps.EventDone), registryIDs(t); len(done) < len(ids) {
		t.Errorf("%d steps done, want all %d", len(done), len(ids))
	}
	second := c.maasctlEnv(t, noToken, args...)
	if second.exit != 0 {
		t.Fatalf("second install exit %d\n%s\n%s", second.exit, second.stdout, second.stderr)
	}
	if n := c.vault.Counts()["login:kubernetes"]; n < 2 {
		t.Errorf("%d Kubernetes logins to Vault, want one per run", n)
	}
	if n := c.vault.Versions(vaultMount, vaultPath); n != 1 {
		t.Errorf("%d password versions, want 1", n)
	}
	password := c.vault.Data(vaultMount, vaultPath)["password"]
	texts := map[string]string{
		"first stdout": first.stdout, "first stderr": first.stderr, "second stdout": second.stdout, "second stderr": second.stderr,
		"policy stdout": pol.stdout, "policy stderr": pol.stderr, "log file": readFile(t, logFile),
	}
	for name, secret := range map[string]string{"database password": password, "deployer token": deployer, "Vault login JWT": jwt} {
		if len(secret) < 32 {
			t.Fatalf("%s has length %d: the check would prove little", name, len(secret))
		}
		t.Run("no "+name, func(t *testing.T) { assertNoSecret(t, c, secret, texts) })
	}
}

// TestInstallVaultTokenExpiresMidRun: the token passes its TTL (by the
// Vault server's clock) right after the database step read the password,
// while the install waits for the database. maasctl reads Vault once per
// run, so the later steps do not need it and the run finishes (case B11,
// test 3). The next run with the expired token stops before writing
// anything, naming the token's source, its expiry and how to log in again.
// After "re-login" (a new token in VAULT_TOKEN) the run finds every step
// done and keeps the one password version.
func TestInstallVaultTokenExpiresMidRun(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{simDelay: map[string]time.Duration{"cnpg": 6 * time.Second}})
	clock := vaultserver.NewFakeClock(time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC))
	policy, err := steps.VaultPolicy(inventory.Default(), steps.VaultPolicyOptions{Locate: func(p string) (vault.Location, error) { return vault.LocationFor(p, 2) }})
	if err != nil {
		t.Fatal(err)
	}
	useVault(t, c, vaultserver.Options{Now: clock.Now, Policies: map[string]string{"maasctl": policy.HCL()}})
	t1, err := c.vault.CreateToken(vaultserver.TokenOptions{Policies: []string{"maasctl"}, NoDefaultPolicy: true, TTL: time.Hour, ExplicitMaxTTL: 90 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	advanced := false
	first, err := installStreaming(t, c, []string{"VAULT_TOKEN=" + t1}, func(ev steps.Event) {
		if ev.Type == steps.EventDone && ev.Step == "database/secret" && !advanced {
			// The database step has read Vault; the Cluster waits >= 6 s
			// for the simulated CNPG operator. The token expires now.
			clock.Advance(2 * time.Hour)
			advanced = true
		}
	})
	if err != nil || !advanced {
		t.Fatalf("first run: %v (advanced=%v), want exit 0: no step after the database step needs Vault\n%s", err, advanced, failedSummary(first))
	}
	if s := summary(t, first.events); len(s.Done) != len(registryIDs(t)) {
		t.Errorf("first run: %d steps done, want %d", len(s.Done), len(registryIDs(t)))
	}

	// The next run, still with the expired token, stops before any write
	// and says how to log in again.
	before := managedObjects(t, c)
	expired := c.maasctlEnv(t, []string{"VAULT_TOKEN=" + t1}, "install", "-o", "json")
	if expired.exit != 1 {
		t.Fatalf("run with the expired token: exit %d, want 1\n%s", expired.exit, failedSummary(expired))
	}
	msg := failedSummary(expired)
	for _, want := range []string{"vault: the Vault token cannot be used", "the Vault token from VAULT_TOKEN is no longer valid: it expired or was revoked",
		"fix: log in again (`vault login`) and export the new token as VAULT_TOKEN"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "grant the token") {
		t.Errorf("an expired token is reported as a missing policy:\n%s", msg)
	}
	for _, l := range strings.Split(msg, "\n") {
		if n := strings.Count(l, "export the new token as VAULT_TOKEN"); strings.Contains(l, "the Vault token cannot be used") && n != 1 {
			t.Errorf("the finding says its fix %d times, want once (the message must not repeat it): %s", n, l)
		}
	}
	if got := stepsWith(expired.events, steps.EventDone); len(got) > 0 {
		t.Errorf("steps %v ran with an expired Vault token", got)
	}
	if diff := cmp.Diff(before, managedObjects(t, c)); diff != "" {
		t.Errorf("the run with the expired token changed objects (-before +after):\n%s", diff)
	}
	// status shows the failed run's error (its checkpoint keeps it), as
	// doctor's MAAS-D030 fix promises (a new user's trial, session 42).
	st := c.maasctlEnv(t, []string{"VAULT_TOKEN=" + t1}, "status", "-o", "json")
	var srep steps.StatusReport
	if err := json.Unmarshal([]byte(st.stdout), &srep); err != nil {
		t.Fatalf("status -o json: %v (exit %d)\n%s\n%s", err, st.exit, st.stdout, st.stderr)
	}
	found := false
	for _, s := range srep.Steps {
		if s.ID == steps.PreflightStepID {
			found = true
			shown := s.State == steps.StateFailed && strings.Contains(s.Detail, "the last run's error: ") && strings.Contains(s.Detail, "the Vault token cannot be used")
			if !shown {
				t.Errorf("status of %s: %s, detail %q; want failed with the last run's error", s.ID, s.State, s.Detail)
			}
		}
	}
	if !found {
		t.Errorf("status -o json has no %s step:\n%s", steps.PreflightStepID, st.stdout)
	}

	// "vault login": a new token, exported as VAULT_TOKEN.
	t2, err := c.vault.CreateToken(vaultserver.TokenOptions{Policies: []string{"maasctl"}, NoDefaultPolicy: true, TTL: time.Hour, ExplicitMaxTTL: 90 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	second := c.maasctlEnv(t, []string{"VAULT_TOKEN=" + t2}, "install", "-o", "json")
	if second.exit != 0 {
		t.Fatalf("run after re-login: exit %d\n%s", second.exit, failedSummary(second))
	}
	// Only preflight runs again (it failed last time); every step the
	// first run did is unchanged.
	if s := summary(t, second.events); strings.Join(s.Done, " ") != steps.PreflightStepID || len(s.Unchanged) != len(registryIDs(t))-1 {
		t.Errorf("run after re-login: done %v, %d unchanged, want only %s done and the other %d unchanged", s.Done, len(s.Unchanged), steps.PreflightStepID, len(registryIDs(t))-1)
	}
	if n := c.vault.Versions(vaultMount, vaultPath); n != 1 {
		t.Errorf("%d password versions, want 1", n)
	}
	password := c.vault.Data(vaultMount, vaultPath)["password"]
	texts := map[string]string{"first stdout": first.stdout, "first stderr": first.stderr, "expired stdout": expired.stdout, "expired stderr": expired.stderr, "second stdout": second.stdout, "second stderr": second.stderr}
	for name, secret := range map[string]string{"password": password, "first token": t1, "second token": t2} {
		t.Run("no "+name, func(t *testing.T) { assertNoSecret(t, c, secret, texts) })
	}
}

// installStreaming runs `maasctl install -o json` with env added and calls
// onEvent with each event as it is printed; err is the exit error.
func installStreaming(t *testing.T, c *cluster, env []string, onEvent func(steps.Event)) (run, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := c.command(ctx, "install", "-o", "json")
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		var ev steps.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			onEvent(ev)
		}
	}
	err = cmd.Wait()
	r := run{stdout: out.String(), stderr: stderr.String(), events: parseEvents(out.String())}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.exit = ee.ExitCode()
	}
	return r, err
}

// TestInstallVaultTokenWithoutCreate: the secret does not exist and the
// token may read but not create it. The run stops before changing the
// cluster, names the data/ path and the missing capability, and writes
// nothing to Vault.
func TestInstallVaultTokenWithoutCreate(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	useVault(t, c, vaultserver.Options{Policies: map[string]string{
		"read-only": `path "kv/data/cloudnativepg/maas-postgres" { capabilities = ["read"] }`,
	}})
	tok, err := c.vault.CreateToken(vaultserver.TokenOptions{Policies: []string{"read-only"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := c.maasctlEnv(t, []string{"VAULT_TOKEN=" + tok}, "install", "-o", "json")
	if r.exit == 0 {
		t.Fatalf("install without create permission succeeded\n%s", r.stdout)
	}
	all := r.stdout + r.stderr
	for _, want := range []string{"kv/data/cloudnativepg/maas-postgres", `"create"`} {
		if !strings.Contains(all, want) {
			t.Errorf("output lacks %q:\n%s\n%s", want, r.stdout, r.stderr)
		}
	}
	if n := c.vault.Versions(vaultMount, vaultPath); n != 0 {
		t.Errorf("%d versions written, want 0", n)
	}
	if len(stepsWith(r.events, steps.EventDone)) != 0 {
		t.Errorf("steps done despite the failed preflight: %v", stepsWith(r.events, steps.EventDone))
	}
	if _, err := c.clients.Kube.CoreV1().Namespaces().Get(context.Background(), inventory.Default().Database.Namespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s exists (err %v): the run changed the cluster", inventory.Default().Database.Namespace, err)
	}
	assertNoSecret(t, c, tok, map[string]string{"stdout": r.stdout, "stderr": r.stderr})
}

// TestVaultStatusAppRoleAndKV: `maasctl vault status` logs in with AppRole
// (role ID and secret ID from the environment), on a KV v1 mount and on KV
// v2 with and without data/ in the path; nothing is written and no
// credential is printed.
func TestVaultStatusAppRoleAndKV(t *testing.T) {
	parallel(t)
	c := &cluster{dir: t.TempDir()}
	root := useVault(t, c, vaultserver.Options{
		Mounts:     []vaultserver.Mount{{Path: "kv", Version: 2}, {Path: "legacy", Version: 1}},
		AuthMounts: map[string]string{"ci": "approle"},
		Policies: map[string]string{"maasctl": `path "kv/data/cloudnativepg/*" { capabilities = ["create", "read"] }
path "legacy/cloudnativepg/*" { capabilities = ["create", "read"] }
path "kv/data/lab/*" { capabilities = ["read"] }`},
	})
	if _, err := root.Logical().Write("auth/ci/role/maasctl", map[string]any{"token_policies": "maasctl"}); err != nil {
		t.Fatal(err)
	}
	rid, err := root.Logical().Read("auth/ci/role/maasctl/role-id")
	if err != nil {
		t.Fatal(err)
	}
	sid, err := root.Logical().Write("auth/ci/role/maasctl/secret-id", nil)
	if err != nil {
		t.Fatal(err)
	}
	roleID, secretID := rid.Data["role_id"].(string), sid.Data["secret_id"].(string)
	if err := root.KVv1("legacy").Put(context.Background(), "cloudnativepg/maas-postgres", map[string]any{"password": "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.KVv2("kv").Put(context.Background(), "lab/rhoai-deployer", map[string]any{"token": "deployer-token-value"}); err != nil {
		t.Fatal(err)
	}
	env := []string{"VAULT_TOKEN=", "VAULT_ROLE_ID=" + roleID, "VAULT_SECRET_ID=" + secretID}
	base := []string{"vault", "status", "--set", "vault.auth.method=approle", "--set", "vault.auth.mountPath=ci"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "kv2 logical path", args: nil,
			want: []string{"AppRole login at auth/ci", "kv/cloudnativepg/maas-postgres -> kv/data/cloudnativepg/maas-postgres (KV v2): absent"}},
		{name: "kv2 data/ path with cluster token", args: []string{"--set", "database.vaultPath=kv/data/cloudnativepg/maas-postgres", "--kube-token-from-vault", "kv/data/lab/rhoai-deployer:token"},
			want: []string{"-> kv/data/cloudnativepg/maas-postgres (KV v2): absent", `kv/data/lab/rhoai-deployer:token -> kv/data/lab/rhoai-deployer (KV v2): key "token" present`}},
		{name: "kv1", args: []string{"--set", "database.vaultPath=legacy/cloudnativepg/maas-postgres"},
			want: []string{"legacy/cloudnativepg/maas-postgres -> legacy/cloudnativepg/maas-postgres (KV v1): exists"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := c.vaultCLI(t, env, append(base, tt.args...)...)
			if r.exit != 0 {
				t.Fatalf("exit %d\n%s\n%s", r.exit, r.stdout, r.stderr)
			}
			for _, want := range tt.want {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
			}
			for _, s := range []string{roleID, secretID, "deployer-token-value"} {
				if strings.Contains(r.stdout+r.stderr, s) {
					t.Errorf("a credential appears in the output")
				}
			}
		})
	}
	r := c.vaultCLI(t, []string{"VAULT_TOKEN=", "VAULT_ROLE_ID=" + roleID, "VAULT_SECRET_ID=wrong-" + secretID}, base...)
	if r.exit == 0 || !strings.Contains(r.stderr, "vault login with AppRole auth at auth/ci") || !strings.Contains(r.stderr, "invalid role or secret ID") {
		t.Errorf("wrong secret ID: exit %d\n%s", r.exit, r.stderr)
	}
	if n := c.vault.Versions("kv", "cloudnativepg/maas-postgres"); n != 0 {
		t.Errorf("vault status wrote %d versions", n)
	}

	// `vault policy` asks Vault for the KV version (here through the AppRole
	// login), falls back to KV v2 with a note when Vault cannot be asked,
	// and refuses an unknown version.
	policies := []struct {
		name     string
		env      []string
		args     []string
		exit     int
		want     string
		wantNote bool
	}{
		{name: "kv1 asked through AppRole", env: env, args: []string{"--set", "vault.auth.method=approle", "--set", "vault.auth.mountPath=ci",
			"--set", "database.vaultPath=legacy/cloudnativepg/maas-postgres"}, want: `path "legacy/cloudnativepg/maas-postgres" {`},
		{name: "no Vault: KV v2 assumed", env: []string{"VAULT_ADDR=", "VAULT_TOKEN="}, want: `path "kv/data/cloudnativepg/maas-postgres" {`, wantNote: true},
		{name: "explicit kv1", args: []string{"--kv-version", "1", "--kube-token-from-vault", "legacy/lab/deployer:token"}, want: `path "legacy/lab/deployer" {`},
		{name: "bad version", args: []string{"--kv-version", "3"}, exit: 2},
	}
	for _, tt := range policies {
		t.Run("policy "+tt.name, func(t *testing.T) {
			r := c.vaultCLI(t, tt.env, append([]string{"vault", "policy"}, tt.args...)...)
			if r.exit != tt.exit || !strings.Contains(r.stdout, tt.want) {
				t.Fatalf("exit %d (want %d), stdout lacks %q?\n%s\n%s", r.exit, tt.exit, tt.want, r.stdout, r.stderr)
			}
			if got := strings.Contains(r.stderr, "assuming KV v2"); got != tt.wantNote {
				t.Errorf("note on stderr: %v, want %v\n%s", got, tt.wantNote, r.stderr)
			}
		})
	}
}

// vaultCLI runs a maasctl command that needs no cluster.
func (c *cluster) vaultCLI(t *testing.T, env []string, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, maasctlBin, args...)
	cmd.Env = append(os.Environ(), "VAULT_ADDR="+c.vaultAddr, "HOME="+c.dir, "KUBECONFIG="+filepath.Join(c.dir, "none"))
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := run{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}
