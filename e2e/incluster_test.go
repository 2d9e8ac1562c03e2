package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/steps"
)

// readDocs parses the YAML documents of a rendered file.
func readDocs(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, d := range strings.Split(string(b), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(d), &u.Object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if u.GetKind() != "" {
			out = append(out, u)
		}
	}
	return out
}

// applyAdmin server-side applies u as the cluster administrator (dryRun:
// validate only).
func applyAdmin(t *testing.T, c *cluster, u *unstructured.Unstructured, dryRun bool) {
	t.Helper()
	ri, _, err := c.clients.Resource(u.GroupVersionKind(), u.GetNamespace())
	if err != nil {
		t.Fatal(err)
	}
	o := metav1.ApplyOptions{FieldManager: "e2e-admin", Force: true}
	if dryRun {
		o.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := ri.Apply(context.Background(), u.GetName(), u, o); err != nil {
		t.Fatalf("apply %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
}

// tokenKubeconfig writes a kubeconfig of the local control plane that
// authenticates as ServiceAccount ns/name (a TokenRequest token).
func tokenKubeconfig(t *testing.T, c *cluster, ns, name, file string) string {
	t.Helper()
	tr, err := c.clients.Kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(c.env.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Token, ai.ClientCertificateData, ai.ClientKeyData, ai.ClientCertificate, ai.ClientKey = tr.Status.Token, nil, nil, "", ""
	}
	p := filepath.Join(c.dir, file)
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func ptrTo[T any](v T) *T { return &v }

// TestLeastPrivilegeInCluster (issue 15, item 4): the RBAC of 'maasctl
// render --in-cluster' is enough for the whole install, a converged
// re-run and verify run as its ServiceAccount, and every one of its rules
// is needed: with any one removed, preflight names the permission (and an
// install stops at preflight, before any step writes).
func TestLeastPrivilegeInCluster(t *testing.T) {
	parallel(t)
	fullOnly(t, "the RBAC of 'render --in-cluster' is enough for install, re-run and verify, and each of its rules is needed (TestInstallLeastPrivilegeKubernetesAuth runs the least-privilege Vault login)")
	c := newCluster(t, clusterOptions{})
	dir := filepath.Join(c.dir, "in-cluster")
	mustSucceed(t, c.maasctl(t, "render", "--in-cluster", "--dir", dir, "--set", "gateway.hostname="+appsHost))
	for _, u := range readDocs(t, filepath.Join(dir, "00-namespaces.yaml")) {
		applyAdmin(t, c, u, false)
	}
	rbac := readDocs(t, filepath.Join(dir, "01-rbac.yaml"))
	for _, u := range rbac {
		applyAdmin(t, c, u, false)
	}
	// The Job and its ConfigMap pass the API server's validation (no
	// container runs under kwok).
	for _, u := range readDocs(t, filepath.Join(dir, "02-job.yaml")) {
		applyAdmin(t, c, u, true)
	}
	kc := tokenKubeconfig(t, c, steps.StateNamespace, steps.DefaultInstallerServiceAccount, "installer.kubeconfig")
	// The Job runs with the rendered inventory, which names the host.
	as := []string{"--kubeconfig", kc, "--set", "gateway.hostname=" + appsHost}

	mustSucceed(t, c.install(t, as...))
	r := c.install(t, as...)
	mustSucceed(t, r)
	if s := summary(t, r.events); len(s.Done) != 0 {
		t.Errorf("re-run as the ServiceAccount applied %v, want every step unchanged", s.Done)
	}
	runLlamaCoder(t, c, 1)
	if v := c.maasctl(t, "verify", "--live-only", "--kubeconfig", kc); v.exit != 0 {
		t.Fatalf("verify --live-only as the ServiceAccount: exit %d\n%s\n%s", v.exit, v.stdout, v.stderr)
	}
	p := startPlane(t, c)
	if rep, v := verifyRun(t, c, p, "--kubeconfig", kc); v.exit != 0 || !rep.Passed {
		t.Fatalf("verify with the data path as the ServiceAccount: exit %d, failed %v\n%s", v.exit, rep.FailedCodes(), v.stdout)
	}
	if st := c.maasctl(t, "status", "--kubeconfig", kc); st.exit != 0 {
		t.Errorf("status as the ServiceAccount: exit %d\n%s", st.exit, st.stderr)
	}

	// Every rule is needed: remove one, preflight names it.
	ctx := context.Background()
	nRules := 0
	for _, role := range rbac {
		if role.GetKind() != "ClusterRole" && role.GetKind() != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
		ri, _, err := c.clients.Resource(role.GroupVersionKind(), role.GetNamespace())
		if err != nil {
			t.Fatal(err)
		}
		for i := range rules {
			nRules++
			rule := rules[i].(map[string]any)
			res := rule["resources"].([]any)[0].(string)
			if g := rule["apiGroups"].([]any)[0].(string); g != "" {
				res += "." + g
			}
			less := role.DeepCopy()
			_ = unstructured.SetNestedSlice(less.Object, append(append([]any{}, rules[:i]...), rules[i+1:]...), "rules")
			if _, err := ri.Apply(ctx, less.GetName(), less, metav1.ApplyOptions{FieldManager: "e2e-admin", Force: true}); err != nil {
				t.Fatal(err)
			}
			where := role.GetKind() + " " + role.GetNamespace() + "/" + role.GetName()
			var pr run
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
				pr = c.maasctl(t, append([]string{"preflight"}, as...)...)
				if pr.exit != 0 || time.Now().After(deadline) {
					break
				}
			}
			if pr.exit == 0 || !strings.Contains(pr.stdout, "permission denied: cannot ") || !strings.Contains(pr.stdout, " "+res) {
				t.Errorf("%s without its rule for %s %v: preflight exit %d, want it to name the permission\n%s\n%s", where, res, rule["resourceNames"], pr.exit, pr.stdout, pr.stderr)
			}
			if nRules == 1 {
				// An install stops at preflight: no step after it runs.
				ir := c.install(t, as...)
				if ir.exit == 0 || len(stepsWith(ir.events, steps.EventDone)) > 0 {
					t.Errorf("install without the rule for %s: exit %d, steps done %v", res, ir.exit, stepsWith(ir.events, steps.EventDone))
				}
			}
			applyAdmin(t, c, role, false)
		}
	}
	if nRules < 20 {
		t.Errorf("only %d rules rendered", nRules)
	}
	t.Logf("%d rules, each needed", nRules)
}
