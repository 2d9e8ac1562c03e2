package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/steps"
)

// lobj names an object for the lifecycle assertions.
type lobj struct{ apiVersion, kind, ns, name string }

func (o lobj) String() string {
	if o.ns == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.ns + "/" + o.name
}

func (o lobj) stub() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(o.apiVersion)
	u.SetKind(o.kind)
	u.SetNamespace(o.ns)
	u.SetName(o.name)
	return u
}

// live returns the object, or nil when it (or its kind) does not exist.
func (c *cluster) live(t *testing.T, o lobj) *unstructured.Unstructured {
	t.Helper()
	u, err := c.clients.Get(context.Background(), o.stub())
	if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s: %v", o, err)
	}
	return u
}

func (c *cluster) patch(t *testing.T, o lobj, pt types.PatchType, data string) {
	t.Helper()
	ri, _, err := c.clients.Resource(o.stub().GroupVersionKind(), o.ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ri.Patch(context.Background(), o.name, pt, []byte(data), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatalf("patch %s: %v", o, err)
	}
}

// create server-side applies objects as another tool would (field manager
// e2e-preexisting), before maasctl ever ran.
func (c *cluster) create(t *testing.T, yamlDocs string) {
	t.Helper()
	for _, doc := range strings.Split(yamlDocs, "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		ri, _, err := c.clients.Resource(u.GroupVersionKind(), u.GetNamespace())
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(u.Object)
		force := true
		if _, err := ri.Patch(context.Background(), u.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "e2e-preexisting", Force: &force}); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

func wantExit(t *testing.T, r run, code int, what string) {
	t.Helper()
	if r.exit != code {
		t.Fatalf("%s: exit %d, want %d after %s\n%s\nstdout:\n%s", what, r.exit, code, r.wall.Round(time.Second), failedSummary(r), r.stdout)
	}
}

var (
	dscObj         = lobj{"datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "default-dsc"}
	subscriptionCR = lobj{"maas.opendatahub.io/v1alpha1", "MaaSSubscription", "models-as-a-service", "llama-coder-default"}
	authPolicyCR   = lobj{"maas.opendatahub.io/v1alpha1", "MaaSAuthPolicy", "models-as-a-service", "llama-coder-access"}
	providerCR     = lobj{"inference.opendatahub.io/v1alpha1", "ExternalProvider", "llm-coding-assistant", "llama-coder-provider"}
	cnpgCluster    = lobj{"postgresql.cnpg.io/v1", "Cluster", "rhoai-maas-db", "maas-postgres"}
	cnpgPVC        = lobj{"v1", "PersistentVolumeClaim", "rhoai-maas-db", "maas-postgres-1"}
	dbSecretObj    = lobj{"v1", "Secret", "rhoai-maas-db", "maas-postgres-secret"}
	cnpgSub        = lobj{"operators.coreos.com/v1alpha1", "Subscription", "openshift-operators", "cloudnative-pg"}
	gatewayClass   = lobj{"gateway.networking.k8s.io/v1", "GatewayClass", "", "openshift-default"}
	stateNS        = lobj{"v1", "Namespace", "", steps.StateNamespace}
)

// removedByUninstall are objects the install created that uninstall must
// remove whether or not the data is kept.
var removedByUninstall = []lobj{
	subscriptionCR, authPolicyCR, providerCR,
	{"maas.opendatahub.io/v1alpha1", "MaaSModelRef", "llm-coding-assistant", "qwen35-9b-coder"},
	{"inference.opendatahub.io/v1alpha1", "ExternalModel", "llm-coding-assistant", "qwen35-9b-coder"},
	dscObj,
	// The RHOAI operator created it during the install; once its CSV is
	// gone nothing re-creates it.
	{"dscinitialization.opendatahub.io/v2", "DSCInitialization", "", "default-dsci"},
	{"gateway.networking.k8s.io/v1", "Gateway", "openshift-ingress", "maas-default-gateway"},
	{"route.openshift.io/v1", "Route", "openshift-ingress", "maas-default-gateway-https"},
	{"cert-manager.io/v1", "Certificate", "openshift-ingress", "maas-default-gateway-cert"},
	{"kuadrant.io/v1beta1", "Kuadrant", "kuadrant-system", "kuadrant"},
	{"operator.openshift.io/v1", "LeaderWorkerSetOperator", "", "cluster"},
	{"v1", "Secret", "redhat-ai-gateway-infra", "maas-db-config"},
	{"operators.coreos.com/v1alpha1", "Subscription", "openshift-operators", "rhcl-operator"},
	{"operators.coreos.com/v1alpha1", "Subscription", "openshift-lws-operator", "leader-worker-set"},
	{"operators.coreos.com/v1alpha1", "Subscription", "redhat-ods-operator", "rhods-operator"},
	{"v1", "Namespace", "", "redhat-ods-operator"},
	{"v1", "Namespace", "", "openshift-lws-operator"},
	{"v1", "Namespace", "", "models-as-a-service"},
	{"v1", "Namespace", "", "redhat-ai-gateway-infra"},
}

// preExisting are objects that exist before maasctl first runs; uninstall
// must leave every one of them in place.
var preExisting = []lobj{
	{"v1", "Namespace", "", "kuadrant-system"},
	{"v1", "ConfigMap", "kuadrant-system", "site-settings"},
	{"v1", "ConfigMap", "llm-coding-assistant", "team-notes"},
	{"v1", "Namespace", "", "llm-coding-assistant"},
	{"v1", "Secret", "llm-coding-assistant", "llama-coder-api-key"},
	{"v1", "Service", "llm-coding-assistant", "llama-coder"},
	{"operators.coreos.com/v1", "OperatorGroup", "openshift-operators", "global-operators"},
	{"v1", "Namespace", "", "openshift-operators"},
}

// installedCSVs returns the installedCSV of each OLM Subscription maasctl
// made, to check later that uninstall removed the CSVs too (case B20).
func installedCSVs(t *testing.T, c *cluster) []lobj {
	t.Helper()
	var out []lobj
	for _, s := range []lobj{
		{"operators.coreos.com/v1alpha1", "Subscription", "openshift-operators", "rhcl-operator"},
		{"operators.coreos.com/v1alpha1", "Subscription", "openshift-lws-operator", "leader-worker-set"},
		{"operators.coreos.com/v1alpha1", "Subscription", "redhat-ods-operator", "rhods-operator"},
	} {
		u := c.live(t, s)
		if u == nil {
			t.Fatalf("%s missing after install", s)
		}
		name, _, _ := unstructured.NestedString(u.Object, "status", "installedCSV")
		out = append(out, lobj{"operators.coreos.com/v1alpha1", "ClusterServiceVersion", s.ns, name})
	}
	return out
}

func assertGone(t *testing.T, c *cluster, what string, objs ...lobj) {
	t.Helper()
	for _, o := range objs {
		if u := c.live(t, o); u != nil {
			t.Errorf("%s: %s still exists (deletionTimestamp %v, finalizers %v)", what, o, u.GetDeletionTimestamp(), u.GetFinalizers())
		}
	}
}

func assertThere(t *testing.T, c *cluster, what string, objs ...lobj) {
	t.Helper()
	for _, o := range objs {
		u := c.live(t, o)
		if u == nil {
			t.Errorf("%s: %s is gone", what, o)
		} else if u.GetDeletionTimestamp() != nil {
			t.Errorf("%s: %s is being deleted", what, o)
		}
	}
}

// TestLifecycle drives the built binary through the life of an install on
// the local control plane (kube-controller-manager running, so namespace
// deletion and garbage collection are real): status, diff and plan on an
// unchanged install and after a manual edit, --only with its dependency
// check, uninstall stopped by a finalizer nobody clears, uninstall keeping
// the data, install again, uninstall with --delete-data, install again.
// Objects that existed before the first install survive every uninstall.
func TestLifecycle(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	c.create(t, `apiVersion: v1
kind: Namespace
metadata: {name: kuadrant-system, labels: {team: platform}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: site-settings, namespace: kuadrant-system}
data: {owner: platform-team}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: team-notes, namespace: llm-coding-assistant}
data: {note: kept}`)

	first := c.maasctl(t, "install", "-o", "json")
	wantExit(t, first, 0, "first install")
	csvs := installedCSVs(t, c)

	// status: every step done, the operators' CSVs, the endpoint.
	st := c.maasctl(t, "status", "-o", "json")
	wantExit(t, st, 0, "status")
	var rep steps.StatusReport
	if err := json.Unmarshal([]byte(st.stdout), &rep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, st.stdout)
	}
	for _, s := range rep.Steps {
		if s.State != steps.StateDone || s.LastRun == nil {
			t.Errorf("status: step %s is %s (%s), want done with a last run", s.ID, s.State, s.Detail)
		}
	}
	if len(rep.Steps) != len(registryIDs(t)) {
		t.Errorf("status lists %d steps, want %d", len(rep.Steps), len(registryIDs(t)))
	}
	for _, op := range rep.Operators {
		if op.InstalledCSV == "" || op.Version == "" || op.Phase != "Succeeded" {
			t.Errorf("status: operator %s: CSV %q version %q phase %q (%s)", op.Package, op.InstalledCSV, op.Version, op.Phase, op.Detail)
		}
	}
	if rep.Endpoint != "https://"+appsHost+"/v1" {
		t.Errorf("status endpoint %q", rep.Endpoint)
	}
	if rep.LastRun == nil || rep.LastRun.Steps != len(rep.Steps) {
		t.Errorf("status last run %+v", rep.LastRun)
	}
	if table := c.maasctl(t, "status"); table.exit != 0 || !strings.Contains(table.stdout, "platform/gateway") || !strings.Contains(table.stdout, "Endpoint:  https://"+appsHost+"/v1") {
		t.Errorf("status table: exit %d\n%s%s", table.exit, table.stdout, table.stderr)
	}

	// diff on the unchanged install: exit 0, no output at all.
	d := c.maasctl(t, "diff")
	wantExit(t, d, 0, "diff after install")
	if d.stdout != "" || d.stderr != "" {
		t.Errorf("diff after install printed:\n%s%s", d.stdout, d.stderr)
	}
	if p := c.maasctl(t, "plan"); p.exit != 0 || !strings.Contains(p.stdout, "Nothing to do") {
		t.Errorf("plan after install: exit %d\n%s%s", p.exit, p.stdout, p.stderr)
	}

	// A manual edit of a field maasctl manages: diff shows that field and
	// exits 2; plan names the drifted step; --only repairs it.
	c.patch(t, subscriptionCR, types.JSONPatchType, `[{"op":"replace","path":"/spec/modelRefs/0/tokenRateLimits/0/limit","value":5}]`)
	d = c.maasctl(t, "diff")
	wantExit(t, d, 2, "diff after a manual edit")
	if !strings.Contains(d.stdout, "~ MaaSSubscription models-as-a-service/llama-coder-default (access/subscription)") ||
		!strings.Contains(d.stdout, "~ spec.modelRefs[0].tokenRateLimits[0].limit: 5 -> 200000") {
		t.Errorf("diff does not show the edited field:\n%s", d.stdout)
	}
	dj := c.maasctl(t, "diff", "-o", "json")
	wantExit(t, dj, 2, "diff -o json after a manual edit")
	var drep steps.DiffReport
	if err := json.Unmarshal([]byte(dj.stdout), &drep); err != nil {
		t.Fatal(err)
	}
	if len(drep.Objects) != 1 || len(drep.Objects[0].Changes) != 1 {
		t.Errorf("diff should report exactly the one edited field: %+v", drep.Objects)
	}
	pl := c.maasctl(t, "plan", "-o", "json")
	wantExit(t, pl, 0, "plan")
	var prep steps.PlanReport
	if err := json.Unmarshal([]byte(pl.stdout), &prep); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, s := range prep.Run() {
		reasons[s.ID] = s.Reason
	}
	if !strings.HasPrefix(reasons["access/subscription"], "drifted") {
		t.Errorf("plan: access/subscription reason %q, want drifted; plan: %v", reasons["access/subscription"], reasons)
	}
	if _, ok := reasons["platform/gateway"]; ok {
		t.Errorf("plan would run platform/gateway, which is unchanged")
	}

	bad := c.maasctl(t, "install", "--only", "access/subscriptoin")
	wantExit(t, bad, 2, "install --only with an unknown step")
	if !strings.Contains(bad.stderr, "unknown step access/subscriptoin") || !strings.Contains(bad.stderr, "access/subscription") {
		t.Errorf("unknown step error should list the valid IDs:\n%s", bad.stderr)
	}
	fix := c.maasctl(t, "install", "--only", "access/subscription", "-o", "json")
	wantExit(t, fix, 0, "install --only access/subscription")
	if got := stepsWith(fix.events, steps.EventDone); !reflect.DeepEqual(got, []string{"access/subscription"}) {
		t.Errorf("--only ran %v, want [access/subscription] (preflight unchanged)\n%s", got, fix.stdout)
	}
	wantExit(t, c.maasctl(t, "diff"), 0, "diff after the repair")

	// --only a step whose dependency drifted: a clear error, nothing done.
	c.patch(t, providerCR, types.MergePatchType, `{"spec":{"endpoint":"elsewhere.example.com"}}`)
	dep := c.maasctl(t, "install", "--only", "models/model")
	wantExit(t, dep, 2, "install --only models/model with models/provider drifted")
	if !strings.Contains(dep.stderr, "models/model needs models/provider (drifted") {
		t.Errorf("dependency error should name the step and why:\n%s", dep.stderr)
	}
	wantExit(t, c.maasctl(t, "install", "--only", "models/provider,models/model"), 0, "install --only models/provider,models/model")
	wantExit(t, c.maasctl(t, "diff"), 0, "diff after the second repair")

	// uninstall --dry-run: the order, nothing changed.
	dry := c.maasctl(t, "uninstall", "--dry-run")
	wantExit(t, dry, 0, "uninstall --dry-run")
	order := []string{"access/subscription", "access/auth-policy", "models/model", "rhoai/dsc", "rhoai/dsci",
		"platform/kuadrant", "platform/gateway", "database/cluster", "operators/rhoai", "database/operator", steps.NamespacesStepID}
	last := -1
	for _, id := range order {
		i := strings.Index(dry.stdout, ". "+id+"\n")
		if i < 0 || i < last {
			t.Errorf("dry run: %s missing or out of order:\n%s", id, dry.stdout)
			break
		}
		last = i
	}
	for _, want := range []string{"keep   Cluster rhoai-maas-db/maas-postgres", "delete ClusterServiceVersion redhat-ods-operator/", "keep   Namespace kuadrant-system",
		"keep   Vault secret kv/cloudnativepg/maas-postgres (the database password; --delete-data deletes it)"} {
		if !strings.Contains(dry.stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, dry.stdout)
		}
	}
	assertThere(t, c, "after uninstall --dry-run", dscObj, subscriptionCR)

	// A finalizer nobody clears stops the uninstall, naming the object and
	// the finalizer; nothing after it (operators) is touched.
	c.patch(t, authPolicyCR, types.MergePatchType, `{"metadata":{"finalizers":["e2e.maasctl.io/never-cleared"]}}`)
	stuck := c.maasctl(t, "uninstall", "--wait-timeout", "5s", "-o", "json")
	wantExit(t, stuck, 4, "uninstall with a stuck finalizer")
	if !strings.Contains(stuck.stderr, "MaaSAuthPolicy models-as-a-service/llama-coder-access") || !strings.Contains(stuck.stderr, "e2e.maasctl.io/never-cleared") {
		t.Errorf("stuck uninstall should name the object and its finalizer:\n%s", stuck.stderr)
	}
	assertThere(t, c, "after the stopped uninstall", dscObj, lobj{"operators.coreos.com/v1alpha1", "Subscription", "redhat-ods-operator", "rhods-operator"})

	// Another Gateway of the class: the GatewayClass must stay.
	c.create(t, `apiVersion: v1
kind: Namespace
metadata: {name: team-gw}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: other, namespace: team-gw}
spec:
  gatewayClassName: openshift-default
  listeners: [{name: http, port: 80, protocol: HTTP}]`)

	// --force-remove-finalizers clears the stuck finalizer, says so, and
	// the uninstall completes (the data kept).
	un := c.maasctl(t, "uninstall", "--force-remove-finalizers", "--wait-timeout", "20s", "-o", "json")
	wantExit(t, un, 0, "uninstall --force-remove-finalizers (data kept)")
	if !strings.Contains(un.stdout, "removed finalizers [e2e.maasctl.io/never-cleared] from MaaSAuthPolicy models-as-a-service/llama-coder-access") {
		t.Errorf("uninstall should say which finalizers it removed:\n%s", un.stdout)
	}
	assertGone(t, c, "uninstall", removedByUninstall...)
	assertGone(t, c, "uninstall: CSVs", csvs...)
	assertThere(t, c, "uninstall keeps the data", cnpgCluster, cnpgPVC, dbSecretObj, cnpgSub, stateNS)
	if n := c.vault.Versions(vaultMount, vaultPath); n != 1 {
		t.Errorf("Vault secret has %d versions after uninstall without --delete-data, want 1", n)
	}
	assertThere(t, c, "uninstall keeps the GatewayClass another Gateway uses", gatewayClass)
	assertThere(t, c, "uninstall without --purge-crds keeps CRDs", crd("kuadrants.kuadrant.io"), crd("maassubscriptions.maas.opendatahub.io"))
	assertThere(t, c, "uninstall keeps what existed before", preExisting...)
	if ns := c.live(t, lobj{"v1", "Namespace", "", "llm-coding-assistant"}); ns != nil && ns.GetLabels()["app.kubernetes.io/managed-by"] == "maasctl" {
		t.Errorf("adopted Namespace llm-coding-assistant still carries maasctl's managed-by label")
	}
	if ns := c.live(t, lobj{"v1", "Namespace", "", "kuadrant-system"}); ns != nil && ns.GetLabels()["team"] != "platform" {
		t.Errorf("adopted Namespace kuadrant-system lost its own label: %v", ns.GetLabels())
	}
	checkUninstallOrder(t, un.events)
	st = c.maasctl(t, "status", "-o", "json")
	wantExit(t, st, 0, "status after uninstall")
	rep = steps.StatusReport{}
	if err := json.Unmarshal([]byte(st.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Steps {
		if s.ID == "access/subscription" && s.State != steps.StatePending {
			t.Errorf("status after uninstall: access/subscription is %s, want pending", s.State)
		}
	}
	// status and doctor say MaaS was uninstalled on purpose, and what was
	// kept, instead of a finding per removed step and object.
	if u := rep.Uninstalled; u == nil || time.Since(u.At) > 10*time.Minute || !slices.ContainsFunc(u.Kept, func(k string) bool { return strings.HasPrefix(k, "Cluster rhoai-maas-db/") }) {
		t.Errorf("status after uninstall: uninstalled %+v, want the uninstall's time and the kept CNPG Cluster", u)
	}
	checkDoctorNotInstalled(t, c, "after uninstall (data kept)", "maasctl uninstall finished at ", "kept on purpose: ", "Cluster rhoai-maas-db/maas-postgres (")
	if table := c.maasctl(t, "status"); !strings.Contains(table.stdout, "MaaS was uninstalled: 'maasctl uninstall' finished at ") || !strings.Contains(table.stdout, "  kept: Cluster rhoai-maas-db/") {
		t.Errorf("status table after uninstall does not say MaaS was uninstalled and what was kept:\n%s", table.stdout)
	}

	// An upgrade from a maasctl that kept the record in one ConfigMap: the
	// install reads it, writes it as per-step shards and deletes it, and
	// the kept data's "created" entries survive (so --delete-data below
	// deletes the Cluster).
	kept := toLegacyRecord(t, c)
	again := c.maasctl(t, "install", "-o", "json")
	wantExit(t, again, 0, "install after uninstall")
	checkMigrated(t, c, kept)
	assertThere(t, c, "install again", removedByUninstall...)
	if n := c.vault.Versions(vaultMount, vaultPath); n != 1 {
		t.Errorf("Vault has %d password versions after re-install, want 1 (the kept database's)", n)
	}
	wantExit(t, c.maasctl(t, "diff"), 0, "diff after install again")
	if _, err := c.clients.Kube.CoreV1().ConfigMaps(steps.StateNamespace).Get(context.Background(), steps.UninstalledConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the install after uninstall left the uninstall's mark %s (err %v)", steps.UninstalledConfigMap, err)
	}

	// --delete-data without a terminal needs --yes.
	no := c.maasctl(t, "uninstall", "--delete-data")
	wantExit(t, no, 2, "uninstall --delete-data without --yes and without a terminal")
	if !strings.Contains(no.stderr, "--yes") {
		t.Errorf("--delete-data without --yes should say to add it:\n%s", no.stderr)
	}
	assertThere(t, c, "refused --delete-data", dscObj, cnpgCluster)

	ri, _, err := c.clients.Resource(lobj{"gateway.networking.k8s.io/v1", "Gateway", "", ""}.stub().GroupVersionKind(), "team-gw")
	if err != nil {
		t.Fatal(err)
	}
	if err := ri.Delete(context.Background(), "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Uninstall with only an older version's single-ConfigMap record: it
	// deletes every object that record lists as created (the assertions
	// below), and removes that ConfigMap with the rest of the state.
	if legacy := toLegacyRecord(t, c); len(legacy) == 0 {
		t.Fatal("the record is empty before the full uninstall")
	}
	// Two ConfigMaps with maasctl's label that no record lists: one a
	// controller owns (as the authorino-operator's objects carry the
	// label it copies from the Authorino CR maasctl labels), which the
	// orphan scan leaves out, and a stray one, which it names.
	controlledCM, strayCM := plantLabelledConfigMaps(t, c)
	all := c.maasctl(t, "uninstall", "--delete-data", "--yes", "--purge-crds", "-o", "json")
	wantExit(t, all, 0, "uninstall --delete-data --yes --purge-crds")
	assertGone(t, c, "uninstall --purge-crds", crd("kuadrants.kuadrant.io"), crd("maassubscriptions.maas.opendatahub.io"), crd("clusters.postgresql.cnpg.io"))
	assertThere(t, c, "uninstall --purge-crds leaves the platform's CRDs", crd("gatewayclasses.gateway.networking.k8s.io"), crd("certificates.cert-manager.io"))
	assertGone(t, c, "uninstall --delete-data", removedByUninstall...)
	assertGone(t, c, "uninstall --delete-data", cnpgCluster, cnpgPVC, dbSecretObj, cnpgSub, gatewayClass, stateNS,
		lobj{"v1", "Namespace", "", "rhoai-maas-db"})
	if n := c.vault.Versions(vaultMount, vaultPath); n != 0 {
		t.Errorf("Vault secret has %d versions after --delete-data, want 0", n)
	}
	assertThere(t, c, "uninstall --delete-data keeps what existed before", preExisting...)
	// The planted stray is the only orphan: nothing maasctl made is left.
	if n := strings.Count(all.stdout, "orphan: "); n != 1 || !strings.Contains(all.stdout, "orphan: "+strayCM+" is labelled") {
		t.Errorf("the orphan scan should name %s and nothing else after a full uninstall (%d orphan lines):\n%s", strayCM, n, all.stdout)
	}
	if strings.Contains(all.stdout, controlledCM) {
		t.Errorf("the orphan scan names %s, which a controller owns:\n%s", controlledCM, all.stdout)
	}
	if !strings.Contains(all.stdout, "orphan scan: 1 object(s) labelled app.kubernetes.io/managed-by=maasctl belong to a controller") {
		t.Errorf("the orphan scan should say it left out one controlled object:\n%s", all.stdout)
	}
	if err := c.clients.Kube.CoreV1().ConfigMaps("default").DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e.maasctl.io/planted=true"}); err != nil {
		t.Fatal(err)
	}

	third := c.maasctl(t, "install", "-o", "json")
	wantExit(t, third, 0, "install after a full uninstall")
	if n := c.vault.Versions(vaultMount, vaultPath); n != 1 {
		t.Errorf("Vault has %d password versions after the third install, want 1 (a new one)", n)
	}
}

// checkDoctorNotInstalled: doctor exits 1 with the one finding
// MAAS-D037 (MaaS not installed), whose evidence holds each of evidence.
func checkDoctorNotInstalled(t *testing.T, c *cluster, when string, evidence ...string) {
	t.Helper()
	r := c.maasctl(t, "doctor", "--live-only", "-o", "json")
	wantExit(t, r, 1, "doctor "+when)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor -o json %s: %v\n%s", when, err, r.stdout)
	}
	if codes := rep.Codes(); len(codes) != 1 || codes[0] != doctor.CodeNotInstalled {
		t.Fatalf("doctor %s: findings %v, want only %s\n%s", when, codes, doctor.CodeNotInstalled, r.stdout)
	}
	mustContain(t, "doctor "+when+" evidence", rep.Findings[0].Evidence, evidence...)
}

func crd(name string) lobj {
	return lobj{"apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name}
}

// checkUninstallOrder: each step's objects were gone before the next step
// started, and custom resources went before their operators (case B20).
func checkUninstallOrder(t *testing.T, evs []steps.Event) {
	t.Helper()
	done := map[string]int{}
	started := map[string]int{}
	for i, ev := range evs {
		switch ev.Type {
		case steps.EventDone, steps.EventUnchanged:
			done[ev.Step] = i
		case steps.EventStarted:
			started[ev.Step] = i
		}
	}
	for _, p := range [][2]string{
		{"access/auth-policy", "rhoai/dsc"},
		{"models/model", "rhoai/dsc"},
		{"rhoai/dsc", "operators/rhoai"},
		{"rhoai/dsci", "operators/rhoai"},
		{"platform/kuadrant", "operators/rhcl"},
		{"operators/rhoai", steps.NamespacesStepID},
	} {
		d, ok1 := done[p[0]]
		s, ok2 := started[p[1]]
		if !ok1 || !ok2 || d > s {
			t.Errorf("uninstall: %s must finish before %s starts (done at %d, ok %t; started at %d, ok %t)", p[0], p[1], d, ok1, s, ok2)
		}
	}
}

// TestRenderAppliedMatchesInstall: 'maasctl render' applied with kubectl
// server-side apply, file by file in order (retrying a file until the kinds
// an earlier operator installs are served, as a GitOps engine does), on a
// fresh control plane gives the same objects as 'maasctl install' on
// another: same labels and spec (for objects an operator also writes, the
// rendered fields).
func TestRenderAppliedMatchesInstall(t *testing.T) {
	parallel(t)
	fullOnly(t, "'maasctl render' applied with kubectl server-side apply gives the objects 'maasctl install' makes (assets TestRenderDefaultGolden pins what render prints)")
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not found")
	}
	a := newCluster(t, clusterOptions{})
	wantExit(t, a.maasctl(t, "install", "-o", "json"), 0, "install")
	// Nothing secret in any rendered file (issue 15): rendered from the
	// installed cluster, whose Vault holds the database password, in every
	// mode.
	secretPW := a.vault.Data(vaultMount, vaultPath)["password"]
	if secretPW == "" {
		t.Fatal("no database password in Vault after the install: the leak check would prove nothing")
	}
	for _, mode := range [][]string{nil, {"--secrets", "external-secrets"}, {"--in-cluster"}} {
		d := t.TempDir()
		wantExit(t, a.maasctl(t, append([]string{"render", "--dir", d, "--set", "gateway.hostname=" + appsHost}, mode...)...), 0, fmt.Sprintf("render %v", mode))
		noSecretInDir(t, d, map[string]string{"the database password": secretPW, "the Vault token": a.vaultToken})
	}

	b := newCluster(t, clusterOptions{})
	dir := t.TempDir()
	// GitOps output as Argo CD takes it: sync waves, ExternalSecrets for
	// the Secrets that carry the password (their CRD from the External
	// Secrets module checks them; no ESO controller runs, so the test
	// provides the Secrets they would build), the Kuadrant restart hook.
	r := b.maasctl(t, "render", "--dir", dir, "--secrets", "external-secrets", "--set", "gateway.hostname="+appsHost)
	wantExit(t, r, 0, "render")
	esoCRD, err := testenv.ExternalSecretCRDFile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallCRDs(context.Background(), b.env.RESTConfig(), esoCRD); err != nil {
		t.Fatal(err)
	}

	// The Secrets render leaves out, provided as External Secrets would:
	// a password and the matching connection URL.
	const pw = "render-test-password-0123456789abcdef"
	url := fmt.Sprintf("postgresql://maas:%s@maas-postgres-rw.rhoai-maas-db.svc:5432/maas?sslmode=require", pw)
	var secretDocs []string
	secretDocs = append(secretDocs, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: rhoai-maas-db}
---
apiVersion: v1
kind: Secret
metadata: {name: maas-postgres-secret, namespace: rhoai-maas-db}
type: kubernetes.io/basic-auth
stringData: {username: maas, password: %s}`, pw))
	for _, ns := range dbConfigNamespaces(t, dir) {
		secretDocs = append(secretDocs, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %s}
---
apiVersion: v1
kind: Secret
metadata: {name: maas-db-config, namespace: %s}
type: Opaque
stringData: {DB_CONNECTION_URL: "%s"}`, ns, ns, url))
	}
	b.create(t, strings.Join(secretDocs, "\n---\n"))

	files, err := filepath.Glob(filepath.Join(dir, "[0-9][0-9]-*.yaml")) // kustomization.yaml lists them
	if err != nil || len(files) < 10 {
		t.Fatalf("render wrote %v (%v)", files, err)
	}
	sort.Strings(files)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	restarted := false
	for _, f := range files {
		var lastOut string
		// DelayFunc().Until retries at the cap until ctx ends
		// (ExponentialBackoffWithContext stops when the delay reaches Cap).
		err := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 1.5, Cap: 3 * time.Second, Steps: 1 << 30}.DelayFunc().Until(ctx, true, false,
			func(ctx context.Context) (bool, error) {
				if strings.Contains(f, "authorino-tls") && !restarted {
					// The hook the README asks GitOps users for (case B01):
					// restart the Kuadrant operator once if it started before
					// Istio and reports MissingDependency.
					restarted = kuadrantRestartHook(t, b)
				}
				cmd := exec.CommandContext(ctx, kubectl, "apply", "--server-side", "--field-manager=gitops", "--force-conflicts", "-f", f)
				cmd.Env = append(os.Environ(), "KUBECONFIG="+b.env.Kubeconfig())
				out, err := cmd.CombinedOutput()
				lastOut = string(out)
				return err == nil, nil
			})
		if err != nil {
			t.Fatalf("kubectl apply --server-side -f %s never succeeded: %v\n%s", filepath.Base(f), err, lastOut)
		}
	}

	selfHeal(t, b, kubectl, files)

	objs := renderedObjects(t, files)
	// Objects an operator also writes spec fields of: compare the rendered
	// fields only (the RHOAI operator's default-dsci carries
	// trustedCABundle when it was there before the manifest; the Authorino
	// Service has a cluster-assigned clusterIP).
	partial := map[string]bool{"DSCInitialization": true, "Service": true, "Authorino": true, "OdhDashboardConfig": true}
	for _, o := range objs {
		id := lobj{o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName()}
		if o.GetKind() == "ExternalSecret" || o.GetAnnotations()[steps.HookAnnotation] != "" || o.GetLabels()["app.kubernetes.io/component"] == "gitops-hook" {
			// Only the GitOps tree has them (install writes the Secrets
			// and restarts the operator itself); applied and validated above.
			if lb := b.live(t, id); lb == nil {
				t.Errorf("%s was not applied", id)
			}
			continue
		}
		la, lb := a.live(t, id), b.live(t, id)
		if la == nil || lb == nil {
			t.Errorf("%s: installed %t, rendered-and-applied %t", id, la != nil, lb != nil)
			continue
		}
		if o.GetKind() == "Namespace" && o.GetLabels()["inference.llm-d.ai/ipp-managed"] == "" {
			// install creates a missing Namespace from the manifest but
			// leaves one an operator made first (models-as-a-service by
			// the RHOAI operator) as it is; a GitOps apply labels it.
			// Only the model namespaces are applied by both.
			continue
		}
		if !reflect.DeepEqual(la.GetLabels(), lb.GetLabels()) {
			t.Errorf("%s labels differ:\n install: %v\n render:  %v", id, la.GetLabels(), lb.GetLabels())
		}
		plain := o.DeepCopy() // the fields install writes: without the Argo CD annotations
		plain.SetAnnotations(withoutArgo(o.GetAnnotations()))
		if len(plain.GetAnnotations()) == 0 {
			unstructured.RemoveNestedField(plain.Object, "metadata", "annotations")
		}
		for _, l := range []*unstructured.Unstructured{la, lb} {
			if p, ok := steps.Contains(l.Object, plain.Object); !ok {
				t.Errorf("%s lacks the rendered field %s", id, p)
			}
		}
		if partial[o.GetKind()] {
			continue
		}
		for _, f := range []string{"spec", "data"} {
			if !reflect.DeepEqual(la.Object[f], lb.Object[f]) {
				t.Errorf("%s %s differs:\n install: %v\n render:  %v", id, f, la.Object[f], lb.Object[f])
			}
		}
		if !reflect.DeepEqual(la.GetAnnotations(), withoutArgo(lb.GetAnnotations())) {
			t.Errorf("%s annotations differ:\n install: %v\n render:  %v", id, la.GetAnnotations(), lb.GetAnnotations())
		}
	}
	if len(objs) < 20 {
		t.Errorf("only %d objects rendered; the comparison would prove little", len(objs))
	}
}

// selfHeal does what Argo CD's automated sync with selfHeal does after the
// first sync of the rendered tree: it applies again each file one of whose
// objects lacks a field the file sets, until every object has held its
// fields at three checks 2 s apart (at most 2 minutes). The real
// kuadrant-operator v1.5.2 turns Authorino's listener TLS off again when
// its reconcile read the CR before the apply (docs/findings.md, finding 8; install
// waits that out in platform/authorino-tls); a GitOps engine restores it
// only by re-applying what drifted, as render's notes say.
func selfHeal(t *testing.T, c *cluster, kubectl string, files []string) {
	t.Helper()
	drifted := func(f string) string {
		for _, o := range renderedObjects(t, []string{f}) {
			if o.GetAnnotations()[steps.HookAnnotation] != "" || o.GetLabels()["app.kubernetes.io/component"] == "gitops-hook" {
				continue // a hook runs once; it is not kept in sync
			}
			l := c.live(t, lobj{o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName()})
			if l == nil {
				return kube.Describe(o) + " missing"
			}
			plain := o.DeepCopy()
			plain.SetAnnotations(withoutArgo(o.GetAnnotations()))
			if len(plain.GetAnnotations()) == 0 {
				unstructured.RemoveNestedField(plain.Object, "metadata", "annotations")
			}
			if p, ok := steps.Contains(l.Object, plain.Object); !ok {
				return kube.Describe(o) + " lacks " + p
			}
		}
		return ""
	}
	deadline := time.Now().Add(2 * time.Minute)
	for stable := 0; stable < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the applied tree did not hold for 2 minutes of self-healing")
		}
		time.Sleep(2 * time.Second)
		stable++
		for _, f := range files {
			why := drifted(f)
			if why == "" {
				continue
			}
			stable = 0
			t.Logf("self-heal: %s drifted (%s); applying it again", filepath.Base(f), why)
			cmd := exec.Command(kubectl, "apply", "--server-side", "--field-manager=gitops", "--force-conflicts", "-f", f)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+c.env.Kubeconfig())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("self-heal apply of %s: %v\n%s", filepath.Base(f), err, out)
			}
		}
	}
}

// withoutArgo is a without the Argo CD annotations render adds (sync
// wave, sync options), which install does not write.
func withoutArgo(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if !strings.HasPrefix(k, "argocd.argoproj.io/") {
			out[k] = v
		}
	}
	if len(out) == 0 && len(a) > 0 {
		return nil
	}
	return out
}

// kuadrantRestartHook deletes the Kuadrant operator pod once Istio exists
// and Kuadrant reports MissingDependency; it reports whether it did.
func kuadrantRestartHook(t *testing.T, c *cluster) bool {
	t.Helper()
	kq := c.live(t, lobj{"kuadrant.io/v1beta1", "Kuadrant", "kuadrant-system", "kuadrant"})
	istiod := c.live(t, lobj{"apps/v1", "Deployment", "openshift-ingress", "istiod-openshift-gateway"})
	if kq == nil || istiod == nil {
		return false
	}
	list, _, _ := unstructured.NestedSlice(kq.Object, "status", "conditions")
	for _, x := range list {
		m, _ := x.(map[string]any)
		if m["type"] == "Ready" && m["reason"] == "MissingDependency" {
			err := c.clients.Kube.CoreV1().Pods("openshift-operators").DeleteCollection(context.Background(), metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: "app=kuadrant,control-plane=controller-manager"})
			if err != nil {
				t.Fatalf("restart the Kuadrant operator: %v", err)
			}
			t.Logf("restarted the Kuadrant operator (MissingDependency), as the render README says")
			return true
		}
	}
	return false
}

// dbConfigNamespaces reads from the rendered README which namespaces need
// the maas-db-config Secret.
func dbConfigNamespaces(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "- `") && strings.Contains(line, "/maas-db-config`") {
			ns, _, _ := strings.Cut(strings.TrimPrefix(line, "- `"), "/")
			out = append(out, ns)
		}
	}
	if len(out) == 0 {
		t.Fatal("the rendered README names no maas-db-config Secret")
	}
	return out
}

func renderedObjects(t *testing.T, files []string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]any{}
			if err := yaml.Unmarshal(doc, &m); err != nil {
				t.Fatal(err)
			}
			if len(m) > 0 {
				out = append(out, &unstructured.Unstructured{Object: m})
			}
		}
	}
	return out
}

// TestInventoryImportCLI: 'maasctl inventory import' on the "Grant access to
// specific groups" vars of DEPLOYMENT.md writes an inventory whose
// 'maasctl render' output equals the hand-written native inventory's, and
// 'render -f' also takes the vars file itself. No cluster is needed.
func TestInventoryImportCLI(t *testing.T) {
	parallel(t)
	vars, err := filepath.Abs(filepath.Join("..", "inventory", "testdata", "ansible", "grant-access.yml"))
	if err != nil {
		t.Fatal(err)
	}
	native, _ := filepath.Abs(filepath.Join("..", "inventory", "testdata", "ansible", "grant-access.native.yaml"))
	dir := t.TempDir()
	runBin := func(args ...string) run {
		cmd := exec.Command(maasctlBin, args...)
		cmd.Env = append(os.Environ(), "HOME="+dir, "KUBECONFIG="+filepath.Join(dir, "none"))
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		r := run{stdout: out.String(), stderr: errb.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.exit = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return r
	}
	imported := filepath.Join(dir, "imported.yaml")
	wantExit(t, runBin("inventory", "import", "--to", imported, vars), 0, "inventory import")
	host := "--set=gateway.hostname=" + appsHost
	outs := map[string]string{}
	for name, file := range map[string]string{"native": native, "imported": imported, "vars": vars} {
		out := filepath.Join(dir, "render-"+name)
		wantExit(t, runBin("render", "--dir", out, "-f", file, host), 0, "render "+name)
		outs[name] = readDir(t, out)
	}
	if outs["native"] == readDirOfDefault(t, runBin, dir, host) {
		t.Fatal("the native inventory renders like the default; the comparison would prove nothing")
	}
	for _, name := range []string{"imported", "vars"} {
		if outs[name] != outs["native"] {
			t.Errorf("render of the %s inventory differs from the native one's", name)
		}
	}
}

func readDirOfDefault(t *testing.T, runBin func(...string) run, dir, host string) string {
	out := filepath.Join(dir, "render-default")
	wantExit(t, runBin("render", "--dir", out, host), 0, "render default")
	return readDir(t, out)
}

func readDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("== " + e.Name() + "\n")
		b.Write(data)
	}
	return b.String()
}

// toLegacyRecord rewrites maasctl's record the way versions before the
// sharded record kept it (one ConfigMap maasctl-inventory) and returns its
// entries.
func toLegacyRecord(t *testing.T, c *cluster) []steps.RecordEntry {
	t.Helper()
	rec, err := steps.LoadRecord(context.Background(), c.clients)
	if err != nil {
		t.Fatal(err)
	}
	entries := rec.Entries()
	writeLegacyRecord(t, c, entries)
	if n := len(recordShards(t, c)); n != 0 {
		t.Fatalf("%d record shards left after writing the single-ConfigMap record", n)
	}
	return entries
}

// checkMigrated: the single-ConfigMap record is gone, the record is in
// shards, and every entry the old record had as created is still there as
// created.
func checkMigrated(t *testing.T, c *cluster, old []steps.RecordEntry) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.clients.Kube.CoreV1().ConfigMaps(steps.StateNamespace).Get(ctx, steps.RecordConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the install did not migrate the single-ConfigMap record %s (err %v)", steps.RecordConfigMap, err)
	}
	if n := len(recordShards(t, c)); n < 2 {
		t.Errorf("the migrated record is in %d shard(s)", n)
	}
	rec, err := steps.LoadRecord(ctx, c.clients)
	if err != nil {
		t.Fatal(err)
	}
	created := 0
	for _, e := range old {
		if e.Origin != steps.OriginCreated {
			continue
		}
		created++
		if got, ok := rec.Lookup(e.Object()); !ok || got.Origin != steps.OriginCreated || got.UID != e.UID {
			t.Errorf("after the migration %s is recorded %+v (found %v), was created with UID %s", e, got, ok, e.UID)
		}
	}
	if created == 0 {
		t.Errorf("the old record listed no created object: the migration check proves nothing")
	}
}

// noSecretInDir fails when any file under dir holds one of secrets
// (name → value); it fails too when dir holds no file (nothing was checked).
func noSecretInDir(t *testing.T, dir string, secrets map[string]string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for name, v := range secrets {
			if v != "" && strings.Contains(string(b), v) {
				t.Errorf("%s appears in rendered file %s", name, strings.TrimPrefix(path, dir+"/"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Errorf("no file rendered under %s: the leak check would prove nothing", dir)
	}
}

// plantLabelledConfigMaps creates, in namespace default, an unlabelled
// owner ConfigMap, a ConfigMap labelled app.kubernetes.io/managed-by=maasctl
// that the owner controls (a controller ownerReference) and a stray one
// with the label and no owner; all three carry e2e.maasctl.io/planted=true.
// It returns how the orphan scan names the controlled and the stray one.
func plantLabelledConfigMaps(t *testing.T, c *cluster) (controlled, stray string) {
	t.Helper()
	ctx := context.Background()
	cms := c.clients.Kube.CoreV1().ConfigMaps("default")
	mk := func(name string, labelled bool, owner *metav1.OwnerReference) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e.maasctl.io/planted": "true"}}}
		if labelled {
			cm.Labels["app.kubernetes.io/managed-by"] = "maasctl"
		}
		if owner != nil {
			cm.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ConfigMap default/%s: %v", name, err)
		}
	}
	mk("planted-owner", false, nil)
	owner, err := cms.Get(ctx, "planted-owner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	mk("planted-controlled", true, &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes})
	mk("planted-stray", true, nil)
	return "ConfigMap default/planted-controlled", "ConfigMap default/planted-stray"
}
