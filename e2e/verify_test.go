package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/e2e/dataplane"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

const (
	modelNS      = "llm-coding-assistant"
	maasNS       = "models-as-a-service"
	modelName    = "qwen35-9b-coder"
	defaultSub   = "llama-coder-default"
	accessPolicy = "llama-coder-access"
)

// plane is the simulated data plane of one cluster plus what the tests
// need to talk to it.
type plane struct {
	*dataplane.Server
	ca    string
	token string // the kubeconfig user's bearer token (admin)
	hc    *http.Client
}

func startPlane(t *testing.T, c *cluster) *plane {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, auth, err := dataplane.ForCluster(c.env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	pg := c.env.Postgres()
	if pg == nil {
		t.Fatal("the local control plane runs no PostgreSQL for maas-api's database")
	}
	// maas-api's DB_CONNECTION_URL names the CNPG -rw Service; the
	// stand-in sends it to this control plane's PostgreSQL.
	o := dataplane.Options{Reader: r, Auth: auth, Hosts: []string{appsHost}, DBHosts: dataplane.DBHostsFor(pg.Addr())}
	if c.sim != nil {
		o.Authorino = authorinoFor(t, c)
	}
	s, err := dataplane.Start(ctx, o)
	if err != nil {
		t.Fatalf("start data plane: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ca, err := s.WriteCAFile(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := verify.HTTPClient(verify.DataPathOptions{CAFile: ca, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &plane{Server: s, ca: ca, token: c.env.RESTConfig().BearerToken, hc: hc}
}

// authorinoFor makes the data-path stand-in of c ask the real Authorino
// for every model call's auth decision, and serves maas-api's internal
// endpoints under maas-api's Service name behind the control plane's
// ServiceProxy, with a certificate of the CA Authorino trusts.
func authorinoFor(t *testing.T, c *cluster) *dataplane.AuthorinoOptions {
	t.Helper()
	proxy, ca := c.env.ServiceProxy(), c.env.ServiceCA()
	if proxy == nil || ca == nil {
		t.Fatal("the real Kuadrant runs without its ServiceProxy or ServiceCA")
	}
	inv := inventory.Default()
	svc := "maas-api." + inv.RHOAI.MaaSAPINamespace + ".svc"
	cert, err := ca.Issue(svc+".cluster.local", svc)
	if err != nil {
		t.Fatal(err)
	}
	return &dataplane.AuthorinoOptions{
		Addr:        func() (string, bool) { return c.env.ExposedAddr(testenv.AuthorinoServer) },
		ServiceCA:   c.sim.ServiceCAPEM(),
		MaaSAPICert: cert,
		Route:       proxy.Route,
	}
}

// keys returns maas-api's stored keys (its api_keys table).
func (p *plane) keys(t *testing.T) []*dataplane.Key {
	t.Helper()
	k, err := p.KeysErr(context.Background())
	if err != nil {
		t.Fatalf("read maas-api's keys: %v", err)
	}
	return k
}

// call sends one request to the data plane.
func (p *plane) call(t *testing.T, method, path, bearer, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, p.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// waitList waits, by list and watch, until pred holds for the objects of
// kind gvk in ns matching selector.
func waitList(t *testing.T, c *cluster, gvk schema.GroupVersionKind, ns, selector string, timeout time.Duration, what string, pred func([]*unstructured.Unstructured) bool) {
	t.Helper()
	ri, _, err := c.clients.Resource(gvk, ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return ri.Watch(ctx, o)
		},
	}
	check := func(store cache.Store) bool {
		var l []*unstructured.Unstructured
		for _, x := range store.List() {
			l = append(l, x.(*unstructured.Unstructured))
		}
		return pred(l)
	}
	var store cache.Store
	_, err = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, func(s cache.Store) (bool, error) {
		store = s
		return check(s), nil
	}, func(watch.Event) (bool, error) { return check(store), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func readyEndpoints(l []*unstructured.Unstructured) int {
	n := 0
	for _, es := range l {
		eps, _, _ := unstructured.NestedSlice(es.Object, "endpoints")
		for _, e := range eps {
			m, _ := e.(map[string]any)
			c, _ := m["conditions"].(map[string]any)
			if r, ok := c["ready"].(bool); !ok || r {
				n++
			}
		}
	}
	return n
}

// runLlamaCoder makes the fixture's Service llm-coding-assistant/llama-coder
// serve: a Deployment whose kwok pod becomes a ready endpoint (replicas 1),
// or none (replicas 0, the model server down).
func runLlamaCoder(t *testing.T, c *cluster, replicas int32) {
	t.Helper()
	ctx := context.Background()
	deps := c.clients.Kube.AppsV1().Deployments(modelNS)
	lbl := map[string]string{"app": "llama-coder"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "llama-coder", Namespace: modelNS, Labels: lbl},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "llama-server", Image: "registry.invalid/llama.cpp/server:latest",
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}}},
			},
		},
	}
	if _, err := deps.Create(ctx, d, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
		if _, err := deps.Patch(ctx, "llama-coder", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	waitList(t, c, verify.EndpointSliceGVK, modelNS, "kubernetes.io/service-name=llama-coder", 2*time.Minute,
		fmt.Sprintf("llama-coder with %d ready endpoint(s)", replicas),
		func(l []*unstructured.Unstructured) bool { return readyEndpoints(l) == int(replicas) })
}

// verifyRun runs maasctl verify -o json and parses the report.
func verifyRun(t *testing.T, c *cluster, p *plane, extra ...string) (*verify.Report, run) {
	t.Helper()
	args := []string{"verify", "-o", "json"}
	if p != nil {
		args = append(args, "--endpoint", p.URL(), "--ca-file", p.ca)
	} else {
		args = append(args, "--live-only")
	}
	r := c.maasctl(t, append(args, extra...)...)
	var rep verify.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("verify output is not a JSON report (exit %d): %v\nstdout:\n%s\nstderr:\n%s", r.exit, err, r.stdout, r.stderr)
	}
	return &rep, r
}

// expectVerifyFails asserts exit 1 and a failed check code whose class or
// cause contains want.
func expectVerifyFails(t *testing.T, rep *verify.Report, r run, code, want string) {
	t.Helper()
	if r.exit != 1 || rep.Passed {
		t.Fatalf("verify exit %d passed=%v, want exit 1\n%s", r.exit, rep.Passed, r.stdout)
	}
	for _, ch := range rep.Failed() {
		if ch.Code == code && (strings.Contains(ch.Cause, want) || ch.Class == want) {
			if ch.Fix == "" {
				t.Errorf("%s failed without a fix", code)
			}
			if !strings.Contains(r.stderr, code) {
				t.Errorf("stderr does not name %s: %s", code, r.stderr)
			}
			return
		}
	}
	t.Fatalf("no failed %s mentioning %q; failed: %v\n%s", code, want, rep.FailedCodes(), r.stdout)
}

func patchObject(t *testing.T, c *cluster, gvk schema.GroupVersionKind, ns, name, patch string) {
	t.Helper()
	ri, _, err := c.clients.Resource(gvk, ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ri.Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "e2e-break"}); err != nil {
		t.Fatalf("patch %s %s/%s: %v", gvk.Kind, ns, name, err)
	}
}

func phaseIs(phase string) func(l []*unstructured.Unstructured) bool {
	return func(l []*unstructured.Unstructured) bool {
		for _, o := range l {
			if p, _, _ := unstructured.NestedString(o.Object, "status", "phase"); p != phase {
				return false
			}
			if g, _, _ := unstructured.NestedInt64(o.Object, "status", "observedGeneration"); g != 0 && g < o.GetGeneration() {
				return false
			}
		}
		return len(l) > 0
	}
}

// TestVerifyDoctorGather is the acceptance test of issue 4 on one local
// install: verify passes on the healthy install (the probe subscription
// gets 429 and is deleted, every key verify minted is revoked); then each
// broken state makes verify fail with the right code and doctor name the
// cause and the fix, and is repaired; then doctor names more breaks, each
// fix as printed repairing it (doctorNamesBreaks); finally gather's archive
// holds no secret. No key or token appears in the output of install,
// verify, doctor and gather outside doctorNamesBreaks (whose runs are not
// collected).
func TestVerifyDoctorGather(t *testing.T) {
	parallel(t)
	c := newCluster(t, clusterOptions{})
	logFile := filepath.Join(c.dir, "maasctl.log")
	inst := c.maasctl(t, "install", "-o", "json", "--log-file", logFile)
	if inst.exit != 0 {
		t.Fatalf("install exit %d\nstdout:\n%s\nstderr:\n%s", inst.exit, inst.stdout, inst.stderr)
	}
	runLlamaCoder(t, c, 1)
	p := startPlane(t, c)
	var outputs []run
	defer func() { noSecretsInOutputs(t, c, p, outputs) }()

	t.Run("healthy", func(t *testing.T) {
		rep, r := verifyRun(t, c, p, "--probe-quota", "--probe-body-size", "64Ki", "--database")
		outputs = append(outputs, r)
		if r.exit != 0 || !rep.Passed {
			t.Fatalf("verify exit %d on a healthy install:\n%s\n%s", r.exit, r.stdout, r.stderr)
		}
		seen := map[string]verify.Result{}
		for _, ch := range rep.Checks {
			if ch.Result != verify.Pass {
				t.Errorf("%s %s: %s", ch.Code, ch.Result, ch.Detail)
			}
			seen[ch.Code] = ch.Result
		}
		for _, info := range verify.Catalogue {
			if _, ok := seen[info.Code]; !ok {
				t.Errorf("check %s (%s) did not run", info.Code, info.Title)
			}
		}
		// The probe key and the verify key were revoked, and proven
		// revoked: each DELETE is followed by a 401.
		keys := p.keys(t)
		if len(keys) != 2 {
			t.Errorf("verify minted %d keys, want 2 (verify key and probe key)", len(keys))
		}
		for _, k := range keys {
			if k.Status != "revoked" {
				t.Errorf("key %s (%s, subscription %s) is %s after verify", k.ID, k.Name, k.Subscription, k.Status)
			}
		}
		deletes := 0
		for _, rq := range p.Requests() {
			if rq.Method == http.MethodDelete && strings.HasPrefix(rq.Path, "/maas-api/v1/api-keys/") && rq.Status == http.StatusOK {
				deletes++
			}
		}
		if deletes != 2 {
			t.Errorf("%d successful DELETE /maas-api/v1/api-keys/{id}, want 2", deletes)
		}
		// The model calls' auth was Authorino's: its AuthConfig (made by
		// the real Kuadrant operator from maas-gateway-auth) called
		// maas-api's internal endpoints through the Service proxy.
		calls := map[string]int{}
		for _, rq := range p.Requests() {
			if strings.HasPrefix(rq.Path, "/internal/v1/") && rq.Method == http.MethodPost && rq.Status == http.StatusOK {
				calls[rq.Path]++
			}
		}
		for _, want := range []string{"/internal/v1/api-keys/validate", "/internal/v1/subscriptions/select"} {
			if calls[want] == 0 {
				t.Errorf("Authorino never called maas-api's %s (internal calls: %v)", want, calls)
			}
		}
		// maas-api's routes are the policy's too: the refusals carry
		// Authorino's reason header (the stand-in's own 401 has none).
		for _, tc := range []struct {
			auth   string
			status int
			reason string
		}{
			{"", http.StatusUnauthorized, "Authentication required"},
			// Authorino's own reason: the policy's x-ext-auth-reason
			// expression reads subscription-info, which a path without
			// a model never fetches.
			{"Bearer " + dataplane.KeyPrefix + "not-a-key", http.StatusForbidden, "Unauthorized"},
		} {
			req, err := http.NewRequest(http.MethodGet, p.URL()+"/v1/models", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := p.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.status || resp.Header.Get("X-Ext-Auth-Reason") != tc.reason {
				t.Errorf("GET /v1/models with %q: HTTP %d, X-Ext-Auth-Reason %q; want %d from Authorino with reason %q",
					strings.SplitN(tc.auth, "-", 3)[0], resp.StatusCode, resp.Header.Get("X-Ext-Auth-Reason"), tc.status, tc.reason)
			}
		}
		subs, err := c.clients.Dynamic.Resource(schema.GroupVersionResource{Group: "maas.opendatahub.io", Version: "v1alpha1", Resource: "maassubscriptions"}).
			Namespace(maasNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range subs.Items {
			if strings.HasPrefix(s.GetName(), verify.ProbeSubscriptionPrefix) && s.GetDeletionTimestamp() == nil {
				t.Errorf("probe subscription %s left behind", s.GetName())
			}
		}
		d, dr := doctorRun(t, c, p)
		outputs = append(outputs, dr)
		if dr.exit != 0 || len(d.Errors()) > 0 {
			t.Errorf("doctor exit %d on a healthy install:\n%s", dr.exit, dr.stdout)
		}
	})

	installVerify := func(t *testing.T) run {
		t.Helper()
		r := c.maasctl(t, "install", "-o", "json", "--log-file", logFile, "--verify-endpoint", p.URL(), "--verify-ca-file", p.ca)
		outputs = append(outputs, r)
		return r
	}

	t.Run("install verifies the request path", func(t *testing.T) {
		before := len(p.keys(t))
		r := installVerify(t)
		if r.exit != 0 {
			t.Fatalf("install --verify-endpoint: exit %d\n%s\n%s", r.exit, r.stdout, r.stderr)
		}
		if done := strings.Join(stepsWith(r.events, "done"), " "); !strings.Contains(done, "verify/status") {
			t.Errorf("verify/status did not run; done: %s", done)
		}
		chat := false
		for _, ev := range r.events {
			chat = chat || (ev.Step == "verify/status" && strings.Contains(ev.Message, verify.CodeChat))
		}
		if !chat {
			t.Errorf("no %s progress from the verify step", verify.CodeChat)
		}
		keys := p.keys(t)
		if len(keys) != before+1 || keys[0].Status != "revoked" {
			t.Errorf("install's verify key: %d keys (was %d), newest %+v", len(keys), before, keys[0])
		}
	})

	t.Run("model server down", func(t *testing.T) {
		runLlamaCoder(t, c, 0)
		rep, r := verifyRun(t, c, p)
		outputs = append(outputs, r)
		expectVerifyFails(t, rep, r, verify.CodeChat, string(verify.ClassUnavailable))
		if ir := installVerify(t); ir.exit != 1 || !strings.Contains(ir.stdout+ir.stderr, verify.CodeChat) {
			t.Errorf("install --verify-endpoint with the model server down: exit %d, want 1 naming %s\n%s", ir.exit, verify.CodeChat, ir.stderr)
		}
		outputs = append(outputs, expectFinding(t, c, p, doctorFinding{
			// The Deployment behind the Service is scaled to 0: the fix
			// that converges is scaling it up (before: "oc logs" of pods
			// that do not exist).
			code: "MAAS-D017", object: "Service llm-coding-assistant/llama-coder", evidence: "Deployment llama-coder: 0 of 0 replicas ready",
			fix: "oc scale deployment llama-coder -n llm-coding-assistant --replicas=1",
		}))
		runLlamaCoder(t, c, 1)
	})

	t.Run("auth policy does not match the user's groups", func(t *testing.T) {
		patchObject(t, c, verify.MaaSAuthPolicyGVK, maasNS, accessPolicy, `{"spec":{"subjects":{"groups":[{"name":"developers"}]}}}`)
		waitList(t, c, verify.MaaSAuthPolicyGVK, maasNS, "", time.Minute, "MaaSAuthPolicy Active", phaseIs("Active"))
		rep, r := verifyRun(t, c, p)
		outputs = append(outputs, r)
		expectVerifyFails(t, rep, r, verify.CodeChat, "no MaaSAuthPolicy grants caller admin")
		outputs = append(outputs, expectFinding(t, c, p, doctorFinding{
			code: "MAAS-D009", object: "MaaSModelRef llm-coding-assistant/qwen35-9b-coder", evidence: "groups developers",
			fix: "maasctl install   (restores the inventory's subjects)",
		}))
		patchObject(t, c, verify.MaaSAuthPolicyGVK, maasNS, accessPolicy, `{"spec":{"subjects":{"groups":[{"name":"system:authenticated"}]}}}`)
		waitList(t, c, verify.MaaSAuthPolicyGVK, maasNS, "", time.Minute, "MaaSAuthPolicy Active", phaseIs("Active"))
	})

	// The field case behind the step's outbound trust: without
	// SSL_CERT_FILE on its Deployment, the real Authorino cannot verify
	// maas-api's service-CA certificate, its API key validation call fails,
	// and every model call with a valid key is refused. maasctl install
	// puts the trust back.
	t.Run("Authorino does not trust the service CA", func(t *testing.T) {
		inv := inventory.Default()
		since := time.Now()
		ri, _, err := c.clients.Resource(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, inv.Kuadrant.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Patch(context.Background(), inv.Kuadrant.AuthorinoName, types.JSONPatchType,
			[]byte(`[{"op":"remove","path":"/spec/template/spec/containers/0/env"}]`), metav1.PatchOptions{FieldManager: "e2e-break"}); err != nil {
			t.Fatalf("remove the Authorino Deployment's env: %v", err)
		}
		waitAuthorinoRestart(t, c, p, since)
		rep, r := verifyRun(t, c, p)
		outputs = append(outputs, r)
		// The live check names the cause; the data path shows it for real:
		// the chat call with verify's own fresh key is refused by the real
		// Authorino, whose call to maas-api failed its TLS handshake.
		expectVerifyFails(t, rep, r, verify.CodeAuthorinoTrust, "cannot verify maas-api's certificate")
		if !slices.Contains(rep.FailedCodes(), verify.CodeChat) {
			t.Errorf("the chat call with a valid key passed while Authorino does not trust maas-api's CA; failed: %v", rep.FailedCodes())
		}
		outputs = append(outputs, expectFinding(t, c, p, doctorFinding{
			code: "MAAS-D036", object: "Deployment kuadrant-system/authorino", evidence: "container authorino sets no SSL_CERT_FILE",
			fix: "maasctl install   (mounts the service CA bundle in the Authorino CR and sets SSL_CERT_FILE on its Deployment)",
		}))
		since = time.Now()
		ir := c.maasctl(t, "install", "-o", "json", "--log-file", logFile)
		outputs = append(outputs, ir)
		if ir.exit != 0 {
			t.Fatalf("install after the env was removed: exit %d\n%s", ir.exit, ir.stderr)
		}
		if done := strings.Join(stepsWith(ir.events, "done"), " "); !strings.Contains(done, "platform/authorino-tls") {
			t.Errorf("install did not redo platform/authorino-tls; done: %s", done)
		}
		waitAuthorinoRestart(t, c, p, since)
		// The restarted Authorino loads the AuthConfigs anew and the
		// Kuadrant operator then marks the AuthPolicies Enforced again: a
		// read in between sees MAAS-V010 "waiting for the following
		// components to sync" (a CI check, 2026-12-07). verify waits that
		// out itself (--settle; 2m, the bound of this test's own retry
		// before verify waited), so one run must pass.
		rep, r = verifyRun(t, c, p, "--settle", "2m")
		outputs = append(outputs, r)
		if strings.Contains(r.stderr, "waiting for Kuadrant") {
			t.Logf("verify after install restored the trust waited for Kuadrant:\n%s", r.stderr)
		}
		if r.exit != 0 || !rep.Passed {
			t.Fatalf("verify exit %d after install restored the trust:\n%s", r.exit, r.stdout)
		}
	})

	t.Run("subscription exhausted", func(t *testing.T) {
		patchObject(t, c, verify.MaaSSubscriptionGVK, maasNS, defaultSub,
			`{"spec":{"modelRefs":[{"name":"`+modelName+`","namespace":"`+modelNS+`","tokenRateLimits":[{"limit":40,"window":"1h"}]}]}}`)
		waitList(t, c, verify.MaaSSubscriptionGVK, maasNS, "", time.Minute, "MaaSSubscription Active", phaseIs("Active"))
		// A user's own key uses up the 40 tokens of the hour.
		st, b := p.call(t, http.MethodPost, "/maas-api/v1/api-keys", p.token, `{"name":"laptop","expiresIn":"1h","subscription":"`+defaultSub+`"}`)
		if st != http.StatusCreated {
			t.Fatalf("mint: HTTP %d %s", st, b)
		}
		var key struct{ ID, Key string }
		if err := json.Unmarshal(b, &key); err != nil {
			t.Fatal(err)
		}
		// The gateway policy's deny rules, decided by the real Authorino:
		// a valid key cannot mint keys, nor send the identity headers the
		// policy adds, while the same key lists the models.
		if st, b := p.call(t, http.MethodPost, "/maas-api/v1/api-keys", key.Key, `{"name":"minted-by-a-key"}`); st != http.StatusForbidden {
			t.Errorf("POST /maas-api/v1/api-keys with an API key: HTTP %d %s, want 403", st, b)
		}
		for hdr, want := range map[string]int{"": http.StatusOK, "X-MaaS-Username": http.StatusForbidden, "X-MaaS-Group": http.StatusForbidden} {
			req, err := http.NewRequest(http.MethodGet, p.URL()+"/v1/models", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+key.Key)
			if hdr != "" {
				req.Header.Set(hdr, "admin")
			}
			resp, err := p.hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != want || want == http.StatusForbidden && resp.Header.Get("X-Ext-Auth-Reason") == "" {
				t.Errorf("GET /v1/models with a valid key and header %q: HTTP %d (reason %q), want %d (403s from Authorino)", hdr, resp.StatusCode, resp.Header.Get("X-Ext-Auth-Reason"), want)
			}
		}
		var codes []int
		for i := 0; i < 10; i++ {
			st, _ := p.call(t, http.MethodPost, "/v1/chat/completions", key.Key,
				`{"model":"`+modelName+`","max_tokens":8,"messages":[{"role":"user","content":"write a haiku about ansible please"}]}`)
			codes = append(codes, st)
			if st == http.StatusTooManyRequests {
				break
			}
		}
		if codes[len(codes)-1] != http.StatusTooManyRequests {
			t.Fatalf("never limited: %v", codes)
		}
		rep, r := verifyRun(t, c, p)
		outputs = append(outputs, r)
		expectVerifyFails(t, rep, r, verify.CodeChat, "allows 40 tokens per 1h per user")
		outputs = append(outputs, expectFinding(t, c, p, doctorFinding{
			code: "MAAS-D010", object: "MaaSModelRef llm-coding-assistant/qwen35-9b-coder", evidence: "HTTP 429",
			fix: "raise tokenRateLimits",
		}), expectFinding(t, c, p, doctorFinding{
			code: "MAAS-D011", object: "MaaSSubscription models-as-a-service/llama-coder-default", evidence: "limit 40 tokens per 1h",
			fix: "oc patch maassubscription llama-coder-default",
		}))
		if st, _ := p.call(t, http.MethodDelete, "/maas-api/v1/api-keys/"+key.ID, p.token, ""); st != http.StatusOK {
			t.Errorf("revoke the test key: HTTP %d", st)
		}
		patchObject(t, c, verify.MaaSSubscriptionGVK, maasNS, defaultSub,
			`{"spec":{"modelRefs":[{"name":"`+modelName+`","namespace":"`+modelNS+`","tokenRateLimits":[{"limit":200000,"window":"1h"}]}]}}`)
		waitList(t, c, verify.MaaSSubscriptionGVK, maasNS, "", time.Minute, "MaaSSubscription Active", phaseIs("Active"))
	})

	t.Run("DB secret missing", func(t *testing.T) {
		if err := c.clients.Kube.CoreV1().Secrets("redhat-ai-gateway-infra").Delete(context.Background(), "maas-db-config", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		rep, r := verifyRun(t, c, p)
		outputs = append(outputs, r)
		expectVerifyFails(t, rep, r, verify.CodeDBConfig, "database URL")
		outputs = append(outputs, expectFinding(t, c, p, doctorFinding{
			code: "MAAS-D006", object: "Secret redhat-ai-gateway-infra/maas-db-config", evidence: "not found", fix: "maasctl install",
		}))
		// The fix doctor names: re-running the install re-creates it.
		again := c.maasctl(t, "install", "-o", "json", "--log-file", logFile)
		outputs = append(outputs, again)
		if again.exit != 0 {
			t.Fatalf("install after deleting maas-db-config: exit %d\n%s\n%s", again.exit, again.stdout, again.stderr)
		}
		if rep, r := verifyRun(t, c, p); r.exit != 0 {
			t.Errorf("verify after the fix failed: %v\n%s", rep.FailedCodes(), r.stdout)
		}
	})

	t.Run("gateway certificate missing", func(t *testing.T) {
		// The Certificate and its Secret are gone (deleted by hand, say):
		// the Gateway listener reports ResolvedRefs=False with reason
		// InvalidCertificateRef (gateway-api PR #1334; case B13).
		if err := deleteObject(c, verify.CertificateGVK, "openshift-ingress", "maas-default-gateway-cert"); err != nil {
			t.Fatal(err)
		}
		if err := c.clients.Kube.CoreV1().Secrets("openshift-ingress").Delete(context.Background(), "maas-gateway-tls", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitList(t, c, verify.GatewayGVK, "openshift-ingress", "", 2*time.Minute, "Gateway listener InvalidCertificateRef", func(l []*unstructured.Unstructured) bool {
			for _, g := range l {
				ls, _, _ := unstructured.NestedSlice(g.Object, "status", "listeners")
				for _, x := range ls {
					conds, _, _ := unstructured.NestedSlice(x.(map[string]any), "conditions")
					for _, y := range conds {
						cm := y.(map[string]any)
						if cm["type"] == "ResolvedRefs" && cm["status"] == "False" && cm["reason"] == "InvalidCertificateRef" {
							return true
						}
					}
				}
			}
			return false
		})
		rep, r := verifyRun(t, c, p)
		outputs = append(outputs, r)
		expectVerifyFails(t, rep, r, verify.CodeGatewayProgrammed, "certificate is not usable")
		mustContain(t, "verify output", r.stdout, "InvalidCertificateRef")
		outputs = append(outputs, expectFinding(t, c, p, doctorFinding{
			code: "MAAS-D003", object: "Gateway openshift-ingress/maas-default-gateway", evidence: "InvalidCertificateRef",
			fix: "maasctl install",
		}))
		// Re-running the install re-creates the Certificate; cert-manager
		// issues the Secret and the listener resolves.
		again := c.maasctl(t, "install", "-o", "json", "--log-file", logFile)
		outputs = append(outputs, again)
		if again.exit != 0 {
			t.Fatalf("install after deleting the Gateway certificate: exit %d\n%s", again.exit, failedSummary(again))
		}
		if rep, r := verifyRun(t, c, p); r.exit != 0 {
			t.Errorf("verify after the fix failed: %v\n%s", rep.FailedCodes(), r.stdout)
		}
	})

	t.Run("doctor names breaks", func(t *testing.T) { doctorNamesBreaks(t, c, p) })

	t.Run("gather", func(t *testing.T) {
		outputs = append(outputs, checkGather(t, c, p, logFile))
	})
}

// noSecretsInOutputs asserts that no maasctl output holds an API key the
// data plane issued, the cluster token, the Vault token or the database
// password.
func noSecretsInOutputs(t *testing.T, c *cluster, p *plane, outs []run) {
	t.Helper()
	secrets := append(p.IssuedKeys(), p.token, c.vaultToken)
	if pw := c.vault.Data(vaultMount, vaultPath)["password"]; pw != "" {
		secrets = append(secrets, pw)
	}
	if len(p.IssuedKeys()) == 0 {
		t.Error("no key was issued: the leak check would prove nothing")
	}
	var all bytes.Buffer
	for _, r := range outs {
		all.WriteString(r.stdout)
		all.WriteString(r.stderr)
	}
	for i, s := range secrets {
		if s != "" && strings.Contains(all.String(), s) {
			t.Errorf("secret #%d (%d chars) appears in maasctl output", i, len(s))
		}
	}
}

// deleteObject deletes one object of kind gvk.
func deleteObject(c *cluster, gvk schema.GroupVersionKind, ns, name string) error {
	ri, _, err := c.clients.Resource(gvk, ns)
	if err != nil {
		return err
	}
	return ri.Delete(context.Background(), name, metav1.DeleteOptions{})
}

// waitAuthorinoRestart waits until the real Authorino server was started
// for a new pod after since (its Deployment rolled out) and decides the
// data path's calls again: a keyless GET /v1/models is refused with
// Authorino's own reason, which it gives only once it has read the
// AuthConfigs (before, the stand-in's check finds no AuthConfig).
func waitAuthorinoRestart(t *testing.T, c *cluster, p *plane, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	last := "not started again"
	for {
		started := false
		for _, st := range c.env.OperatorStarts() {
			started = started || st.Component == testenv.AuthorinoServer && st.At.After(since)
		}
		if _, ok := c.env.ExposedAddr(testenv.AuthorinoServer); started && ok {
			resp, err := p.hc.Get(p.URL() + "/v1/models")
			if err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("X-Ext-Auth-Reason") == "Authentication required" {
					return
				}
				last = fmt.Sprintf("keyless GET /v1/models: HTTP %d, reason %q", resp.StatusCode, resp.Header.Get("X-Ext-Auth-Reason"))
			} else {
				last = err.Error()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Authorino did not decide calls again within 2m after %s (last: %s): %v", since.Format(time.RFC3339), last, c.env.OperatorStarts())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
