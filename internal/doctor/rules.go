package doctor

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/waiters"
)

func str(u *unstructured.Unstructured, path ...string) string {
	if u == nil {
		return ""
	}
	v, _, _ := unstructured.NestedString(u.Object, path...)
	return v
}

func cond(u *unstructured.Unstructured, typ string) (waiters.Cond, bool) {
	if u == nil {
		return waiters.Cond{}, false
	}
	return waiters.GetCondition(u, typ)
}

func obj(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

func compact(v any) string {
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return "<unset>"
	}
	return string(b)
}

// maasNotEnabled: "Run hangs at Wait for MaaS CRDs, and the DSC shows
// ModelsAsAServiceReady=False … Removed". In 3.5 the switch is
// aigateway.modelsAsAService (note "AsA"); the 3.4 spelling
// (kserve.modelsAsService, or modelsAsService under aigateway, which the
// API server prunes) does not enable MaaS (deployment README; 3.5 DSC CRD).
func maasNotEnabled(s *verify.State) []Finding {
	dsc := s.DSC
	if dsc == nil {
		return nil
	}
	name := dsc.GetName()
	version := str(dsc, "status", "release", "version")
	is35 := version == "" || strings.HasPrefix(version, "3.5") || !(strings.HasPrefix(version, "3.3") || strings.HasPrefix(version, "3.4"))
	aig, _, _ := unstructured.NestedMap(dsc.Object, "spec", "components", "aigateway")
	kserve, _, _ := unstructured.NestedMap(dsc.Object, "spec", "components", "kserve")
	if is35 {
		enabled := str(dsc, "spec", "components", "aigateway", "managementState") == "Managed" &&
			str(dsc, "spec", "components", "aigateway", "modelsAsAService", "managementState") == "Managed"
		c, ok := cond(dsc, "ModelsAsAServiceReady")
		removed := ok && c.Status != "True" && c.Reason == "Removed"
		if enabled && !removed {
			return nil
		}
		ev := fmt.Sprintf("release %s; spec.components.aigateway=%s", orUnknown(version), compact(aig))
		if ms, ok := kserve["modelsAsService"]; ok {
			ev += "; spec.components.kserve.modelsAsService=" + compact(ms)
		}
		if ok {
			ev += "; " + c.String()
		}
		return []Finding{finding(CodeMaaSNotEnabled, obj("DataScienceCluster", "", name), ev,
			"MaaS is not turned on: RHOAI 3.5 reads spec.components.aigateway.modelsAsAService (note \"AsA\"); the 3.4 spelling modelsAsService is ignored or pruned by the API server",
			fmt.Sprintf(`oc patch datasciencecluster %s --type merge -p '{"spec":{"components":{"aigateway":{"managementState":"Managed","modelsAsAService":{"managementState":"Managed"}}}}}'   (or: maasctl install)`, name))}
	}
	if str(dsc, "spec", "components", "kserve", "modelsAsService", "managementState") == "Managed" {
		return nil
	}
	return []Finding{finding(CodeMaaSNotEnabled, obj("DataScienceCluster", "", name),
		fmt.Sprintf("release %s; spec.components.kserve=%s", version, compact(kserve)),
		"MaaS is not turned on: RHOAI "+version+" reads spec.components.kserve.modelsAsService",
		fmt.Sprintf(`oc patch datasciencecluster %s --type merge -p '{"spec":{"components":{"kserve":{"modelsAsService":{"managementState":"Managed"}}}}}'`, name))}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// kuadrant: "Run stops at Wait for Kuadrant to be ready, and Kuadrant
// shows MissingDependency": the operator started before Istio existed
// (case B01); restarting its pod fixes it.
func kuadrant(s *verify.State) []Finding {
	k := s.Inv.Kuadrant
	o := obj("Kuadrant", k.Namespace, k.Name)
	if s.Kuadrant == nil {
		return nil // missingObjects: MAAS-D022
	}
	c, ok := cond(s.Kuadrant, "Ready")
	if ok && c.Status == "True" {
		return nil
	}
	ev := "no Ready condition"
	if ok {
		ev = c.String()
	}
	var pods []string
	for _, p := range s.KuadrantPods {
		if ts := p.GetCreationTimestamp(); !ts.IsZero() {
			pods = append(pods, fmt.Sprintf("%s (created %s)", p.GetName(), ts.UTC().Format(time.RFC3339)))
		} else {
			pods = append(pods, p.GetName())
		}
	}
	if len(pods) > 0 {
		ev += "; operator pods: " + strings.Join(pods, ", ")
	} else {
		ev += "; no operator pod matches " + k.OperatorSelector + " in " + k.OperatorNamespace
	}
	if ok && c.Reason == "MissingDependency" {
		return []Finding{finding(CodeKuadrantMissingDep, o, ev,
			"the Kuadrant operator checks its dependencies once at start-up; it started before Istio (created with the GatewayClass) and keeps reporting MissingDependency",
			verify.KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector))}
	}
	if op := kuadrantOperator(s); len(op) > 0 {
		return []Finding{finding(CodeKuadrantNotReady, o, ev+"; "+op[0].Evidence,
			"nothing reconciles Kuadrant: "+op[0].Cause, op[0].Fix)}
	}
	if comp := missingWithoutStatus(s, ok); comp != "" {
		return []Finding{finding(CodeKuadrantNotReady, o, ev+"; no "+comp+" CR named "+kuadrantComponentName[comp]+" in "+k.Namespace,
			"the Kuadrant operator's first reconcile failed before it made the "+comp+" CR, and it wrote no status: kuadrant-operator v1.5.2 updates the Kuadrant status after its other tasks, and policy-machinery v0.8.0 skips that update when a task failed (a Limitador or Authorino create refused by an admission webhook or quota, say); it does not retry, and reconciles again only for a new generation of the Kuadrant CR or a change of its trigger annotations",
			fmt.Sprintf("maasctl install   (sets the operator's reconcile trigger once Kuadrant has had no Ready condition for 45 s with a component missing); or by hand: oc annotate kuadrant %s -n %s --overwrite extensions.kuadrant.io/trigger-time=$(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)", k.Name, k.Namespace))}
	}
	if comp, ok := missingFromTopology(c); ok {
		return []Finding{finding(CodeKuadrantNotReady, o, ev,
			"the Kuadrant operator has no "+comp+" CR in its view: the reconcile that creates it failed, and kuadrant-operator v1.5.2 does not retry one; it reconciles again only for a new generation of the Kuadrant CR or a change of its trigger annotations",
			fmt.Sprintf("maasctl install   (sets the operator's reconcile trigger once Kuadrant has reported this for 45 s); or by hand: oc annotate kuadrant %s -n %s --overwrite extensions.kuadrant.io/trigger-time=$(date -u +%%Y-%%m-%%dT%%H:%%M:%%SZ)", k.Name, k.Namespace))}
	}
	if p := authorinoTrouble(s); p != nil {
		return []Finding{finding(CodeKuadrantNotReady, o, ev+"; "+p.evidence,
			"Kuadrant waits for Authorino: "+p.cause, p.fix)}
	}
	return []Finding{finding(CodeKuadrantNotReady, o, ev,
		"Kuadrant is not ready (Authorino or Limitador not ready, or its operator is not running)",
		fmt.Sprintf("maasctl install   (re-applies Kuadrant and Authorino from the inventory and waits for Ready); if it stays not Ready, restart the operator: %s", verify.KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector)))}
}

// kuadrantComponentName is the name of the CR of each Kuadrant component
// (kuadrant-operator v1.5.2 api/v1beta1/topology.go
// LinkKuadrantToLimitador, LinkKuadrantToAuthorino: only these names, in
// the Kuadrant CR's namespace, belong to it).
var kuadrantComponentName = map[string]string{"Limitador": "limitador", "Authorino": "authorino"}

// kuadrantNoStatusAfter is how old a Kuadrant CR with no Ready condition
// must be before missingWithoutStatus blames a failed reconcile: the
// operator writes the status within seconds of a reconcile (maasctl's
// platform/kuadrant step waits as long, kuadrantStall).
const kuadrantNoStatusAfter = 45 * time.Second

// missingWithoutStatus reports the component (Limitador first, then
// Authorino) whose CR does not exist while the Kuadrant CR has no Ready
// condition (hasReady false), is at least kuadrantNoStatusAfter old (or
// of unknown age) and its operator runs (the caller checked): the CR of
// a reconcile that failed before the status update. It is "" when
// Kuadrant has a Ready condition or is younger, when the Limitadors were
// not read, when the Authorinos' read failed and the Limitador exists, or
// when both CRs exist.
func missingWithoutStatus(s *verify.State, hasReady bool) string {
	if hasReady || s.Limitadors == nil || s.Kuadrant == nil {
		return ""
	}
	if ts := s.Kuadrant.GetCreationTimestamp(); !ts.IsZero() && time.Since(ts.Time) < kuadrantNoStatusAfter {
		return ""
	}
	has := func(objs []*unstructured.Unstructured, name string) bool {
		for _, o := range objs {
			if o.GetName() == name {
				return true
			}
		}
		return false
	}
	if !has(s.Limitadors, kuadrantComponentName["Limitador"]) {
		return "Limitador"
	}
	if !s.ReadFailed("Authorino", s.Inv.Kuadrant.Namespace, "*") && !has(s.Authorinos, kuadrantComponentName["Authorino"]) {
		return "Authorino"
	}
	return ""
}

// missingFromTopology reports the component (Limitador, Authorino) that
// Kuadrant's Ready=False condition c says is missing from the operator's
// topology: reason LimitadorNotReady or AuthorinoNotReady with the
// message kuadrant-operator v1.5.2 writes when it has no such CR
// (internal/controller/kuadrant_status_updater.go checkLimitadorReady,
// checkAuthorinoAvailable: "limitador resource not in topology").
func missingFromTopology(c waiters.Cond) (string, bool) {
	if c.Status != "False" || !strings.HasSuffix(c.Message, " resource not in topology") {
		return "", false
	}
	switch c.Reason {
	case "LimitadorNotReady":
		return "Limitador", true
	case "AuthorinoNotReady":
		return "Authorino", true
	}
	return "", false
}

// gateway: "Gateway not Programmed" (check oc describe gateway), and
// "LoadBalancerPending and DNSReady=False are expected with ClusterIP plus
// a Route and do no harm".
func gateway(s *verify.State) []Finding {
	g := s.Inv.Gateway
	gw := s.Gateway
	if gw == nil {
		return nil
	}
	o := obj("Gateway", g.Namespace, g.Name)
	svcType := g.ServiceType
	if t := gw.GetAnnotations()["networking.istio.io/service-type"]; t != "" {
		svcType = t
	}
	if t := str(s.GatewayService, "spec", "type"); t != "" {
		svcType = t
	}
	var out []Finding
	if harmless := harmlessGatewayConditions(gw, svcType); len(harmless) > 0 {
		out = append(out, finding(CodeGatewayLBHarmless, o, strings.Join(harmless, "; ")+"; Service type "+svcType,
			"expected with a ClusterIP Gateway Service behind a passthrough Route: no load balancer or DNS record is needed",
			"none needed (use gateway.serviceType=LoadBalancer only with MetalLB or a cloud load balancer)"))
	}
	p, ok := cond(gw, "Programmed")
	if ok && p.Status == "True" {
		return out
	}
	ev := "no Programmed condition"
	if ok {
		ev = p.String()
	}
	cause := "the OpenShift Gateway controller (Istio) has not programmed the Gateway"
	fix := fmt.Sprintf("maasctl install   (re-applies the GatewayClass and Gateway from the inventory and waits for Programmed); if it stays not Programmed: oc describe gateway %s -n %s", g.Name, g.Namespace)
	ls, _, _ := unstructured.NestedSlice(gw.Object, "status", "listeners")
	for _, x := range ls {
		m, _ := x.(map[string]any)
		conds, _ := m["conditions"].([]any)
		for _, y := range conds {
			cm, _ := y.(map[string]any)
			if cm["type"] == "ResolvedRefs" && cm["status"] != "True" {
				ev += fmt.Sprintf("; listener %v ResolvedRefs=%v (%v): %v", m["name"], cm["status"], cm["reason"], cm["message"])
				ev, cause, fix = listenerCertCause(s, ev)
			}
		}
	}
	if ok && p.Reason == "AddressNotAssigned" {
		cause = "the Gateway Service is of type " + svcType + " and no load balancer assigned an address"
		fix = "use gateway.serviceType=ClusterIP with the passthrough Route (the default), then maasctl install"
	}
	if gc, ok := cond(s.GatewayClass, "Accepted"); s.GatewayClass != nil && (!ok || gc.Status != "True") {
		ev += "; GatewayClass " + g.ClassName + " not Accepted"
		cause = "GatewayClass " + g.ClassName + " is not accepted, so Istio is not installed"
		fix = "oc describe gatewayclass " + g.ClassName
	}
	return append(out, finding(CodeGatewayNotProgrammed, o, ev, cause, fix))
}

// certificateDrift names the fields of the live Gateway Certificate that
// differ from what the inventory makes ("" when none, or when there is no
// Certificate).
func certificateDrift(s *verify.State) string {
	g := s.Inv.Gateway
	if s.Certificate == nil || g.CertIssuer == "" {
		return ""
	}
	var d []string
	for _, f := range []struct{ path, inv, field string }{
		{"spec.issuerRef.name", g.CertIssuer, "gateway.certIssuer"},
		{"spec.secretName", g.CertSecret, "gateway.certSecret"},
	} {
		// Both fields are required by the Certificate CRD; an empty one
		// was not read, which is no evidence of a change.
		if live := str(s.Certificate, strings.Split(f.path, ".")...); live != "" && live != f.inv {
			d = append(d, fmt.Sprintf("%s %q, the inventory's %s %q", f.path, live, f.field, f.inv))
		}
	}
	if k := str(s.Certificate, "spec", "issuerRef", "kind"); k != "" && k != "ClusterIssuer" {
		d = append(d, fmt.Sprintf("spec.issuerRef.kind %q, not ClusterIssuer", k))
	}
	return strings.Join(d, "; ")
}

// maasAPI: "maas-api never appears: check the DSC status conditions and
// that maas-db-config exists in redhat-ai-gateway-infra".
func maasAPI(s *verify.State) []Finding {
	ns := s.Release.MaaSAPINamespace(s.Inv)
	o := obj("Deployment", ns, "maas-api")
	var ev []string
	if s.MaaSAPI == nil {
		ev = append(ev, "Deployment "+s.MissingReason("Deployment", ns, "maas-api"))
	} else if cause, fix, ok := verify.MaaSAPIScaledToZero(s); ok {
		// Scaled to 0 is not a crash loop (no pod runs, and the
		// Deployment may be Available with 0 of 0).
		ready, _, _ := unstructured.NestedInt64(s.MaaSAPI.Object, "status", "readyReplicas")
		return []Finding{finding(CodeMaaSAPIMissing, o, fmt.Sprintf("spec.replicas 0 (scaled to 0 replicas), %d ready", ready), cause, fix)}
	} else {
		if c, ok := cond(s.MaaSAPI, "Available"); ok && c.Status == "True" {
			return nil
		}
		ready, _, _ := unstructured.NestedInt64(s.MaaSAPI.Object, "status", "readyReplicas")
		ev = append(ev, fmt.Sprintf("%d ready replicas, not Available", ready))
	}
	for _, t := range []string{s.Release.MaaSCondition(), "AIGatewayReady", "Ready"} {
		if c, ok := cond(s.DSC, t); ok && c.Status != "True" {
			ev = append(ev, "DSC "+c.String())
		}
	}
	ev = append(ev, fmt.Sprintf("Secret %s/%s exists: %v", s.DBConfig.Namespace, s.DBConfig.Name, s.DBConfig.Exists))
	cause := "the RHOAI operator has not deployed maas-api: MaaS is not enabled or its prerequisites (maas-db-config, Authorino with TLS) are missing"
	fix := "maasctl install   (re-applies the DSC with MaaS Managed, Authorino's TLS and maas-db-config); if maas-api still does not appear: oc get datasciencecluster " + s.Release.DSC(s.Inv) + " -o yaml   (status.conditions)"
	if s.MaaSAPI != nil {
		cause = "maas-api pods are not ready: it crash-loops while the database is unreachable or maas-db-config is wrong"
		fix = fmt.Sprintf("maasctl install   (re-writes maas-db-config from Vault and restarts maas-api when it changed); if it still crash-loops: oc logs -n %s deploy/maas-api --tail=20", ns)
	}
	if !s.DBConfig.Exists {
		fix = "maasctl install   (writes maas-db-config from Vault before MaaS needs it)"
	}
	return []Finding{finding(CodeMaaSAPIMissing, o, strings.Join(ev, "; "), cause, fix)}
}

// dbConfig: maas-db-config must exist with DB_CONNECTION_URL in the
// maas-api namespace (case B06; on 3.5 redhat-ai-gateway-infra).
func dbConfig(s *verify.State) []Finding {
	d := s.Inv.DBConfig
	d.Namespace = s.DBConfig.Namespace
	o := obj("Secret", d.Namespace, d.Name)
	if s.DBConfig.Exists && s.DBConfig.HasKey("DB_CONNECTION_URL") {
		return nil
	}
	ev := "Secret " + s.MissingReason("Secret", d.Namespace, d.Name)
	if s.DBConfig.Exists {
		ev = "keys: " + strings.Join(s.DBConfig.Keys, ",") + " (no DB_CONNECTION_URL)"
	}
	if c, ok := cond(s.DSC, s.Release.MaaSCondition()); ok && c.Status != "True" {
		ev += "; DSC " + c.String()
	}
	return []Finding{finding(CodeDBConfigMissing, o, ev,
		"maas-api reads DB_CONNECTION_URL from this Secret; without it the MaaS component reports missing prerequisites and a restarted maas-api crash-loops",
		fmt.Sprintf("maasctl install   (re-creates %s from the password in Vault and restarts maas-api); by hand: oc create secret generic %s -n %s --from-literal=DB_CONNECTION_URL='postgresql://maas:<password>@%s-rw.%s.svc:5432/%s?sslmode=%s' && oc rollout restart deploy/maas-api -n %s",
			d.Name, d.Name, d.Namespace, s.Inv.Database.ClusterName, s.Inv.Database.Namespace, s.Inv.Database.Name, d.SSLMode, s.Release.MaaSAPINamespace(s.Inv)))}
}

// monitoring: "DSC shows Degraded, mentioning monitoring: User Workload
// Monitoring is off. Check cluster-monitoring-config."
func monitoring(s *verify.State) []Finding {
	o := obj("ConfigMap", "openshift-monitoring", "cluster-monitoring-config")
	var ev []string
	enabled := false
	if s.MonitoringConfig == nil {
		ev = append(ev, "ConfigMap "+s.MissingReason("ConfigMap", "openshift-monitoring", "cluster-monitoring-config"))
	} else {
		raw := str(s.MonitoringConfig, "data", "config.yaml")
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
			ev = append(ev, "config.yaml does not parse: "+err.Error())
		}
		enabled, _ = cfg["enableUserWorkload"].(bool)
		if !enabled {
			ev = append(ev, fmt.Sprintf("config.yaml enableUserWorkload=%v", cfg["enableUserWorkload"]))
		}
	}
	for _, u := range []*unstructured.Unstructured{s.DSC, s.DSCI} {
		if u == nil {
			continue
		}
		l, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, x := range l {
			m, _ := x.(map[string]any)
			msg := strings.ToLower(fmt.Sprint(m["message"]) + fmt.Sprint(m["type"]))
			bad := m["status"] != "True" || m["type"] == "Degraded"
			if m["type"] == "Degraded" {
				bad = m["status"] == "True"
			}
			if bad && strings.Contains(msg, "monitoring") {
				c, _ := waiters.GetCondition(u, fmt.Sprint(m["type"]))
				ev = append(ev, u.GetKind()+" "+c.String())
			}
		}
	}
	if enabled && len(ev) == 0 {
		return nil
	}
	if enabled {
		return []Finding{finding(CodeMonitoringOff, o, strings.Join(ev, "; "),
			"User Workload Monitoring is on, but RHOAI still reports a monitoring problem", "oc get pods -n openshift-user-workload-monitoring")}
	}
	return []Finding{finding(CodeMonitoringOff, o, strings.Join(ev, "; "),
		"User Workload Monitoring is off; MaaS exports its usage metrics there and reports Degraded without it",
		"maasctl install   (merges enableUserWorkload: true into config.yaml); by hand: oc -n openshift-monitoring edit configmap cluster-monitoring-config")}
}

// providers: "ExternalProvider not Ready: check the API-key Secret exists
// with key api-key, and that the Service, ServiceEntry and DestinationRule
// were created in the model namespace."
func providers(s *verify.State) []Finding {
	var out []Finding
	for k, p := range s.Providers {
		ns, name, _ := strings.Cut(k, "/")
		if p == nil || str(p, "status", "phase") == "Ready" {
			continue
		}
		sec := s.ProviderSecrets[k]
		ev := "phase " + orUnknown(str(p, "status", "phase"))
		if c, ok := cond(p, "Ready"); ok {
			ev += "; " + c.String()
		}
		cause, fix := verify.ProviderCause(s, k)
		code := CodeProviderNotReady
		switch {
		case !sec.Exists:
			code = CodeProviderSecret
		case !sec.HasKey("api-key"):
			code = CodeProviderSecretKey
			ev += "; Secret keys: " + strings.Join(sec.Keys, ",")
		case sec.Labels[verify.IPPManagedLabel] != "true":
			code = CodeProviderSecretLabel
			ev += fmt.Sprintf("; Secret labels: %v", sec.Labels)
		}
		if d := providerDrift(s, ns, name, p); d != "" && code == CodeProviderNotReady {
			ev += "; " + d
			cause = "the ExternalProvider was changed outside the inventory (" + d + "), so the MaaS controller reconciles another provider than the inventory's"
			fix = fmt.Sprintf("maasctl install   (re-applies ExternalProvider %s/%s from the inventory)", ns, name)
		}
		out = append(out, finding(code, obj("ExternalProvider", ns, name), ev, cause, fix))
	}
	return out
}

// providerDrift names the fields of a live ExternalProvider that differ
// from the inventory's externalModels of that provider (its endpoint and
// API-key Secret); "" when none do.
func providerDrift(s *verify.State, ns, name string, p *unstructured.Unstructured) string {
	for _, m := range s.Inv.ExternalModels {
		if m.Namespace != ns || m.ProviderName != name {
			continue
		}
		var d []string
		if live := str(p, "spec", "auth", "secretRef", "name"); live != m.APIKeySecret {
			d = append(d, fmt.Sprintf("spec.auth.secretRef.name %q, the inventory's externalModels[%s].apiKeySecret %q", live, m.Name, m.APIKeySecret))
		}
		if live := str(p, "spec", "endpoint"); live != m.Endpoint {
			d = append(d, fmt.Sprintf("spec.endpoint %q, the inventory's externalModels[%s].endpoint %q", live, m.Name, m.Endpoint))
		}
		return strings.Join(d, "; ")
	}
	return ""
}

// serviceMesh: "Long prompts fail or are cut off: requests over 16 KB can
// be truncated on Service Mesh before 3.3.1" (OSSM-15498, case B17).
func serviceMesh(s *verify.State) []Finding {
	min := semver.MustParse("3.3.1")
	var out []Finding
	for _, c := range s.CSVs {
		if !strings.HasPrefix(c.GetName(), "servicemeshoperator") {
			continue
		}
		vs := str(c, "spec", "version")
		if vs == "" {
			if _, after, ok := strings.Cut(c.GetName(), ".v"); ok {
				vs = after
			}
		}
		v, err := semver.ParseTolerant(vs)
		if err != nil || v.GTE(min) {
			continue
		}
		ns := c.GetNamespace()
		out = append(out, finding(CodeServiceMeshOld, obj("ClusterServiceVersion", c.GetNamespace(), c.GetName()),
			fmt.Sprintf("Service Mesh %s installed (phase %s); 3.3.1 or later needed", v, orUnknown(str(c, "status", "phase"))),
			"Service Mesh before 3.3.1 can truncate or corrupt request bodies over 16 KB on the gateway (chained ext_proc, OSSM-15498)",
			"oc get csv -n "+ns+" | grep servicemesh; update Service Mesh (its Subscription channel or the OpenShift version that ships it) to 3.3.1 or later"))
	}
	return out
}

// modelServing: "Model timeouts under load … check oc logs deploy/
// llama-coder": here, the in-cluster Service behind an ExternalProvider has
// no ready endpoints, so the gateway answers 503 no healthy upstream.
func modelServing(s *verify.State) []Finding {
	var out []Finding
	for _, k := range sortedKeys(s.Backends) {
		b := s.Backends[k]
		o := obj("Service", b.Namespace, b.Name)
		switch {
		case b.Service == nil:
			out = append(out, finding(CodeModelNotServing, o, "Service "+s.MissingReason("Service", b.Namespace, b.Name)+" (endpoint "+b.Host+" of ExternalProvider "+k+")",
				"the model server's Service does not exist, so the gateway has no upstream for the model",
				fmt.Sprintf("set externalModels[].endpoint (now %s) in the inventory to the Service of the model server (oc get svc -n %s), then maasctl install; or re-create Service %s/%s for the model server (maasctl does not manage it)", b.Host, b.Namespace, b.Namespace, b.Name)))
		case b.ReadyEndpoints == 0:
			sel, _, _ := unstructured.NestedStringMap(b.Service.Object, "spec", "selector")
			ev := fmt.Sprintf("%d endpoints, 0 ready (selector %s)", b.Endpoints, selector(sel))
			cause, fix := notServing(b, selector(sel))
			for _, w := range b.Workloads {
				ev += fmt.Sprintf("; Deployment %s: %d of %d replicas ready", w.Name, w.Ready, w.Replicas)
			}
			out = append(out, finding(CodeModelNotServing, o, ev, cause, fix))
		}
	}
	return out
}

// notServing is the cause and fix of a model server Service without a
// ready endpoint, from the Deployments behind it: scaled to zero (scaling
// it up converges), none matching the selector (the Service or the
// inventory's endpoint is wrong), or pods that do not become ready (only
// the model server's own status and logs can tell why; maasctl does not
// manage it).
func notServing(b *verify.Backend, sel string) (cause, fix string) {
	if len(b.Workloads) == 0 {
		return fmt.Sprintf("no Deployment in %s has pods with the Service's selector %s, so the gateway has no upstream for the model (503 no healthy upstream)", b.Namespace, sel),
			fmt.Sprintf("deploy the model server with pod labels %s, or set externalModels[].endpoint (now %s) in the inventory to the Service that serves it (oc get deploy,svc -n %s), then maasctl install", sel, b.Host, b.Namespace)
	}
	for _, w := range b.Workloads {
		if w.Replicas == 0 {
			return "Deployment " + w.Name + " of the model server is scaled to 0: the gateway answers 503 no healthy upstream",
				fmt.Sprintf("oc scale deployment %s -n %s --replicas=1", w.Name, b.Namespace)
		}
	}
	w := b.Workloads[0]
	return "the model server's pods are not ready: the gateway answers 503 no healthy upstream",
		fmt.Sprintf("oc rollout status deployment/%s -n %s; oc logs -n %s deploy/%s   (maasctl does not manage the model server)", w.Name, b.Namespace, b.Namespace, w.Name)
}

// harmlessGatewayConditions are the Gateway's conditions that look
// alarming but are expected when its Service is not a LoadBalancer
// (LoadBalancerPending, DNSReady not True).
func harmlessGatewayConditions(gw *unstructured.Unstructured, svcType string) []string {
	var harmless []string
	l, _, _ := unstructured.NestedSlice(gw.Object, "status", "conditions")
	for _, x := range l {
		m, _ := x.(map[string]any)
		typ, _ := m["type"].(string)
		reason, _ := m["reason"].(string)
		if (reason == "LoadBalancerPending" || (typ == "DNSReady" && m["status"] != "True")) && svcType != "LoadBalancer" {
			c, _ := waiters.GetCondition(gw, typ)
			harmless = append(harmless, c.String())
		}
	}
	return harmless
}

// listenerCertCause explains a Gateway listener whose certificate Secret
// does not resolve (ResolvedRefs not True): the evidence ev with the
// Certificate and its issuer added, the cause and a fix that converges,
// from the most specific cause found (no Certificate, an issuer not
// Ready, a Certificate changed outside the inventory, a certificate the
// inventory brings itself) down to cert-manager not having issued yet.
func listenerCertCause(s *verify.State, ev string) (string, string, string) {
	g := s.Inv.Gateway
	var cause, fix string
	cause = fmt.Sprintf("the listener's certificate Secret %s is missing or invalid", g.CertSecret)
	if c, ok := cond(s.Certificate, "Ready"); ok {
		ev += "; Certificate " + g.CertificateName + " " + c.String()
	}
	fix = fmt.Sprintf("maasctl install   (waits until cert-manager issues the Certificate, naming its reason); if it stays not Ready: oc describe certificate %s -n %s; oc get challenges -n %s", g.CertificateName, g.Namespace, g.Namespace)
	if g.CertIssuer == "" {
		// The inventory brings its own certificate: no
		// Certificate exists and maasctl install cannot make
		// the Secret.
		cause = fmt.Sprintf("the inventory brings its own certificate (gateway.certIssuer is empty) and Secret %s/%s is missing or not a TLS Secret; maasctl does not create it", g.Namespace, g.CertSecret)
		fix = fmt.Sprintf("oc create secret tls %s -n %s --cert=<certificate file> --key=<key file>   (the certificate for the MaaS host name); or set gateway.certIssuer in the inventory to a Ready ClusterIssuer, then maasctl install", g.CertSecret, g.Namespace)
	}
	if d := certificateDrift(s); d != "" {
		ev += "; Certificate " + d
		cause = fmt.Sprintf("Certificate %s was changed outside the inventory (%s), so cert-manager does not issue Secret %s as the inventory says", g.CertificateName, d, g.CertSecret)
		fix = fmt.Sprintf("maasctl install   (re-applies Certificate %s/%s from the inventory; cert-manager then issues Secret %s)", g.Namespace, g.CertificateName, g.CertSecret)
	}
	if ic, ok := cond(s.CertIssuer, "Ready"); g.CertIssuer != "" && (s.CertIssuer == nil || !ok || ic.Status != "True") {
		what := "does not exist"
		if s.CertIssuer != nil {
			what = "is not Ready"
			if ok {
				what += " (" + ic.Reason + ": " + ic.Message + ")"
			}
		}
		ev += "; ClusterIssuer " + g.CertIssuer + " " + what
		cause = fmt.Sprintf("ClusterIssuer %s, which issues the Gateway's certificate, %s, so cert-manager issues no Secret %s", g.CertIssuer, what, g.CertSecret)
		fix = fmt.Sprintf("make ClusterIssuer %s Ready (oc describe clusterissuer %s), or set gateway.certIssuer to a Ready ClusterIssuer in the inventory; then maasctl install", g.CertIssuer, g.CertIssuer)
	}
	if g.CertIssuer != "" && s.Certificate == nil {
		ev += "; Certificate " + g.Namespace + "/" + g.CertificateName + " " + s.MissingReason("Certificate", g.Namespace, g.CertificateName)
		cause = fmt.Sprintf("Certificate %s, which issues Secret %s, does not exist", g.CertificateName, g.CertSecret)
		fix = "maasctl install   (re-creates the Certificate; cert-manager then issues the Secret)"
	}
	return ev, cause, fix
}
