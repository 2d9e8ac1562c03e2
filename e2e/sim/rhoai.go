package sim

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The simulated RHOAI operator (opendatahub-io/opendatahub-operator 3.x as
// built into rhods-operator 3.3, 3.4 and 3.5; CRDs in
// ../shared/crds/opendatahub/rhoai-<version>). Sources:
//   - the operator creates DSCInitialization default-dsci at start-up when
//     none exists (cmd/main.go, upgrade.CreateDefaultDSCI) and a second
//     DSCI or DSC is refused (only one instance may exist; case B05);
//   - DSCI creates the applications and monitoring namespaces and reports
//     phase Ready;
//   - each Managed DSC component deploys its operands and registers its
//     CRDs; the DSC reports <Component>Ready conditions, status.components
//     and phase "Ready" / "Not Ready" (pkg/controller/status);
//   - MaaS: on 3.5 it is aigateway.modelsAsAService (the AIGateway
//     component, ai-gateway-operator); the 3.5 simulator ignores
//     kserve.modelsAsService (the DESIGN's rule; note that the 3.5 CRD text
//     says existing Managed values are still respected). On 3.3/3.4 it is
//     kserve.modelsAsService. MaaS registers the maas CRDs and runs
//     Deployment maas-api (3.5: namespace redhat-ai-gateway-infra; 3.3/3.4:
//     the applications namespace), which needs Secret maas-db-config with
//     DB_CONNECTION_URL (case B06; opendatahub-io/models-as-a-service
//     PR #876 "blocking prerequisites missing: database Secret
//     'maas-db-config' ...; no Authorino instances found").
//   - 3.5 refuses llamastackoperator and ogx both Managed and aborts the
//     provisioning batch (case B05, rh-aiservices-bu/rhoai-maas-guide PR #160).
type rhoaiCtl struct {
	m         *manager
	version   string
	dsci, dsc *reconciler
	// startedFor records the operator installs (the UID of the CSV that
	// owns the DSCInitialization CRD, "" without OLM) whose start-up
	// already created, or declined to create, the default DSCI.
	startedFor sync.Map // string -> bool
}

const (
	defaultDSCI           = "default-dsci"
	defaultAppsNamespace  = "redhat-ods-applications"
	defaultMonitoringNS   = "redhat-ods-monitoring"
	aiGatewayInfraNS      = "redhat-ai-gateway-infra"
	maasNamespace         = "models-as-a-service"
	maasDBSecret          = "maas-db-config"
	maasDBKey             = "DB_CONNECTION_URL"
	maasAPIDeployment     = "maas-api"
	maasAPIRoute          = "maas-api-route"
	dashboardConfigName   = "odh-dashboard-config"
	aiGatewayInstanceName = "default-aigateway"
	phaseReady            = "Ready"
	phaseNotReady         = "Not Ready"
	ogxConflictMessage    = "LlamaStackOperator is set to Managed; set it to Removed before enabling OGX"
)

// dscComponent is one spec.components entry of a RHOAI version.
type dscComponent struct {
	name      string   // spec.components key
	condition string   // <Component>Ready condition type
	crds      []string // CRD globs it registers when Managed
}

func dscComponents(version string) []dscComponent {
	all := []dscComponent{
		{name: "aigateway", condition: "AIGatewayReady", crds: []string{"ai-gateway-operator/*.yaml"}},
		{name: "aipipelines", condition: "DataSciencePipelinesReady"},
		{name: "dashboard", condition: "DashboardReady", crds: []string{"odh-dashboard/*.yaml"}},
		{name: "feastoperator", condition: "FeastOperatorReady"},
		{name: "kserve", condition: "KserveReady", crds: []string{"kserve/*.yaml"}},
		{name: "kueue", condition: "KueueReady"},
		{name: "llamastackoperator", condition: "LlamaStackOperatorReady"},
		{name: "mcplifecycleoperator", condition: "MCPLifecycleOperatorReady"},
		{name: "mlflowoperator", condition: "MLflowOperatorReady"},
		{name: "modelregistry", condition: "ModelRegistryReady"},
		{name: "ogx", condition: "OGXReady"},
		{name: "ray", condition: "RayReady"},
		{name: "sparkoperator", condition: "SparkOperatorReady"},
		{name: "trainer", condition: "TrainerReady"},
		{name: "trainingoperator", condition: "TrainingOperatorReady"},
		{name: "trustyai", condition: "TrustyAIReady"},
		{name: "workbenches", condition: "WorkbenchesReady"},
	}
	only35 := map[string]bool{"aigateway": true, "mcplifecycleoperator": true, "ogx": true}
	var out []dscComponent
	for _, c := range all {
		if version != RHOAI35 && only35[c.name] {
			continue
		}
		if version == RHOAI33 && c.name == "sparkoperator" {
			continue
		}
		out = append(out, c)
	}
	return out
}

func registerRHOAI(m *manager) {
	r := &rhoaiCtl{m: m, version: m.opts.RHOAIVersion}
	r.dsci = &reconciler{
		name: "rhoai/dscinitialization", delayKey: DSCI, primary: gvrDSCI,
		watches:   []watch{{gvr: gvrNamespace, mapFn: m.allOf(gvrDSCI, false)}},
		reconcile: r.reconcileDSCI,
	}
	// The empty key asks for default-dsci: at start and whenever the
	// operator's CSV or Deployment changes.
	r.dsci.onStart = func(context.Context) error { r.dsci.queue.Add(key{}); return nil }
	for _, w := range m.operatorWatches(gvrDSCI) {
		mapFn := w.mapFn
		w.mapFn = func(u *unstructured.Unstructured) []key { return append(mapFn(u), key{}) }
		r.dsci.watches = append(r.dsci.watches, w)
	}
	m.add(r.dsci)
	r.dsc = &reconciler{
		name: "rhoai/datasciencecluster", delayKey: DSC, primary: gvrDSC,
		watches: []watch{
			{gvr: gvrDSCI, mapFn: m.allOf(gvrDSC, false)},
			{gvr: gvrCRD, mapFn: func(u *unstructured.Unstructured) []key {
				if hasPrefixAny(str(u, "spec", "group"), "maas.", "inference.opendatahub.io", "opendatahub.io", "serving.kserve.io", "components.platform.opendatahub.io") {
					return m.allOf(gvrDSC, false)(u)
				}
				return nil
			}},
			{gvr: gvrSecret, mapFn: m.allOf(gvrDSC, false)},
			{gvr: gvrService, mapFn: m.allOf(gvrDSC, false)},
			{gvr: gvrDeployment, mapFn: func(u *unstructured.Unstructured) []key {
				if u.GetName() == maasAPIDeployment {
					return m.allOf(gvrDSC, false)(u)
				}
				return nil
			}},
			{gvr: gvrNamespace, mapFn: m.allOf(gvrDSC, false)},
		},
		reconcile: r.reconcileDSC,
	}
	r.dsc.watches = append(r.dsc.watches, m.operatorWatches(gvrDSC)...)
	m.add(r.dsc)
}

func (r *rhoaiCtl) release() map[string]any {
	v := map[string]string{RHOAI33: "3.3.5", RHOAI34: "3.4.4", RHOAI35: "3.5.0"}[r.version]
	return map[string]any{"name": "OpenShift AI Self-Managed", "version": v}
}

// createDefaultDSCI creates default-dsci when the operator starts and no
// DSCInitialization exists, once per operator install: upstream adds it as
// a manager Runnable that runs at start-up (opendatahub-operator main.go
// createDefaultDSCIFunc / setupResources, upgrade.CreateDefaultDSCI), not
// on every reconcile, so a DSCI deleted while the operator runs stays
// deleted (the "Remove" order of reference/DEPLOYMENT.md relies on that).
func (r *rhoaiCtl) createDefaultDSCI(ctx context.Context) error {
	const crd = "dscinitializations.dscinitialization.opendatahub.io"
	if r.m.opts.Faults.NoDefaultDSCI || !r.m.operatorRunning(crd) {
		return nil
	}
	if _, done := r.startedFor.LoadOrStore(r.m.ownerCSVUID(crd), true); done {
		return nil // this install's start-up already ran
	}
	if len(r.m.list(gvrDSCI, "")) > 0 {
		return nil
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "dscinitialization.opendatahub.io/v2", "kind": "DSCInitialization",
		"metadata": map[string]any{"name": defaultDSCI},
		"spec": map[string]any{
			"applicationsNamespace": defaultAppsNamespace,
			"monitoring":            map[string]any{"managementState": "Managed", "namespace": defaultMonitoringNS},
			"trustedCABundle":       map[string]any{"managementState": "Managed", "customCABundle": ""},
		},
	}}
	_, err := r.m.create(ctx, gvrDSCI, obj)
	return err
}

func (r *rhoaiCtl) reconcileDSCI(ctx context.Context, k key) error {
	m := r.m
	if k.Name == "" {
		return r.createDefaultDSCI(ctx)
	}
	dsci := m.get(gvrDSCI, "", k.Name)
	if dsci == nil || dsci.GetDeletionTimestamp() != nil || !m.operatorRunning("dscinitializations.dscinitialization.opendatahub.io") {
		return nil
	}
	gen := dsci.GetGeneration()
	old := mapOf(dsci, "status")
	if all := m.list(gvrDSCI, ""); len(all) > 0 && all[0].GetUID() != dsci.GetUID() {
		msg := fmt.Sprintf("only one instance of DSCInitialization object is allowed: %s already exists", all[0].GetName())
		return m.updateStatus(ctx, gvrDSCI, dsci, map[string]any{
			"phase": "Error", "errorMessage": msg,
			"conditions": conditions(old["conditions"], cond("Ready", false, "Error", msg).gen(gen)),
		})
	}
	// The namespaces are made at once; the status waits for the DSCI
	// delay (hold), counted from the spec generation's first sight: the
	// operator creates default-dsci when it starts, and a client's later
	// change of its spec (maasctl adopts and applies it) is a new trigger
	// whose Ready must not come sooner than the delay.
	ctx = m.hold(ctx, r.dsci, dsci, fmt.Sprintf("init|generation=%d", gen))
	apps := str(dsci, "spec", "applicationsNamespace")
	if apps == "" {
		apps = defaultAppsNamespace
	}
	if err := m.ensureNamespace(ctx, apps); err != nil {
		return err
	}
	if str(dsci, "spec", "monitoring", "managementState") == "Managed" {
		mon := str(dsci, "spec", "monitoring", "namespace")
		if mon == "" {
			mon = defaultMonitoringNS
		}
		if err := m.ensureNamespace(ctx, mon); err != nil {
			return err
		}
	}
	return m.updateStatus(ctx, gvrDSCI, dsci, map[string]any{
		"phase":   phaseReady,
		"release": r.release(),
		"conditions": conditions(old["conditions"],
			cond("Ready", true, "Ready", "DSCInitialization reconciled").gen(gen),
			cond("ReconcileComplete", true, "ReconcileCompleted", "Reconcile completed successfully").gen(gen)),
	})
}

// compResult is the outcome of one component's reconcile.
type compResult struct {
	managed bool
	ready   bool
	reason  string
	message string
}

func (r *rhoaiCtl) reconcileDSC(ctx context.Context, k key) error {
	m := r.m
	dsc := m.get(gvrDSC, "", k.Name)
	if dsc == nil || dsc.GetDeletionTimestamp() != nil || !m.operatorRunning("datascienceclusters.datasciencecluster.opendatahub.io") {
		return nil
	}
	gen := dsc.GetGeneration()
	old := mapOf(dsc, "status")
	notReady := func(reason, msg string) error {
		return m.updateStatus(ctx, gvrDSC, dsc, map[string]any{
			"phase": phaseNotReady, "observedGeneration": gen, "release": r.release(),
			"conditions": conditions(old["conditions"], cond("Ready", false, reason, msg).gen(gen)),
		})
	}
	all := m.list(gvrDSC, "")
	if len(all) == 0 {
		// Deleted between the get and the list: the delete requeues it.
		return nil
	}
	if all[0].GetUID() != dsc.GetUID() {
		msg := fmt.Sprintf("only one instance of DataScienceCluster object is allowed: %s already exists", all[0].GetName())
		return m.updateStatus(ctx, gvrDSC, dsc, map[string]any{
			"phase": "Error", "errorMessage": msg, "observedGeneration": gen,
			"conditions": conditions(old["conditions"], cond("Ready", false, "Error", msg).gen(gen)),
		})
	}
	var dsci *unstructured.Unstructured
	if l := m.list(gvrDSCI, ""); len(l) > 0 {
		dsci = l[0]
	}
	if dsci == nil || str(dsci, "status", "phase") != phaseReady {
		return notReady("DSCInitializationNotReady", "DSCInitialization is not created or not Ready")
	}
	// Component CRDs, namespaces, OdhDashboardConfig, AIGateway and
	// maas-api are made at once; the DSC's and the AIGateway's status wait
	// for the DSC delay (hold).
	ctx = m.hold(ctx, r.dsc, dsc, "reconcile")
	// Optional kinds read below: CNPG Clusters (database checks) and
	// Authorinos (the MaaS TLS prerequisite).
	for _, g := range []schema.GroupVersionResource{gvrCNPGCluster, gvrAuthorino} {
		if m.isServed(g) && !m.observe(r.dsc, g, m.allOf(gvrDSC, false), k) {
			return nil // the cache's initial list requeues this DSC
		}
	}
	apps := str(dsci, "spec", "applicationsNamespace")
	if apps == "" {
		apps = defaultAppsNamespace
	}
	managed := func(path ...string) bool {
		return str(dsc, append(append([]string{"spec", "components"}, path...), "managementState")...) == "Managed"
	}

	comps := dscComponents(r.version)
	results := map[string]compResult{}
	conflict := r.version == RHOAI35 && managed("llamastackoperator") && managed("ogx")

	// Register the CRDs of every Managed component, and MaaS's, in one go
	// so that a large CRD does not hold the others back; the checks below
	// find them.
	var globs []string
	for _, c := range comps {
		if managed(c.name) {
			globs = append(globs, c.crds...)
		}
	}
	switch {
	case conflict:
	case r.version == RHOAI35 && managed("aigateway") && managed("aigateway", "modelsAsAService"):
		globs = append(globs, maasCRDGlobs35)
	case r.version != RHOAI35 && managed("kserve") && managed("kserve", "modelsAsService"):
		globs = append(globs, maasCRDGlobsLegacy)
	}
	if _, err := r.ensureCRDGlobs(ctx, globs); err != nil {
		return err
	}
	for _, c := range comps {
		if !managed(c.name) {
			results[c.name] = compResult{reason: "Removed", message: "Component ManagementState is set to Removed"}
			continue
		}
		res := compResult{managed: true, ready: true, reason: "Ready", message: "Component is ready"}
		if c.name == "ogx" && conflict {
			res = compResult{managed: true, reason: "Error", message: ogxConflictMessage}
		}
		if res.ready && len(c.crds) > 0 {
			ok, err := r.ensureCRDGlobs(ctx, c.crds)
			if err != nil {
				return err
			}
			if !ok {
				res = compResult{managed: true, reason: "NotReady", message: "waiting for CRDs to be established"}
			}
		}
		if res.ready && c.name == "dashboard" {
			if !r.ensureDashboardConfig(apps, k) {
				res = compResult{managed: true, reason: "NotReady", message: "waiting for OdhDashboardConfig " + dashboardConfigName}
			}
		}
		results[c.name] = res
	}

	// MaaS, the sub-component whose switch depends on the version.
	maasEnabled := managed("kserve") && managed("kserve", "modelsAsService")
	maasCond := "ModelsAsServiceReady"
	if r.version == RHOAI35 {
		maasEnabled = managed("aigateway") && managed("aigateway", "modelsAsAService")
		maasCond = "ModelsAsAServiceReady"
	}
	var maas compResult
	if maasEnabled {
		maas = compResult{managed: true}
		if conflict {
			maas.reason, maas.message = "Error", ogxConflictMessage
		} else {
			var err error
			if maas, err = r.reconcileMaaS(ctx, dsc, apps); err != nil {
				return err
			}
		}
	} else {
		maas = compResult{reason: "Removed", message: "ModelsAsService ManagementState is set to Removed"}
	}
	if r.version == RHOAI35 && results["aigateway"].managed {
		if err := r.ensureAIGateway(ctx, dsc, results["aigateway"], maas); err != nil {
			return err
		}
		if maas.managed && !maas.ready && results["aigateway"].ready {
			results["aigateway"] = compResult{managed: true, reason: "NotReady", message: "ModelsAsAService is not ready: " + maas.message}
		}
	}

	var conds []condition
	var notReadyNames []string
	for _, c := range comps {
		res := results[c.name]
		cc := cond(c.condition, res.ready, res.reason, res.message).gen(gen)
		if !res.managed {
			cc.Severity = "Info"
		}
		conds = append(conds, cc)
		if res.managed && !res.ready {
			notReadyNames = append(notReadyNames, c.name)
		}
	}
	if r.m.opts.Faults.LegacyMaaSCondition {
		maasCond = "ModelsAsServiceReady"
	}
	mc := cond(maasCond, maas.ready, maas.reason, maas.message).gen(gen)
	if !maas.managed {
		mc.Severity = "Info"
	}
	conds = append(conds, mc)
	if maas.managed && !maas.ready && !m.opts.Faults.DSCReadyHidesMaaS && !contains(notReadyNames, "modelsAsService") {
		notReadyNames = append(notReadyNames, "modelsAsService")
	}
	phase := phaseReady
	ready := cond("Ready", true, "Ready", "Ready").gen(gen)
	compsReady := cond("ComponentsReady", true, "Ready", "Ready").gen(gen)
	if len(notReadyNames) > 0 {
		phase = phaseNotReady
		msg := "Some components are not ready: " + strings.Join(notReadyNames, ",")
		ready = cond("Ready", false, "NotReady", msg).gen(gen)
		compsReady = cond("ComponentsReady", false, "NotReady", msg).gen(gen)
	}
	conds = append([]condition{ready, cond("ProvisioningSucceeded", true, "ProvisioningSucceeded", "DataScienceCluster resource reconciled successfully").gen(gen), compsReady}, conds...)

	components := map[string]any{}
	for _, c := range comps {
		state := "Removed"
		if results[c.name].managed {
			state = "Managed"
		}
		components[c.name] = map[string]any{"managementState": state}
	}
	if r.version == RHOAI35 {
		state := "Removed"
		if maas.managed {
			state = "Managed"
		}
		components["modelsAsAService"] = map[string]any{"managementState": state}
	}
	return m.updateStatus(ctx, gvrDSC, dsc, map[string]any{
		"phase":              phase,
		"observedGeneration": gen,
		"release":            r.release(),
		"components":         components,
		"conditions":         conditions(old["conditions"], conds...),
	})
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// ensureCRDGlobs registers the CRDs of globs and reports whether all are
// Established. Faults.MissingCRDs are never registered; Faults.CRDDelay
// holds a CRD back until its delay has passed since first wanted, then
// requeues every DSC.
func (r *rhoaiCtl) ensureCRDGlobs(ctx context.Context, globs []string) (bool, error) {
	var files []*crdFile
	for _, g := range globs {
		f, err := r.m.crds.glob(g)
		if err != nil {
			return false, err
		}
		files = append(files, f...)
	}
	ready := true
	var now []*crdFile
	for _, f := range files {
		if slices.Contains(r.m.opts.Faults.MissingCRDs, f.Name) {
			ready = false
			continue
		}
		if d := r.m.opts.Faults.CRDDelay[f.Name]; d > 0 && r.m.get(gvrCRD, "", f.Name) == nil {
			v, _ := r.m.firstSeen.LoadOrStore("crd-delay|"+f.Name, time.Now())
			if left := d - time.Since(v.(time.Time)); left > 0 {
				ready = false
				for _, dsc := range r.m.list(gvrDSC, "") {
					r.dsc.queue.AddAfter(keyOf(dsc), left)
				}
				continue
			}
		}
		now = append(now, f)
	}
	// The operator applies its component manifests without waiting for
	// each CRD (a 2.7 MB CRD takes the local API server over a second):
	// the creates run in the background and requeue every DSC when done;
	// the CRD watch requeues them again once Established.
	all := r.m.ensureCRDsAsync(now, r.requeueDSCs)
	return all && ready, nil
}

// requeueDSCs adds every DataScienceCluster to the DSC queue.
func (r *rhoaiCtl) requeueDSCs() {
	for _, dsc := range r.m.list(gvrDSC, "") {
		r.dsc.queue.Add(keyOf(dsc))
	}
}

// ensureDashboardConfig creates OdhDashboardConfig odh-dashboard-config, as
// the dashboard component does on first deploy, and reports whether it
// exists. It reads the config from an informer cache, as the operator's
// cached client does (each DSC reconcile used to GET it: about 230 GETs in
// one e2e install, issue 12), and the config's events requeue DSC k. The
// create runs in the background (see background): right after the CRD is
// Established kube-apiserver holds creates up to 2 s (waitCreateWindow),
// which must not hold back the rest of the DSC.
func (r *rhoaiCtl) ensureDashboardConfig(ns string, k key) bool {
	m := r.m
	if m.get(gvrNamespace, "", ns) == nil || !m.observe(r.dsc, gvrDashboardConfig, m.allOf(gvrDSC, false), k) {
		return false
	}
	if m.get(gvrDashboardConfig, ns, dashboardConfigName) != nil {
		return true
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "opendatahub.io/v1alpha", "kind": "OdhDashboardConfig",
		"metadata": map[string]any{"name": dashboardConfigName, "namespace": ns},
		"spec": map[string]any{
			"dashboardConfig": map[string]any{"disableTracking": true},
		},
	}}
	m.background("create|odhdashboardconfig|"+ns, func(ctx context.Context) error {
		_, err := m.create(ctx, gvrDashboardConfig, obj)
		return err
	}, r.requeueDSCs)
	return false
}

// ensureAIGateway keeps AIGateway default-aigateway in step with the DSC and
// reports its status as the AI gateway operator does.
func (r *rhoaiCtl) ensureAIGateway(ctx context.Context, dsc *unstructured.Unstructured, comp, maas compResult) error {
	m := r.m
	if !m.isServed(gvrAIGateway) {
		return nil
	}
	mstate := "Removed"
	if maas.managed {
		mstate = "Managed"
	}
	bstate := str(dsc, "spec", "components", "aigateway", "batchGateway", "managementState")
	if bstate == "" {
		bstate = "Removed"
	}
	spec := map[string]any{
		"modelsAsAService": map[string]any{"managementState": mstate},
		"batchGateway":     map[string]any{"managementState": bstate},
	}
	c := m.dyn.Resource(gvrAIGateway)
	live, err := c.Get(ctx, aiGatewayInstanceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// In the background, as in ensureDashboardConfig; its status is
		// written on the requeue once it exists.
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "components.platform.opendatahub.io/v1alpha1", "kind": "AIGateway",
			"metadata": map[string]any{"name": aiGatewayInstanceName, "ownerReferences": []any{ownerRef(dsc, true)}},
			"spec":     spec,
		}}
		m.background("create|aigateway", func(ctx context.Context) error {
			_, err := m.create(ctx, gvrAIGateway, obj)
			return err
		}, r.requeueDSCs)
		return nil
	case err != nil:
		return fmt.Errorf("get aigateway: %w", err)
	default:
		if !equalJSON(live.Object["spec"], spec) {
			live.Object["spec"] = spec
			if live, err = c.Update(ctx, live, metaUpdate); err != nil {
				return fmt.Errorf("update aigateway: %w", err)
			}
		}
	}
	ready := comp.ready && (!maas.managed || maas.ready)
	phase, reason, msg := phaseReady, "Ready", "Ready"
	if !ready {
		phase, reason, msg = phaseNotReady, "NotReady", comp.message
		if maas.managed && !maas.ready {
			msg = maas.message
		}
	}
	return m.updateStatus(ctx, gvrAIGateway, live, map[string]any{
		"phase": phase, "observedGeneration": live.GetGeneration(),
		"conditions": conditions(statusConditions(live), cond("Ready", ready, reason, msg).gen(live.GetGeneration())),
	})
}

// reconcileMaaS deploys the MaaS sub-component: CRDs, namespaces and the
// maas-api Deployment once its prerequisites are met.
func (r *rhoaiCtl) reconcileMaaS(ctx context.Context, dsc *unstructured.Unstructured, apps string) (compResult, error) {
	m := r.m
	res := compResult{managed: true, reason: "NotReady"}
	globs := []string{maasCRDGlobs35}
	apiNS := aiGatewayInfraNS
	if r.version != RHOAI35 {
		globs = []string{maasCRDGlobsLegacy}
		apiNS = apps
	}
	ok, err := r.ensureCRDGlobs(ctx, globs)
	if err != nil {
		return res, err
	}
	for _, ns := range []string{apiNS, maasNamespace} {
		if err := m.ensureNamespace(ctx, ns); err != nil {
			return res, err
		}
	}
	var missing []string
	dbURL := ""
	if s := m.get(gvrSecret, apiNS, maasDBSecret); s == nil {
		missing = append(missing, fmt.Sprintf("database Secret '%s' not found in namespace '%s'", maasDBSecret, apiNS))
	} else if v, err := secretValue(s, maasDBKey); err != nil || v == "" {
		missing = append(missing, fmt.Sprintf("database Secret '%s' in namespace '%s' has no key %s", maasDBSecret, apiNS, maasDBKey))
	} else {
		dbURL = v
	}
	if r.version == RHOAI35 && !r.authorinoWithTLS() {
		missing = append(missing, "no Authorino instances found. Authorino must be deployed and configured with TLS")
	}
	if len(missing) > 0 {
		res.reason = "PrerequisitesMissing"
		res.message = "blocking prerequisites missing: " + strings.Join(missing, "; ")
		return res, nil
	}
	if why := r.databaseProblem(dbURL, apiNS); why != "" {
		// maas-api would crash-loop: it is not started, so it never
		// becomes Available (kwok cannot simulate the crash loop).
		res.reason = "DatabaseUnreachable"
		res.message = why
		return res, nil
	}
	// The component applies its CRDs and the maas-api Deployment together
	// (the operator's manifests are applied as one set), so maas-api does
	// not wait for the CRDs; readiness needs both.
	if err := r.ensureMaaSAPI(ctx, dsc, apiNS); err != nil {
		return res, err
	}
	if !ok {
		res.message = "waiting for MaaS CRDs to be established"
		return res, nil
	}
	if !deploymentAvailable(m.get(gvrDeployment, apiNS, maasAPIDeployment)) {
		res.message = fmt.Sprintf("deployment %s/%s is not available", apiNS, maasAPIDeployment)
		return res, nil
	}
	return compResult{managed: true, ready: true, reason: "Ready", message: "ModelsAsService is ready"}, nil
}

// The MaaS CRDs the RHOAI operator registers: on 3.5 both API groups
// (inference.opendatahub.io and maas.opendatahub.io), before only
// maas.opendatahub.io.
const (
	maasCRDGlobs35     = "maas/*.yaml"
	maasCRDGlobsLegacy = "maas/maas.opendatahub.io_*.yaml"
)

func (r *rhoaiCtl) authorinoWithTLS() bool {
	if !r.m.isServed(gvrAuthorino) {
		return false
	}
	for _, a := range r.m.list(gvrAuthorino, "") {
		if enabled, found, _ := unstructured.NestedBool(a.Object, "spec", "listener", "tls", "enabled"); !found || enabled {
			return true
		}
	}
	return false
}

// databaseProblem checks what maas-api needs to connect with dbURL: a
// postgresql URL whose host resolves to an existing Service (a short host
// resolves in maas-api's own namespace, case B06) and, when that Service is
// a CNPG Cluster's -rw Service, the owner's credentials and database. The
// returned text never contains the password.
func (r *rhoaiCtl) databaseProblem(dbURL, apiNS string) string {
	u, err := url.Parse(dbURL)
	if err != nil || (u.Scheme != "postgresql" && u.Scheme != "postgres") || u.Host == "" {
		return maasDBKey + " is not a postgresql:// URL"
	}
	host := u.Hostname()
	parts := strings.Split(host, ".")
	svcName, ns := parts[0], apiNS
	switch {
	case len(parts) == 1:
	case len(parts) == 2 || (len(parts) >= 3 && parts[2] == "svc"):
		ns = parts[1]
	default:
		return "" // an external database: not simulated
	}
	if r.m.get(gvrService, ns, svcName) == nil {
		return fmt.Sprintf("maas-api cannot resolve database host %q: service %s/%s not found", host, ns, svcName)
	}
	if !r.m.isServed(gvrCNPGCluster) || !strings.HasSuffix(svcName, "-rw") {
		return ""
	}
	cl := r.m.get(gvrCNPGCluster, ns, strings.TrimSuffix(svcName, "-rw"))
	if cl == nil {
		return ""
	}
	if !conditionTrue(cl, "Ready") {
		return fmt.Sprintf("database cluster %s/%s is not Ready", ns, cl.GetName())
	}
	owner := str(cl, "spec", "bootstrap", "initdb", "owner")
	db := str(cl, "spec", "bootstrap", "initdb", "database")
	secretName := str(cl, "spec", "bootstrap", "initdb", "secret", "name")
	if secretName == "" {
		secretName = cl.GetName() + "-app"
	}
	user := u.User.Username()
	pw, _ := u.User.Password()
	s := r.m.get(gvrSecret, ns, secretName)
	var want string
	err = fmt.Errorf("no secret %s", secretName)
	if s != nil { // a Secret deleted by hand on a live cluster
		want, err = secretValue(s, "password")
	}
	if err != nil || user != owner || pw != want {
		return fmt.Sprintf("maas-api cannot connect to %s: FATAL: password authentication failed for user %q", host, user)
	}
	if strings.TrimPrefix(u.Path, "/") != db {
		return fmt.Sprintf("maas-api cannot connect to %s: FATAL: database %q does not exist", host, strings.TrimPrefix(u.Path, "/"))
	}
	return ""
}

// ensureMaaSAPIRoute creates maas-api's Service (8443, the port
// Authorino's calls use, and 8080) and its HTTPRoute maas-api-route on the
// MaaS Gateway (opendatahub-io/models-as-a-service deployment/base/
// maas-api/networking/httproute.yaml: /v1/models and /maas-api, the
// latter with its prefix rewritten away), both owned by the DSC. The
// Gateway-level AuthPolicy then covers maas-api's routes as well: the
// Kuadrant operator gives them an action set of their own.
func (r *rhoaiCtl) ensureMaaSAPIRoute(ctx context.Context, dsc *unstructured.Unstructured, ns string) error {
	owner := []metav1.OwnerReference{{APIVersion: "datasciencecluster.opendatahub.io/v2", Kind: "DataScienceCluster", Name: dsc.GetName(), UID: dsc.GetUID()}}
	if r.m.get(gvrService, ns, maasAPIDeployment) == nil {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: maasAPIDeployment, Namespace: ns, OwnerReferences: owner,
				Labels: map[string]string{"app.kubernetes.io/name": maasAPIDeployment, "app.kubernetes.io/part-of": "models-as-a-service"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app.kubernetes.io/name": maasAPIDeployment},
				Ports: []corev1.ServicePort{
					{Name: "https", Port: 8443, TargetPort: intstr.FromInt32(8443)},
					{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)},
				},
			},
		}
		if _, err := r.m.kube.CoreV1().Services(ns).Create(ctx, svc, metaCreate); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create service %s/%s: %w", ns, maasAPIDeployment, err)
		}
	}
	if r.m.get(gvrHTTPRoute, ns, maasAPIRoute) != nil {
		return nil
	}
	backend := []any{map[string]any{"name": maasAPIDeployment, "port": int64(8080), "weight": int64(100)}}
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": maasAPIRoute, "namespace": ns, "ownerReferences": []any{map[string]any{
			"apiVersion": owner[0].APIVersion, "kind": owner[0].Kind, "name": owner[0].Name, "uid": string(owner[0].UID),
		}}},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": maasGatewayName, "namespace": maasGatewayNamespace}},
			"rules": []any{
				map[string]any{"name": "maas-v1-models", "backendRefs": backend,
					"matches": []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/v1/models"}}}},
				map[string]any{"name": "maas-api", "backendRefs": backend,
					"matches": []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/maas-api"}}},
					"filters": []any{map[string]any{"type": "URLRewrite", "urlRewrite": map[string]any{"path": map[string]any{"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}}},
			},
		},
	}}
	if _, err := r.m.dyn.Resource(gvrHTTPRoute).Namespace(ns).Create(ctx, route, metaCreate); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create httproute %s/%s: %w", ns, maasAPIRoute, err)
	}
	return nil
}

// ensureMaaSAPI creates Deployment maas-api, owned by the DSC so that
// deleting the DSC removes it (the operator's component resources are
// garbage-collected with the DSC).
func (r *rhoaiCtl) ensureMaaSAPI(ctx context.Context, dsc *unstructured.Unstructured, ns string) error {
	if err := r.ensureMaaSAPIRoute(ctx, dsc, ns); err != nil {
		return err
	}
	if r.m.get(gvrDeployment, ns, maasAPIDeployment) != nil {
		return nil
	}
	lbl := map[string]string{"app.kubernetes.io/name": maasAPIDeployment, "app.kubernetes.io/part-of": "models-as-a-service"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: maasAPIDeployment, Namespace: ns, Labels: lbl,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "datasciencecluster.opendatahub.io/v2", Kind: "DataScienceCluster",
				Name: dsc.GetName(), UID: dsc.GetUID(),
			}}},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: maasAPIDeployment, Image: "registry.invalid/maasctl-sim/maas-api:v0.2.1",
					Env: []corev1.EnvVar{{Name: maasDBKey, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: maasDBSecret}, Key: maasDBKey,
					}}}},
				}}},
			},
		},
	}
	_, err := r.m.kube.AppsV1().Deployments(ns).Create(ctx, dep, metaCreate)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s/%s: %w", ns, maasAPIDeployment, err)
	}
	return nil
}
