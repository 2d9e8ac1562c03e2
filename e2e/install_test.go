package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/waiters"
)

const (
	vaultMount = "kv"
	vaultPath  = "cloudnativepg/maas-postgres"
	appsHost   = "maas.apps.openshift.example.com"
)

// registryIDs is every step of the default inventory.
func registryIDs(t *testing.T) []string {
	reg, err := steps.NewRegistry(inventory.Default())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range reg.Steps {
		ids = append(ids, s.ID)
	}
	sort.Strings(ids)
	return ids
}

// managedObjects is every object the default install writes, with its
// resourceVersion now.
func managedObjects(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	inv := inventory.Default()
	r, err := assets.Render(inv, assets.Facts{Host: appsHost})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, list := range r {
		objs = append(objs, list...)
	}
	for _, s := range [][2]string{
		{inv.Database.Namespace, inv.Database.SecretName},
		{inv.DBConfig.Namespace, inv.DBConfig.Name},
	} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("Secret")
		u.SetNamespace(s[0])
		u.SetName(s[1])
		objs = append(objs, u)
	}
	out := map[string]string{}
	for _, o := range objs {
		if o.GetKind() == "Subscription" && o.GetName() == "cloudnative-pg" {
			continue // not installed when CNPG is already served
		}
		live, err := c.clients.Get(context.Background(), o)
		if err != nil {
			t.Errorf("managed object %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			continue
		}
		out[fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())] = live.GetResourceVersion()
	}
	return out
}

// TestInstallEndToEnd is the acceptance test of the install: the built
// binary against the local control plane with simulated operators and the
// Vault-API server. First run: every step done. Second run: every step
// unchanged, no write, no resourceVersion changed. The Vault secret has one
// version and the password is in no output, log, event or ConfigMap.
func TestInstallEndToEnd(t *testing.T) {
	// Istio (created by the gateway controller once the GatewayClass is
	// accepted) appears only after the RHCL operator pod started, as on a
	// fresh cluster where operators install first: Kuadrant then reports
	// MissingDependency and maasctl must restart its operator once (B01).
	c := newCluster(t, clusterOptions{simDelay: map[string]time.Duration{"gateway": 8 * time.Second}})
	logFile := filepath.Join(c.dir, "maasctl.log")
	ids := registryIDs(t)

	first := c.maasctl(t, "install", "-o", "json", "--log-file", logFile)
	if first.exit != 0 {
		t.Fatalf("first install exit %d\nstdout:\n%s\nstderr:\n%s", first.exit, first.stdout, first.stderr)
	}
	done := stepsWith(first.events, steps.EventDone)
	sort.Strings(done)
	if strings.Join(done, " ") != strings.Join(ids, " ") {
		t.Errorf("first run done steps:\n got %v\nwant %v", done, ids)
	}
	t.Logf("first run: %s wall, %d reads, %d writes", first.wall, summary(t, first.events).Reads, summary(t, first.events).Writes)

	// The end state the deployment README's "Verify" list names.
	dsc := get(t, c, "datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "default-dsc")
	if p, _, _ := unstructured.NestedString(dsc.Object, "status", "phase"); p != "Ready" {
		t.Errorf("DSC phase %q, want Ready", p)
	}
	kq := get(t, c, "kuadrant.io/v1beta1", "Kuadrant", "kuadrant-system", "kuadrant")
	if cond, _ := waiters.GetCondition(kq, "Ready"); cond.Status != "True" {
		t.Errorf("Kuadrant %s", cond)
	}
	gw := get(t, c, "gateway.networking.k8s.io/v1", "Gateway", "openshift-ingress", "maas-default-gateway")
	if cond, _ := waiters.GetCondition(gw, "Programmed"); cond.Status != "True" {
		t.Errorf("Gateway %s", cond)
	}
	for _, k := range [][3]string{
		{"inference.opendatahub.io/v1alpha1", "ExternalProvider", "llama-coder-provider"},
		{"inference.opendatahub.io/v1alpha1", "ExternalModel", "qwen35-9b-coder"},
		{"maas.opendatahub.io/v1alpha1", "MaaSModelRef", "qwen35-9b-coder"},
	} {
		o := get(t, c, k[0], k[1], "llm-coding-assistant", k[2])
		if p, _, _ := unstructured.NestedString(o.Object, "status", "phase"); p != "Ready" {
			t.Errorf("%s phase %q, want Ready", k[1], p)
		}
	}
	sub := get(t, c, "maas.opendatahub.io/v1alpha1", "MaaSSubscription", "models-as-a-service", "llama-coder-default")
	if p, _, _ := unstructured.NestedString(sub.Object, "status", "phase"); p != "Active" {
		t.Errorf("MaaSSubscription phase %q, want Active", p)
	}
	// The progress stream shows the one restart.
	if !strings.Contains(first.stdout, "restarting the Kuadrant operator") {
		t.Errorf("expected the Kuadrant operator restart in the progress output")
	}

	before := managedObjects(t, c)
	second := c.maasctl(t, "install", "-o", "json", "--log-file", logFile)
	if second.exit != 0 {
		t.Fatalf("second install exit %d\nstdout:\n%s\nstderr:\n%s", second.exit, second.stdout, second.stderr)
	}
	unchanged := stepsWith(second.events, steps.EventSkipped)
	sort.Strings(unchanged)
	if strings.Join(unchanged, " ") != strings.Join(ids, " ") {
		t.Errorf("second run unchanged steps:\n got %v\nwant %v\n%s", unchanged, ids, second.stdout)
	}
	s2 := summary(t, second.events)
	if s2.Writes != 0 {
		t.Errorf("second run wrote %d times to managed objects, want 0", s2.Writes)
	}
	t.Logf("second run: %s wall (%s in the runner), %d reads, %d writes, %d lock writes", second.wall, s2.Duration, s2.Reads, s2.Writes, s2.LockWrites)
	after := managedObjects(t, c)
	for k, rv := range before {
		if after[k] != rv {
			t.Errorf("%s resourceVersion changed on the no-op run: %s -> %s", k, rv, after[k])
		}
	}

	// Exactly one password, generated once.
	if n := c.vault.Versions(vaultMount, vaultPath); n != 1 {
		t.Errorf("Vault %s/%s has %d versions, want 1", vaultMount, vaultPath, n)
	}
	password := c.vault.Data(vaultMount, vaultPath)["password"]
	if len(password) < 32 {
		t.Fatalf("password of length %d in Vault, want >= 32", len(password))
	}
	assertNoSecret(t, c, password, map[string]string{
		"first stdout": first.stdout, "first stderr": first.stderr,
		"second stdout": second.stdout, "second stderr": second.stderr,
		"log file": readFile(t, logFile),
	})
	// The Secrets hold it, as they must.
	sec, err := c.clients.Kube.CoreV1().Secrets("redhat-ai-gateway-infra").Get(context.Background(), "maas-db-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := steps.DBConnectionURL(inventory.Default(), password); string(sec.Data["DB_CONNECTION_URL"]) != want {
		t.Errorf("maas-db-config DB_CONNECTION_URL does not carry the Vault password")
	}
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

// assertNoSecret fails when secret appears in any text, any ConfigMap or any
// Event of the cluster.
func assertNoSecret(t *testing.T, c *cluster, secret string, texts map[string]string) {
	t.Helper()
	for name, s := range texts {
		if strings.Contains(s, secret) {
			t.Errorf("the password appears in %s", name)
		}
	}
	ctx := context.Background()
	cms, err := c.clients.Kube.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) == 0 {
		t.Fatal("no ConfigMaps listed; the check would prove nothing")
	}
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			if strings.Contains(v, secret) {
				t.Errorf("the password appears in ConfigMap %s/%s key %s", cm.Namespace, cm.Name, k)
			}
		}
	}
	evs, err := c.clients.Kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if strings.Contains(ev.Message, secret) || strings.Contains(ev.Reason, secret) {
			t.Errorf("the password appears in Event %s/%s", ev.Namespace, ev.Name)
		}
	}
}
