package doctor

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
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
	if p := authorinoTrouble(s); p != nil {
		return []Finding{finding(CodeKuadrantNotReady, o, ev+"; "+p.evidence,
			"Kuadrant waits for Authorino: "+p.cause, p.fix)}
	}
	return []Finding{finding(CodeKuadrantNotReady, o, ev,
		"Kuadrant is not ready (Authorino or Limitador not ready, or its operator is not running)",
		fmt.Sprintf("maasctl install   (re-applies Kuadrant and Authorino from the inventory and waits for Ready); if it stays not Ready, restart the operator: %s", verify.KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector)))}
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
	// Conditions that look alarming but are expected with ClusterIP.
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
	if len(harmless) > 0 {
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
				cause = fmt.Sprintf("the listener's certificate Secret %s is missing or invalid", g.CertSecret)
				if c, ok := cond(s.Certificate, "Ready"); ok {
					ev += "; Certificate " + g.CertificateName + " " + c.String()
				}
				fix = fmt.Sprintf("maasctl install   (waits until cert-manager issues the Certificate, naming its reason); if it stays not Ready: oc describe certificate %s -n %s; oc get challenges -n %s", g.CertificateName, g.Namespace, g.Namespace)
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

// maasAPI: "maas-api never appears: check the DSC status conditions and
// that maas-db-config exists in redhat-ai-gateway-infra".
func maasAPI(s *verify.State) []Finding {
	ns := s.Release.MaaSAPINamespace
	o := obj("Deployment", ns, "maas-api")
	var ev []string
	if s.MaaSAPI == nil {
		ev = append(ev, "Deployment "+s.MissingReason("Deployment", ns, "maas-api"))
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
	fix := "maasctl install   (re-applies the DSC with MaaS Managed, Authorino's TLS and maas-db-config); if maas-api still does not appear: oc get datasciencecluster " + s.Release.DSCName + " -o yaml   (status.conditions)"
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
			d.Name, d.Name, d.Namespace, s.Inv.Database.ClusterName, s.Inv.Database.Namespace, s.Inv.Database.Name, d.SSLMode, s.Release.MaaSAPINamespace))}
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
		out = append(out, finding(code, obj("ExternalProvider", ns, name), ev, cause, fix))
	}
	return out
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
		op := s.Inv.Operator("rhcl")
		ns := c.GetNamespace()
		if op != nil {
			ns = op.Namespace
		}
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
				fmt.Sprintf("oc get svc -n %s; fix the ExternalProvider endpoint (externalModels[].endpoint)", b.Namespace)))
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
			fmt.Sprintf("deploy the model server with pod labels %s, or point externalModels[].endpoint at the Service that serves it (oc get deploy,svc -n %s)", sel, b.Namespace)
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

func selector(m map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func refs(p *unstructured.Unstructured) [][2]string {
	l, _, _ := unstructured.NestedSlice(p.Object, "spec", "modelRefs")
	var out [][2]string
	for _, x := range l {
		m, _ := x.(map[string]any)
		out = append(out, [2]string{fmt.Sprint(m["namespace"]), fmt.Sprint(m["name"])})
	}
	return out
}

func subjects(p *unstructured.Unstructured, field string) ([]string, []string) {
	gl, _, _ := unstructured.NestedSlice(p.Object, "spec", field, "groups")
	var groups []string
	for _, g := range gl {
		m, _ := g.(map[string]any)
		groups = append(groups, fmt.Sprint(m["name"]))
	}
	users, _, _ := unstructured.NestedStringSlice(p.Object, "spec", field, "users")
	return groups, users
}

func grants(id verify.Identity, groups, users []string) bool {
	if id.User != "" && slices.Contains(users, id.User) {
		return true
	}
	for _, g := range groups {
		if slices.Contains(id.Groups, g) {
			return true
		}
	}
	return false
}

// governance: a model must be in both a MaaSAuthPolicy and a
// MaaSSubscription, or its MaaSModelRef stays Pending ("No active
// governance pairing found", case B17; rhoai-maas-guide#116).
func governance(s *verify.State) []Finding {
	var out []Finding
	for _, m := range s.Inv.ExternalModels {
		inAuth, inSub := false, false
		for _, p := range s.AuthPolicies {
			inAuth = inAuth || slices.Contains(refs(p), [2]string{m.Namespace, m.Name})
		}
		for _, p := range s.Subscriptions {
			inSub = inSub || slices.Contains(refs(p), [2]string{m.Namespace, m.Name})
		}
		if inAuth && inSub {
			continue
		}
		var missing []string
		if !inAuth {
			missing = append(missing, "no MaaSAuthPolicy")
		}
		if !inSub {
			missing = append(missing, "no MaaSSubscription")
		}
		ev := strings.Join(missing, " and ") + " references it"
		if c, ok := cond(s.ModelRefs[verify.Key(m.Namespace, m.Name)], "Ready"); ok {
			ev += "; " + c.String()
		}
		out = append(out, finding(CodeGovernanceGap, obj("MaaSModelRef", m.Namespace, m.Name), ev,
			"an auth policy decides who may call a model and a subscription how many tokens they get; a model needs both",
			"add the model to inventory authPolicies[].modelRefs and subscriptions[].modelRefs (names and namespaces must match), then maasctl install"))
	}
	return out
}

// access judges 403 and 429 causes against the installed inventory (what
// maasctl install was given), not against the caller's own groups: a live
// MaaSAuthPolicy or MaaSSubscription whose subjects differ from the
// inventory's is an error (403/429 for the users the inventory grants;
// maasctl install restores it), while a caller outside the groups the
// inventory grants is told so as information: that is the intended
// configuration (DEPLOYMENT.md "Grant access to specific groups").
func access(s *verify.State) []Finding {
	var out []Finding
	ns := s.Inv.RHOAI.MaaSNamespace
	for _, m := range s.Inv.ExternalModels {
		key := [2]string{m.Namespace, m.Name}
		o := obj("MaaSModelRef", m.Namespace, m.Name)
		var wantG, wantU, pols []string
		drift := false
		for _, ip := range s.Inv.AuthPolicies {
			if !slices.ContainsFunc(ip.ModelRefs, func(r inventory.ModelRef) bool { return r.Namespace == m.Namespace && r.Name == m.Name }) {
				continue
			}
			wantG, wantU = append(wantG, ip.Groups...), append(wantU, ip.Users...)
			lp := byName(s.AuthPolicies, ip.Name)
			if lp == nil || !slices.Contains(refs(lp), key) {
				continue // missingObjects / governance
			}
			g, u := subjects(lp, "subjects")
			if !sameSet(g, ip.Groups) || !sameSet(u, ip.Users) {
				drift = true
				out = append(out, finding(Code403, o,
					fmt.Sprintf("MaaSAuthPolicy %s/%s grants groups %s, users %s; the installed inventory grants groups %s, users %s", ns, ip.Name, list(g), list(u), list(ip.Groups), list(ip.Users)),
					"the policy was changed outside the inventory: the users the inventory grants get 403, and the next maasctl install reverts the change anyway",
					"maasctl install   (restores the inventory's subjects); to grant other groups, change authPolicies[name="+ip.Name+"].groups in the inventory first; then create a new API key (keys keep the groups they were minted with)"))
			}
			pols = append(pols, ip.Name)
		}
		var subG, subU, subs []string
		for _, is := range s.Inv.Subscriptions {
			if !slices.ContainsFunc(is.ModelRefs, func(r inventory.SubscriptionModel) bool { return r.Namespace == m.Namespace && r.Name == m.Name }) {
				continue
			}
			subG, subU = append(subG, is.Groups...), append(subU, is.Users...)
			lp := byName(s.Subscriptions, is.Name)
			if lp == nil {
				continue
			}
			g, u := subjects(lp, "owner")
			if !sameSet(g, is.Groups) || !sameSet(u, is.Users) {
				drift = true
				out = append(out, finding(Code429, o,
					fmt.Sprintf("MaaSSubscription %s/%s is owned by groups %s, users %s; the installed inventory says groups %s, users %s", ns, is.Name, list(g), list(u), list(is.Groups), list(is.Users)),
					"the subscription was changed outside the inventory: the users the inventory names get 429, and the next maasctl install reverts the change anyway",
					"maasctl install   (restores the inventory's owners); to cover other groups, change subscriptions[name="+is.Name+"].groups in the inventory first; then create a new API key"))
			}
			subs = append(subs, is.Name)
		}
		if drift || s.Caller.User == "" {
			continue
		}
		var gaps []string
		if len(pols) > 0 && !grants(s.Caller, wantG, wantU) {
			gaps = append(gaps, fmt.Sprintf("authPolicies %s (groups %s; users %s)", strings.Join(pols, ","), list(wantG), list(wantU)))
		}
		if len(subs) > 0 && !grants(s.Caller, subG, subU) {
			gaps = append(gaps, fmt.Sprintf("subscriptions %s (groups %s; users %s)", strings.Join(subs, ","), list(subG), list(subU)))
		}
		if len(gaps) > 0 {
			out = append(out, notInGroups(s, o, m.Name, strings.Join(gaps, " and ")))
		}
	}
	return out
}

// notInGroups is the information that the caller is outside the groups
// the installed inventory grants model (what says so).
func notInGroups(s *verify.State, object, model, what string) Finding {
	granted := "model " + model
	if model == "" {
		granted = "it"
	}
	return finding(CodeNotInGroups, object,
		fmt.Sprintf("you are not in %s; you are %s (groups %s)", what, s.Caller.User, list(s.Caller.Groups)),
		"the installed inventory grants "+granted+" to other groups: your own requests get 403 or 429, as intended; nothing is broken",
		"none needed; to call the model yourself add one of your groups to the inventory's authPolicies[].groups and subscriptions[].groups, then maasctl install -f <inventory> and create a new API key")
}

func list(l []string) string {
	if len(l) == 0 {
		return "<none>"
	}
	return strings.Join(l, ",")
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func firstName(l []string) string {
	if len(l) == 0 {
		return "<policy>"
	}
	n, _, _ := strings.Cut(l[0], " ")
	return n
}

// MinTokenLimit is the smallest per-user token limit doctor accepts
// without a warning (inventory.MinUsefulTokenLimit, which preflight reads
// too).
const MinTokenLimit = inventory.MinUsefulTokenLimit

// tokenLimits warns about limits so small that one or two requests use
// them up (case B17 static preflight).
func tokenLimits(s *verify.State) []Finding {
	var out []Finding
	for _, p := range s.Subscriptions {
		if strings.HasPrefix(p.GetName(), verify.ProbeSubscriptionPrefix) {
			continue
		}
		l, _, _ := unstructured.NestedSlice(p.Object, "spec", "modelRefs")
		for i, x := range l {
			m, _ := x.(map[string]any)
			tl, _ := m["tokenRateLimits"].([]any)
			for j, y := range tl {
				lm, _ := y.(map[string]any)
				n, ok := lm["limit"].(int64)
				if !ok || n >= MinTokenLimit {
					continue
				}
				out = append(out, finding(CodeTokenLimitTooSmall, obj("MaaSSubscription", p.GetNamespace(), p.GetName()),
					fmt.Sprintf("model %v: limit %d tokens per %v per user", m["name"], n, lm["window"]),
					fmt.Sprintf("a limit under %d tokens is used up by one or two chats, after which every request gets 429 until the window resets", MinTokenLimit),
					fmt.Sprintf(`raise subscriptions[].modelRefs[].tokenRateLimits in the inventory and run maasctl install, or: oc patch maassubscription %s -n %s --type json -p '[{"op":"replace","path":"/spec/modelRefs/%d/tokenRateLimits/%d/limit","value":200000}]'`, p.GetName(), p.GetNamespace(), i, j)))
			}
		}
	}
	return out
}

// fromDataPath turns failed data-path checks into findings by their
// response class (case B17).
func fromDataPath(s *verify.State, checks []verify.Check) []Finding {
	var out []Finding
	for _, c := range checks {
		if c.Result != verify.Fail {
			continue
		}
		ev := fmt.Sprintf("%s %s: %s", c.Code, c.Object, c.Detail)
		if c.Class == "" {
			out = append(out, unexplained(s, c, ev))
			continue
		}
		switch verify.Class(c.Class) {
		case verify.ClassUnauth:
			cause := "the gateway rejected the key: it is missing, expired or revoked, or an OpenShift token was used instead of an sk-oai- key"
			fix := `create a new key: curl -s -X POST "$MAAS/maas-api/v1/api-keys" -H "Authorization: Bearer $(oc whoami -t)" -H "Content-Type: application/json" -d '{"name": "laptop", "expiresIn": "720h", "subscription": "<subscription>"}'`
			if c.Code == verify.CodeMintKey {
				cause = "maas-api rejected the caller's OpenShift token (expired or not a user token)"
				fix = "oc login again (or pass --token), then retry"
			} else if c.Code == verify.CodeChat || c.Code == verify.CodeListModels && !strings.Contains(c.Title, "your API key") {
				cause = "a key minted seconds earlier was rejected: the gateway cannot validate keys against maas-api (Authorino config or maas-api database)"
				fix = "oc get authpolicy -A; oc logs -n " + s.Release.MaaSAPINamespace + " deploy/maas-api --tail=20"
			}
			out = append(out, finding(Code401, c.Object, ev, cause, fix))
		case verify.ClassForbidden:
			if sub := mintNotOwned(s, c); sub != "" {
				out = append(out, notInGroups(s, obj("MaaSSubscription", s.Inv.RHOAI.MaaSNamespace, sub), "", "the owners of subscription "+sub+" in the installed inventory"))
				continue
			}
			if m, ok := notGranted(s, c.Object, true); ok {
				out = append(out, notInGroups(s, modelObject(s, c.Object), m, "the groups the installed inventory's authPolicies grant"))
				continue
			}
			out = append(out, finding(Code403, modelObject(s, c.Object), ev, c.Cause,
				"maasctl install   (restores the inventory's MaaSAuthPolicy subjects), then create a new API key; to grant other groups, change authPolicies[].groups in the inventory first"))
		case verify.ClassQuota:
			if m, ok := notGranted(s, c.Object, false); ok {
				out = append(out, notInGroups(s, modelObject(s, c.Object), m, "the groups the installed inventory's subscriptions cover"))
				continue
			}
			out = append(out, finding(Code429, modelObject(s, c.Object), ev, c.Cause,
				"wait for the window to reset, or raise tokenRateLimits (inventory subscriptions[].modelRefs[].tokenRateLimits) and run maasctl install"))
		case verify.ClassUnavailable:
			f := finding(CodeModelNotServing, c.Object, ev, c.Cause, c.Fix)
			if b := firstBackend(s); b != nil && c.Code != verify.CodeHealth {
				f.Object = obj("Service", b.Namespace, b.Name)
				f.Cause = "the gateway reaches no model server: " + c.Cause
				f.Fix = fmt.Sprintf("oc get endpointslices -n %s -l kubernetes.io/service-name=%s; oc logs -n %s deploy/%s", b.Namespace, b.Name, b.Namespace, b.Name)
			}
			if c.Code == verify.CodeHealth {
				f = finding(CodeMaaSAPIMissing, obj("Deployment", s.Release.MaaSAPINamespace, "maas-api"), ev, c.Cause, c.Fix)
			}
			out = append(out, f)
		case verify.ClassAuthService:
			// With Kuadrant not Ready the observation is evidence of that
			// finding (it merges); otherwise it is a finding of its own.
			k := s.Inv.Kuadrant
			if rc, ok := cond(s.Kuadrant, "Ready"); ok && rc.Status != "True" {
				code := CodeKuadrantNotReady
				if rc.Reason == "MissingDependency" {
					code = CodeKuadrantMissingDep
				}
				out = append(out, finding(code, obj("Kuadrant", k.Namespace, k.Name), ev, "", ""))
				continue
			}
			if p := authorinoTrouble(s); p != nil {
				out = append(out, finding(CodeAuthService, p.object, ev, p.cause, p.fix))
				continue
			}
			out = append(out, finding(CodeAuthService, obj("Gateway", s.Inv.Gateway.Namespace, s.Inv.Gateway.Name), ev, c.Cause,
				fmt.Sprintf("maasctl install   (re-applies Kuadrant, Authorino's TLS settings and the policies); if AUTH_FAILURE stays, restart Authorino and the Kuadrant operator: oc rollout restart deployment/%s -n %s; %s",
					k.AuthorinoName, k.Namespace, verify.KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector))))
		case verify.ClassBodyLimit:
			out = append(out, finding(CodeServiceMeshOld, c.Object, ev, c.Cause, c.Fix))
		case verify.ClassAuthBypass:
			out = append(out, finding(CodeAuthBypass, c.Object, ev, c.Cause,
				"maasctl install   (re-applies the Kuadrant operator env and the policies); upgrade RHCL to 1.4.1 or later when it runs 1.4.0"))
		default:
			out = append(out, unexplained(s, c, ev))
		}
	}
	return out
}

// unexplained turns a failed data-path check of no class doctor has a
// rule for into a finding: an endpoint that does not answer, answers 404
// or is not MaaS (MAAS-D026), else the check itself (MAAS-D029). Doctor
// never drops a failed probe.
func unexplained(s *verify.State, c verify.Check, ev string) Finding {
	switch verify.Class(c.Class) {
	case verify.ClassNoResponse, verify.ClassNotFound, verify.ClassOther, verify.ClassBadRequest, "":
		if c.Class != "" || c.Code == verify.CodeHealth || strings.Contains(c.Cause, "unreachable") || strings.Contains(c.Cause, "not maas-api") || strings.Contains(c.Cause, "not the MaaS gateway") {
			return endpointFinding(s, c.Object, ev, c.Cause)
		}
	}
	return finding(CodeDataPathFailed, c.Object, ev, orUnknown(c.Cause), convergingFix(c.Fix))
}

// endpointFinding: the MaaS endpoint does not answer as MaaS. The fix
// names the endpoint the Route publishes.
func endpointFinding(s *verify.State, object, ev, cause string) Finding {
	g := s.Inv.Gateway
	fix := "pass the MaaS base URL with --endpoint https://<gateway host>"
	if h := str(s.Route, "spec", "host"); h != "" {
		fix = fmt.Sprintf("the Route %s/%s publishes https://%s: pass --endpoint https://%s (or leave --endpoint out), and check that it resolves to the cluster's router from here", g.Namespace, g.RouteName, h, h)
	} else if g.CreateRoute {
		fix = fmt.Sprintf("maasctl install   (re-creates the Route %s/%s that publishes the Gateway)", g.Namespace, g.RouteName)
	}
	return finding(CodeEndpointUnreachable, object, ev, "the MaaS endpoint did not answer as the MaaS gateway: "+orUnknown(cause), fix)
}

// mintNotOwned returns the inventory subscription a refused key mint
// (MAAS-V021, 403) was for when the installed inventory does not make the
// caller one of its owners: the refusal is then intended.
func mintNotOwned(s *verify.State, c verify.Check) string {
	if c.Code != verify.CodeMintKey || s.Caller.User == "" {
		return ""
	}
	for _, p := range s.Inv.Subscriptions {
		if strings.Contains(c.Detail, "subscription "+p.Name+":") && !grants(s.Caller, p.Groups, p.Users) {
			return p.Name
		}
	}
	return ""
}

// notGranted reports whether the model of a data-path check object is one
// the installed inventory does not grant the caller (authPolicies when
// auth, else subscriptions): the 403/429 is then intended.
func notGranted(s *verify.State, object string, auth bool) (string, bool) {
	_, name, ok := strings.Cut(object, " model=")
	if !ok || s.Caller.User == "" {
		return "", false
	}
	var groups, users []string
	n := 0
	if auth {
		for _, p := range s.Inv.AuthPolicies {
			if slices.ContainsFunc(p.ModelRefs, func(r inventory.ModelRef) bool { return r.Name == name }) {
				groups, users, n = append(groups, p.Groups...), append(users, p.Users...), n+1
			}
		}
	} else {
		for _, p := range s.Inv.Subscriptions {
			if slices.ContainsFunc(p.ModelRefs, func(r inventory.SubscriptionModel) bool { return r.Name == name }) {
				groups, users, n = append(groups, p.Groups...), append(users, p.Users...), n+1
			}
		}
	}
	return name, n > 0 && !grants(s.Caller, groups, users)
}

// modelObject names the MaaSModelRef of a data-path check whose object
// ends in "model=<name>", so observed and inferred findings about the same
// model merge; other objects are returned unchanged.
func modelObject(s *verify.State, object string) string {
	_, name, ok := strings.Cut(object, " model=")
	if !ok {
		return object
	}
	for _, m := range s.Inv.ExternalModels {
		if m.Name == name {
			return obj("MaaSModelRef", m.Namespace, m.Name)
		}
	}
	return object
}

func firstBackend(s *verify.State) *verify.Backend {
	for _, k := range sortedKeys(s.Backends) {
		return s.Backends[k]
	}
	return nil
}

// gatewayAuth: the MaaS controller protects every model with one
// Gateway-level AuthPolicy (verify.Release MaaSControllerFacts
// GatewayAuthPolicy; maas-controller v0.2.1 makes no per-model AuthPolicy).
// Once a MaaSAuthPolicy exists that AuthPolicy must exist and be Accepted
// and Enforced; the MaaSAuthPolicy itself is Active before that, so its
// phase hides the problem (issue 18).
func gatewayAuth(s *verify.State) []Finding {
	if len(s.AuthPolicies) == 0 {
		return nil // MaaS access not configured yet: nothing to generate
	}
	f := s.Release.MaaSControllerFacts()
	ns, name := s.Inv.Gateway.Namespace, f.GatewayAuthPolicy
	o := obj("AuthPolicy", ns, name)
	var pols []string
	for _, p := range s.AuthPolicies {
		pols = append(pols, p.GetName()+" (phase "+orUnknown(str(p, "status", "phase"))+")")
	}
	p := s.GatewayAuthPolicy
	if p == nil {
		return []Finding{finding(CodeGatewayAuth, o,
			s.MissingReason("AuthPolicy", ns, name)+"; MaaSAuthPolicies: "+strings.Join(pols, ", "),
			"the MaaS controller has not created the Gateway-level AuthPolicy every MaaSAuthPolicy converges on, so no MaaS authentication runs on model requests (the controller is not running, or it failed to reconcile)",
			fmt.Sprintf("oc get pods -n %s; oc describe maasauthpolicy -n %s", s.Release.MaaSAPINamespace, s.Inv.RHOAI.MaaSNamespace))}
	}
	var ev []string
	ok := true
	for _, typ := range []string{"Accepted", "Enforced"} {
		c, found := cond(p, typ)
		if !found {
			ev, ok = append(ev, "no "+typ+" condition"), false
			continue
		}
		ev = append(ev, c.String())
		ok = ok && c.Status == "True"
	}
	if ok {
		return nil
	}
	k := s.Inv.Kuadrant
	return []Finding{finding(CodeGatewayAuth, o, strings.Join(ev, "; "), verify.GatewayAuthCause(p),
		fmt.Sprintf("%s; then check: oc describe authpolicy %s -n %s", verify.KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector), name, ns))}
}
