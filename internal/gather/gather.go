// Package gather collects what a support engineer needs about a MaaS
// deployment into one tar.gz: the relevant objects as YAML (Secret values
// removed), their conditions, the events of the namespaces involved,
// operator and maas-api pod logs where the API server can reach them,
// maasctl's checkpoints, the read-only verify and doctor reports, and the
// debug logs the caller names. Everything written passes through a scrubber
// that removes API keys, bearer and Vault tokens and database URL
// passwords, in addition to the structural redaction of Secrets.
package gather

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/names"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// StateNamespace and CheckpointsConfigMap are where maasctl keeps its run
// state (steps.StateNamespace, steps.CheckpointsConfigMap).
const (
	StateNamespace       = names.StateNamespace
	CheckpointsConfigMap = names.CheckpointsConfigMap
)

// LogSource reads the last lines of a container's log.
type LogSource interface {
	Logs(ctx context.Context, namespace, pod, container string, tailLines int64) ([]byte, error)
}

// PodLogs reads logs through the API server (pods/log).
type PodLogs struct{ Client kubernetes.Interface }

// Logs implements LogSource.
func (p PodLogs) Logs(ctx context.Context, ns, pod, container string, tail int64) ([]byte, error) {
	req := p.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &tail})
	return req.DoRaw(ctx)
}

// Options configure Gather.
type Options struct {
	Inventory *inventory.Inventory
	Reader    verify.Reader
	// Release is where the installed RHOAI release keeps MaaS (zero: 3.5
	// with the inventory's names); the verify and doctor reports use it.
	Release release.Release
	// Logs reads pod logs; nil skips them.
	Logs LogSource
	// Output is the archive path. Default ./maasctl-gather-<UTC time>.tar.gz.
	Output string
	// DebugLogs are files to include (maasctl --log-file outputs), scrubbed.
	DebugLogs []string
	// Secrets are extra values to scrub wherever they appear (never
	// written).
	Secrets []string
	// TailLines bounds each container log. Default 500.
	TailLines int64
	// ToolVersion is recorded in README.txt.
	ToolVersion string
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Result describes the archive written.
type Result struct {
	Path string `json:"path"`
	// Files are the archive's file names, sorted.
	Files []string `json:"files"`
	// Problems are the parts that could not be collected (also in
	// errors.txt inside the archive).
	Problems []string `json:"problems,omitempty"`
}

// kindSpec is one kind to collect, in the namespaces given (nil = all
// namespaces for namespaced kinds; cluster-scoped kinds use "").
type kindSpec struct {
	gvk schema.GroupVersionKind
	ns  []string
	// sel is a label selector; name keeps only objects with these names.
	names []string
}

func gvk(group, version, kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
}

// namespaces returns the namespaces of the deployment, sorted.
func namespaces(inv *inventory.Inventory) []string {
	set := map[string]bool{
		inv.Database.Namespace: true, inv.Database.Operator.Namespace: true, inv.Gateway.Namespace: true,
		inv.Kuadrant.Namespace: true, inv.Kuadrant.OperatorNamespace: true, inv.DBConfig.Namespace: true,
		inv.RHOAI.ApplicationsNamespace: true, inv.RHOAI.MaaSNamespace: true, inv.RHOAI.MaaSAPINamespace: true,
		StateNamespace: true,
	}
	for _, o := range inv.Operators {
		set[o.Namespace] = true
	}
	for _, m := range inv.ExternalModels {
		set[m.Namespace] = true
	}
	var out []string
	for n := range set {
		if n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func operatorNamespaces(inv *inventory.Inventory) []string {
	set := map[string]bool{inv.Database.Operator.Namespace: true, inv.Kuadrant.OperatorNamespace: true}
	for _, o := range inv.Operators {
		set[o.Namespace] = true
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func kinds(inv *inventory.Inventory) []kindSpec {
	nss := namespaces(inv)
	ops := operatorNamespaces(inv)
	return []kindSpec{
		{gvk: gvk("", "v1", "Namespace"), ns: []string{""}, names: nss},
		{gvk: gvk("config.openshift.io", "v1", "ClusterVersion"), ns: []string{""}},
		{gvk: gvk("config.openshift.io", "v1", "Ingress"), ns: []string{""}},
		{gvk: verify.DSCGVK, ns: []string{""}},
		{gvk: verify.DSCIGVK, ns: []string{""}},
		{gvk: gvk("components.platform.opendatahub.io", "v1alpha1", "AIGateway"), ns: []string{""}},
		{gvk: verify.GatewayClassGVK, ns: []string{""}},
		{gvk: gvk("cert-manager.io", "v1", "ClusterIssuer"), ns: []string{""}},
		{gvk: gvk("operator.openshift.io", "v1", "LeaderWorkerSetOperator"), ns: []string{""}},
		{gvk: gvk("operators.coreos.com", "v1alpha1", "Subscription"), ns: ops},
		{gvk: verify.CSVGVK, ns: ops},
		{gvk: gvk("operators.coreos.com", "v1alpha1", "InstallPlan"), ns: ops},
		{gvk: gvk("operators.coreos.com", "v1", "OperatorGroup"), ns: ops},
		{gvk: gvk("postgresql.cnpg.io", "v1", "Cluster"), ns: []string{inv.Database.Namespace}},
		{gvk: verify.CertificateGVK, ns: []string{inv.Gateway.Namespace}},
		{gvk: gvk("cert-manager.io", "v1", "CertificateRequest"), ns: []string{inv.Gateway.Namespace}},
		{gvk: verify.GatewayGVK, ns: []string{inv.Gateway.Namespace}},
		{gvk: verify.HTTPRouteGVK, ns: nil},
		{gvk: verify.RouteGVK, ns: []string{inv.Gateway.Namespace}},
		{gvk: verify.KuadrantGVK, ns: nil},
		{gvk: verify.AuthorinoGVK, ns: nil},
		{gvk: verify.AuthPolicyGVK, ns: nil},
		{gvk: verify.TokenRateLimitPolicyGVK, ns: nil},
		{gvk: verify.ExternalProviderGVK, ns: nil},
		{gvk: verify.ExternalModelGVK, ns: nil},
		{gvk: release.LegacyExternalModelGVK, ns: nil},
		{gvk: verify.MaaSModelRefGVK, ns: nil},
		{gvk: verify.MaaSAuthPolicyGVK, ns: nil},
		{gvk: verify.MaaSSubscriptionGVK, ns: nil},
		{gvk: gvk("opendatahub.io", "v1alpha", "OdhDashboardConfig"), ns: []string{inv.RHOAI.ApplicationsNamespace}},
		{gvk: verify.DeploymentGVK, ns: nss},
		{gvk: verify.PodGVK, ns: nss},
		{gvk: verify.ServiceGVK, ns: nss},
		{gvk: verify.EndpointSliceGVK, ns: nss},
		{gvk: verify.SecretGVK, ns: nss},
		{gvk: verify.ConfigMapGVK, ns: []string{StateNamespace}},
		{gvk: verify.ConfigMapGVK, ns: []string{"openshift-monitoring"}, names: []string{"cluster-monitoring-config"}},
		{gvk: gvk("coordination.k8s.io", "v1", "Lease"), ns: []string{StateNamespace}},
	}
}

// archive collects files in memory, scrubbing every one.
type archive struct {
	files    map[string][]byte
	secrets  []string
	problems []string
}

func (a *archive) add(name string, data []byte) {
	a.files[name] = []byte(Scrub(string(data), a.secrets...))
}

// addOwn adds a file maasctl wrote itself from fixed text (the README),
// unscrubbed: its words about what is scrubbed ("bearer tokens") would
// otherwise be taken for secrets.
func (a *archive) addOwn(name string, data []byte) { a.files[name] = data }

func (a *archive) problem(format string, args ...any) {
	a.problems = append(a.problems, Scrub(fmt.Sprintf(format, args...), a.secrets...))
}

// Gather collects the archive and writes it to o.Output (mode 0600). Parts
// that cannot be read are listed in errors.txt and Result.Problems; only a
// failure to write the archive is an error.
func Gather(ctx context.Context, o Options) (*Result, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.TailLines <= 0 {
		o.TailLines = 500
	}
	now := o.Now().UTC()
	if o.Output == "" {
		o.Output = "maasctl-gather-" + now.Format("20060102T150405Z") + ".tar.gz"
	}
	a := &archive{files: map[string][]byte{}, secrets: o.Secrets}
	all := gatherObjects(ctx, a, o)
	a.add("conditions.txt", conditionsTable(all))
	gatherEvents(ctx, a, o)
	if cps := checkpoints(all); cps != nil {
		b, _ := yaml.Marshal(cps)
		a.add("maasctl/checkpoints.yaml", b)
	} else {
		a.problem("ConfigMap %s/%s not found (maasctl never ran against this cluster?)", StateNamespace, CheckpointsConfigMap)
	}
	if o.Logs != nil {
		gatherLogs(ctx, a, o, all)
	}
	reports(ctx, a, o)
	for _, p := range o.DebugLogs {
		b, err := os.ReadFile(p)
		if err != nil {
			a.problem("debug log %s: %v", p, err)
			continue
		}
		a.add("debug/"+filepath.Base(p), b)
	}
	a.addOwn("README.txt", []byte(readme(o, now)))
	if len(a.problems) > 0 {
		a.add("errors.txt", []byte(strings.Join(a.problems, "\n")+"\n"))
	}
	top := "maasctl-gather-" + now.Format("20060102T150405Z")
	if err := write(o.Output, top, a.files, now); err != nil {
		return nil, err
	}
	res := &Result{Path: o.Output, Problems: a.problems}
	for n := range a.files {
		res.Files = append(res.Files, path.Join(top, n))
	}
	sort.Strings(res.Files)
	return res, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// checkpoints are the run's checkpoints by key (step ID with "/" as "."):
// the checkpoints ConfigMap's, and those the run record's shards carry
// (data key checkpoint.json, which wins: steps.Record.CarryCheckpoint).
// nil when neither exists.
func checkpoints(all []*unstructured.Unstructured) map[string]string {
	var out map[string]string
	if cm := find(all, "ConfigMap", StateNamespace, CheckpointsConfigMap); cm != nil {
		out, _, _ = unstructured.NestedStringMap(cm.Object, "data")
		if out == nil {
			out = map[string]string{}
		}
	}
	for _, u := range all {
		if u.GetKind() != "ConfigMap" || u.GetNamespace() != StateNamespace {
			continue
		}
		v, ok, _ := unstructured.NestedString(u.Object, "data", "checkpoint.json")
		if !ok {
			continue
		}
		var p struct {
			Step string `json:"step"`
		}
		if json.Unmarshal([]byte(v), &p) != nil || p.Step == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.ReplaceAll(p.Step, "/", ".")] = v
	}
	return out
}

func find(l []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	for _, u := range l {
		if u.GetKind() == kind && u.GetNamespace() == ns && u.GetName() == name {
			return u
		}
	}
	return nil
}

// objectPath is objects/<namespace or _cluster>/<kind>.<group>/<name>.yaml.
func objectPath(u *unstructured.Unstructured) string {
	ns := u.GetNamespace()
	if ns == "" {
		ns = "_cluster"
	}
	kind := strings.ToLower(u.GetKind())
	if g := u.GroupVersionKind().Group; g != "" {
		kind += "." + g
	}
	return path.Join("objects", ns, kind, u.GetName()+".yaml")
}

// gatherLogs reads the last lines of every container of the pods in the
// operator namespaces, the Kuadrant namespace and the maas-api namespace.
func gatherLogs(ctx context.Context, a *archive, o Options, all []*unstructured.Unstructured) {
	want := map[string]bool{o.Inventory.RHOAI.MaaSAPINamespace: true, o.Inventory.Kuadrant.Namespace: true, o.Inventory.Database.Namespace: true}
	want[o.Release.MaaSAPINamespace(o.Inventory)] = true // RHOAI 3.3/3.4 run maas-api in the applications namespace
	for _, ns := range operatorNamespaces(o.Inventory) {
		want[ns] = true
	}
	for _, p := range all {
		if p.GetKind() != "Pod" || !want[p.GetNamespace()] {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(p.Object, "spec", "containers")
		for _, c := range cs {
			m, _ := c.(map[string]any)
			name, _ := m["name"].(string)
			b, err := o.Logs.Logs(ctx, p.GetNamespace(), p.GetName(), name, o.TailLines)
			if err != nil {
				a.problem("logs of %s/%s container %s: %v", p.GetNamespace(), p.GetName(), name, err)
				continue
			}
			a.add(path.Join("logs", p.GetNamespace(), p.GetName(), name+".log"), b)
		}
	}
}

// reports adds the read-only verify checks and doctor findings.
func reports(ctx context.Context, a *archive, o Options) {
	rep, _, err := verify.Run(ctx, verify.Options{Inventory: o.Inventory, Reader: o.Reader, Release: o.Release})
	if err != nil {
		a.problem("verify: %v", err)
	} else {
		var b bytes.Buffer
		_ = rep.WriteJSON(&b)
		a.add("verify.json", b.Bytes())
	}
	drep, err := doctor.Run(ctx, doctor.Options{Inventory: o.Inventory, Reader: o.Reader, Release: o.Release})
	if err != nil {
		a.problem("doctor: %v", err)
		return
	}
	var b bytes.Buffer
	_ = drep.WriteJSON(&b)
	a.add("doctor.json", b.Bytes())
}

func readme(o Options, now time.Time) string {
	return fmt.Sprintf(`maasctl gather %s
collected: %s
tool version: %s

objects/     every object of the deployment as YAML; Secrets keep only their
             keys ("<redacted: N bytes>"), managedFields and last-applied
             annotations are dropped, secret-looking env values are removed
conditions.txt  status phase and conditions of every collected object
events/      core/v1 events per namespace
logs/        last %d lines of operator, Kuadrant, database and maas-api
             containers (missing when the API server cannot reach them; see
             errors.txt)
maasctl/     maasctl's checkpoints (no secrets are ever stored there)
verify.json  read-only verify checks (codes MAAS-V...)
doctor.json  doctor findings (codes MAAS-D...)
debug/       debug logs given with --debug-log
errors.txt   what could not be collected

Every file is scrubbed of API keys (sk-oai-...), bearer tokens, Vault tokens
and passwords in database URLs.
`, now.Format(time.RFC3339), now.Format(time.RFC3339), orDev(o.ToolVersion), o.TailLines)
}

func orDev(v string) string {
	if v == "" {
		return "dev"
	}
	return v
}

// write creates the tar.gz at out with every file under top/.
func write(out, top string, files map[string][]byte, now time.Time) (err error) {
	f, err := os.OpenFile(out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create archive %s: %w", out, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close archive %s: %w", out, cerr)
		}
	}()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b := files[n]
		if err := tw.WriteHeader(&tar.Header{Name: path.Join(top, n), Mode: 0o600, Size: int64(len(b)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("write archive %s: %w", out, err)
		}
		if _, err := io.Copy(tw, bytes.NewReader(b)); err != nil {
			return fmt.Errorf("write archive %s: %w", out, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write archive %s: %w", out, err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("write archive %s: %w", out, err)
	}
	return nil
}

var (
	dbURLPassword = regexp.MustCompile(`((?:postgres|postgresql|mysql|mongodb)://[^:/@\s"']+:)[^@\s"']+@`)
	vaultToken    = regexp.MustCompile(`\bhv[sbr]\.[A-Za-z0-9_\-]{20,}`)
	tokenField    = regexp.MustCompile(`(?im)((?:^|[^a-z])"?(?:x-vault-token|vault_token|client_token|password|passwd|api[-_]?key|token)"?[ \t]*[:=][ \t]*"?)([^"\s,}<]{6,})`)
)

// Scrub removes secret-looking values from text: sk-oai- keys, bearer
// tokens, Vault tokens (hvs./hvb./hvr.), passwords in database URLs,
// "password"/"token"/"api_key" style fields, and the given values.
func Scrub(s string, secrets ...string) string {
	s = verify.Scrub(s, secrets...)
	s = dbURLPassword.ReplaceAllString(s, "${1}<redacted>@")
	s = vaultToken.ReplaceAllString(s, "<redacted-vault-token>")
	return tokenField.ReplaceAllString(s, "${1}<redacted>")
}

// gatherObjects adds the deployment's objects as redacted YAML and
// returns them.
func gatherObjects(ctx context.Context, a *archive, o Options) []*unstructured.Unstructured {
	var all []*unstructured.Unstructured
	for _, k := range kinds(o.Inventory) {
		nss := k.ns
		if nss == nil {
			nss = []string{""}
		}
		for _, ns := range nss {
			l, err := o.Reader.List(ctx, k.gvk, ns, "")
			if err != nil {
				if kube.IsNotServed(err) {
					a.problem("%s: not served by the API server (skipped)", k.gvk.Kind)
					break
				}
				a.problem("list %s in %q: %v", k.gvk.Kind, ns, err)
				continue
			}
			for _, u := range l {
				if len(k.names) > 0 && !contains(k.names, u.GetName()) {
					continue
				}
				all = append(all, u)
				b, err := yaml.Marshal(Redact(u).Object)
				if err != nil {
					a.problem("encode %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
					continue
				}
				a.add(objectPath(u), b)
			}
		}
	}
	return all
}

// gatherEvents adds the events of the namespaces involved.
func gatherEvents(ctx context.Context, a *archive, o Options) {
	for _, ns := range namespaces(o.Inventory) {
		evs, err := o.Reader.List(ctx, gvk("", "v1", "Event"), ns, "")
		if err != nil {
			a.problem("events in %s: %v", ns, err)
			continue
		}
		if len(evs) > 0 {
			a.add("events/"+ns+".txt", eventsText(evs))
		}
	}
}
