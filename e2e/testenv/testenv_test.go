package testenv

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// startEnv starts a control plane for t and stops it in t.Cleanup. When the
// binaries are not built it skips, or fails if MAASCTL_REQUIRE_TESTENV=1.
func startEnv(t *testing.T, opts Options) *Env {
	t.Helper()
	opts.Logf = t.Logf
	env, err := Start(t.Context(), opts)
	if errors.Is(err, ErrNotBuilt) {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but: %v", EnvRequire, err)
		}
		t.Skipf("skipping, local control plane not available: %v (set %s=1 to fail instead)", err, EnvRequire)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return env
}

// requireBinaries returns the default binary folder when it holds names;
// otherwise it skips t, or fails it with MAASCTL_REQUIRE_TESTENV=1.
func requireBinaries(t *testing.T, names ...string) string {
	t.Helper()
	bin, err := defaultBinDir()
	if err == nil {
		err = checkBinaries(bin, names...)
	}
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but: %v", EnvRequire, err)
		}
		t.Skipf("skipping, local control plane not available: %v (set %s=1 to fail instead)", err, EnvRequire)
	}
	return bin
}

func TestStart(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	env := startEnv(t, Options{})
	startWall := time.Since(t0)
	cfg := env.RESTConfig()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)

	t.Run("server version", func(t *testing.T) {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.37.2" {
			t.Errorf("server version %q, want v1.37.2", v.GitVersion)
		}
	})

	t.Run("CRDs", func(t *testing.T) {
		tests := []struct {
			name   string
			gvr    schema.GroupVersionResource
			served bool
		}{
			{"OLM ClusterServiceVersion", schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "clusterserviceversions"}, true},
			{"cert-manager Certificate", schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}, true},
			{"Gateway API HTTPRoute", schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}, true},
			{"OpenShift Route", schema.GroupVersionResource{Group: "route.openshift.io", Version: "v1", Resource: "routes"}, true},
			{"operator-owned CNPG Cluster is left to OLM (the catalog bundle)", schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}, false},
			{"operator-owned Kuadrant is left to OLM (the catalog bundle)", schema.GroupVersionResource{Group: "kuadrant.io", Version: "v1beta1", Resource: "kuadrants"}, false},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := dyn.Resource(tt.gvr).List(ctx, metav1.ListOptions{Limit: 1})
				switch {
				case tt.served && err != nil:
					t.Errorf("list %s: %v", tt.gvr, err)
				case !tt.served && !apierrors.IsNotFound(err):
					t.Errorf("list %s: got %v, want NotFound (not installed)", tt.gvr, err)
				}
			})
		}
	})

	t.Run("fixture", func(t *testing.T) {
		ing, err := dyn.Resource(schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "ingresses"}).Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d, _, _ := unstructured.NestedString(ing.Object, "spec", "domain"); d != "apps.openshift.example.com" {
			t.Errorf("Ingress cluster spec.domain %q, want apps.openshift.example.com", d)
		}
		ci, err := dyn.Resource(schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "clusterissuers"}).Get(ctx, "letsencrypt-production", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !hasCondition(ci, "Ready", "True") {
			t.Errorf("ClusterIssuer letsencrypt-production status %v, want Ready=True (written through /status)", ci.Object["status"])
		}
		cv, err := dyn.Resource(schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "clusterversions"}).Get(ctx, "version", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, _, _ := unstructured.NestedString(cv.Object, "status", "desired", "version"); v != "4.22.3" {
			t.Errorf("ClusterVersion status.desired.version %q, want 4.22.3", v)
		}
		sec, err := cs.CoreV1().Secrets("llm-coding-assistant").Get(ctx, "llama-coder-api-key", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(sec.Data["api-key"]) == 0 {
			t.Error("Secret llama-coder-api-key has no api-key")
		}
	})

	t.Run("Deployment becomes Available on the kwok node", func(t *testing.T) {
		dep := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example.com/web:1"}}},
				},
			},
		}
		t1 := time.Now()
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		ri := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace("default")
		err := waitFor(wctx, ri, "web", func(u *unstructured.Unstructured) (bool, error) {
			ready, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
			return hasCondition(u, "Available", "True") && ready == 2, nil
		})
		if err != nil {
			t.Fatalf("wait for Deployment web Available with 2 ready replicas: %v", err)
		}
		t.Logf("Deployment Available after %d ms", time.Since(t1).Milliseconds())
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != NodeName || p.Status.Phase != corev1.PodRunning {
				t.Errorf("pod %s on %q phase %s, want on %s Running", p.Name, p.Spec.NodeName, p.Status.Phase, NodeName)
			}
		}
	})

	t2 := time.Now()
	if err := env.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stop := time.Since(t2)
	t.Logf("timings: Start returned after %d ms (control plane ready %d ms after etcd launch); Stop took %d ms",
		startWall.Milliseconds(), env.StartDuration().Milliseconds(), stop.Milliseconds())
	if _, err := os.Stat(env.StateDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary state folder %s still exists after Stop (err %v)", env.StateDir(), err)
	}
	for _, p := range env.procs {
		if !p.exited() {
			t.Errorf("%s (pid %d) still runs after Stop", p.name, p.pid)
		}
	}
}

// TestDetachedLoadStop covers what `testenv up/status/down` do: a detached
// start, Load from the state folder, refusal to start over running
// components, and Stop through pid files.
func TestDetachedLoadStop(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	env := startEnv(t, Options{StateDir: state, Detach: true, NoFixture: true})

	loaded, err := Load(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loaded.Stop() }) // detached: Pdeathsig would not kill them
	var names []string
	for _, c := range loaded.Components() {
		if !c.Running || c.PID == 0 {
			t.Errorf("component %s: pid %d running %v, want recorded and running", c.Name, c.PID, c.Running)
		}
		names = append(names, c.Name)
	}
	if want := []string{Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler, Kwok, OLMOperator, CatalogOperator, Postgres}; !slices.Equal(names, want) {
		t.Errorf("components %v, want %v", names, want)
	}
	if err := loaded.Ready(t.Context()); err != nil {
		t.Errorf("Ready through the loaded kubeconfig: %v", err)
	}
	if loaded.Kubeconfig() != filepath.Join(state, "kubeconfig") || env.Kubeconfig() != loaded.Kubeconfig() {
		t.Errorf("kubeconfig %q (loaded %q), want %q", env.Kubeconfig(), loaded.Kubeconfig(), filepath.Join(state, "kubeconfig"))
	}

	if _, err := Start(t.Context(), Options{StateDir: state, NoFixture: true}); err == nil || !strings.Contains(err.Error(), "still runs") {
		t.Errorf("Start over a running state folder: got %v, want an error saying a component still runs", err)
	}

	if err := loaded.Stop(); err != nil {
		t.Fatalf("Stop via pid files: %v", err)
	}
	for _, c := range loaded.Components() {
		if c.Running {
			t.Errorf("component %s (pid %d) still runs after Stop", c.Name, c.PID)
		}
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("Load+Stop must keep the state folder: %v", err)
	}
	if pg := loaded.Postgres(); pg == nil || pg.BaseDir == "" {
		t.Error("Load found no PostgreSQL")
	} else if _, err := os.Stat(pg.BaseDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PostgreSQL folder %s still exists after Stop (err %v)", pg.BaseDir, err)
	}
	for _, p := range env.procs {
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			t.Errorf("%s (pid %d) not reaped after Stop", p.name, p.pid)
		}
	}
}

func TestFixtureObjects(t *testing.T) {
	objs := FixtureObjects()
	find := func(kind, ns, name string) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
				return o
			}
		}
		return nil
	}
	tests := []struct {
		name            string
		kind, ns, obj   string
		path            []string
		want            any
		wantStatusReady bool
	}{
		{name: "operators namespace", kind: "Namespace", obj: "openshift-operators"},
		{name: "marketplace namespace", kind: "Namespace", obj: "openshift-marketplace"},
		{name: "monitoring namespace", kind: "Namespace", obj: "openshift-monitoring"},
		{name: "ingress namespace", kind: "Namespace", obj: "openshift-ingress"},
		{name: "config namespace", kind: "Namespace", obj: "openshift-config"},
		{name: "model namespace", kind: "Namespace", obj: "llm-coding-assistant"},
		{name: "global OperatorGroup targets all namespaces", kind: "OperatorGroup", ns: "openshift-operators", obj: "global-operators", path: []string{"status", "namespaces"}, want: []any{""}},
		{name: "redhat-operators READY", kind: "CatalogSource", ns: "openshift-marketplace", obj: "redhat-operators", path: []string{"status", "connectionState", "lastObservedState"}, want: "READY"},
		{name: "certified-operators grpc", kind: "CatalogSource", ns: "openshift-marketplace", obj: "certified-operators", path: []string{"spec", "sourceType"}, want: "grpc"},
		{name: "apps domain", kind: "Ingress", obj: "cluster", path: []string{"spec", "domain"}, want: "apps.openshift.example.com"},
		{name: "cluster version", kind: "ClusterVersion", obj: "version", path: []string{"status", "desired", "version"}, want: "4.22.3"},
		{name: "ClusterIssuer Ready", kind: "ClusterIssuer", obj: "letsencrypt-production", wantStatusReady: true},
		{name: "default StorageClass", kind: "StorageClass", obj: "standard", path: []string{"metadata", "annotations", "storageclass.kubernetes.io/is-default-class"}, want: "true"},
		{name: "model Service port", kind: "Service", ns: "llm-coding-assistant", obj: "llama-coder", path: []string{"spec", "selector", "app"}, want: "llama-coder"},
		{name: "model API key", kind: "Secret", ns: "llm-coding-assistant", obj: "llama-coder-api-key", path: []string{"data", "api-key"}, want: "dGVzdGVudi1sbGFtYS1jb2Rlci1rZXk="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := find(tt.kind, tt.ns, tt.obj)
			if o == nil {
				t.Fatalf("no %s %s/%s in the fixture", tt.kind, tt.ns, tt.obj)
			}
			if tt.path != nil {
				got, _, err := unstructured.NestedFieldNoCopy(o.Object, tt.path...)
				if err != nil {
					t.Fatal(err)
				}
				if s, ok := got.([]any); ok {
					if w, _ := tt.want.([]any); !slices.Equal(s, w) {
						t.Errorf("%s = %v, want %v", strings.Join(tt.path, "."), got, tt.want)
					}
				} else if got != tt.want {
					t.Errorf("%s = %v, want %v", strings.Join(tt.path, "."), got, tt.want)
				}
			}
			if tt.wantStatusReady && !hasCondition(o, "Ready", "True") {
				t.Error("want status condition Ready=True")
			}
		})
	}
	t.Run("namespaces come first", func(t *testing.T) {
		seenOther := false
		for _, o := range objs {
			if o.GetKind() != "Namespace" {
				seenOther = true
			} else if seenOther {
				t.Errorf("Namespace %s after a namespaced object: apply order breaks", o.GetName())
			}
		}
	})
	t.Run("returns copies", func(t *testing.T) {
		objs[0].SetName("changed")
		if FixtureObjects()[0].GetName() == "changed" {
			t.Error("changing a returned object changed the fixture")
		}
	})
}

func TestPlatformCRDFiles(t *testing.T) {
	full := t.TempDir()
	for _, d := range PlatformCRDDirs {
		if err := os.MkdirAll(filepath.Join(full, d), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"b.yaml", "a.yaml", "notes.md"} {
			if err := os.WriteFile(filepath.Join(full, d, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	partial := t.TempDir()
	if err := os.MkdirAll(filepath.Join(partial, "openshift"), 0o755); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range PlatformCRDDirs {
		want = append(want, filepath.Join(full, d, "a.yaml"), filepath.Join(full, d, "b.yaml"))
	}
	tests := []struct {
		name    string
		dir     string
		want    []string
		wantErr string
	}{
		{name: "all folders, yaml only, sorted", dir: full, want: want},
		{name: "missing folders", dir: partial, wantErr: "no *.yaml in " + filepath.Join(partial, "openshift")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlatformCRDFiles(tt.dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestCAFromServingCert(t *testing.T) {
	ca, caKey := testCert(t, "ca", true, nil, nil)
	leaf, _ := testCert(t, "leaf", false, ca, caKey)
	other, _ := testCert(t, "other", false, ca, caKey)
	enc := func(certs ...*x509.Certificate) []byte {
		var b bytes.Buffer
		for _, c := range certs {
			_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
		}
		return b.Bytes()
	}
	tests := []struct {
		name    string
		file    []byte
		want    []byte
		wantErr string
	}{
		{name: "leaf then CA gives the CA", file: enc(leaf, ca), want: enc(ca)},
		{name: "leaf only", file: enc(leaf), wantErr: "1 certificate(s)"},
		{name: "second is not a CA", file: enc(leaf, other), wantErr: "not a CA"},
		{name: "empty (being written)", file: nil, wantErr: "0 certificate(s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "apiserver.crt")
			if err := os.WriteFile(f, tt.file, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := caFromServingCert(f)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func testCert(t *testing.T, cn string, isCA bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  isCA,
		BasicConstraintsValid: true,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func TestModulePath(t *testing.T) {
	tests := []struct {
		name, gomod, want string
	}{
		{"main module", "module github.com/maasctl/maasctl\n\ngo 1.26.0\n", mainModule},
		{"quoted", "// tools\nmodule \"example.com/testenv/etcd\"\n", "example.com/testenv/etcd"},
		{"none", "go 1.26.0\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := modulePath([]byte(tt.gomod)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStartNotBuilt(t *testing.T) {
	_, err := Start(t.Context(), Options{BinDir: t.TempDir(), StateDir: t.TempDir()})
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Start with an empty BinDir: %v, want an error wrapping ErrNotBuilt", err)
	}
	for _, name := range []string{Etcd, KubeAPIServer, Kwok} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name the missing %s", err, name)
		}
	}
}

// TestRunOperatorsRefuses: RunOperators (`testenv operators`) on a state
// folder without a kubeconfig, or with its binaries missing, fails at once
// naming what is missing, and starts nothing.
func TestRunOperatorsRefuses(t *testing.T) {
	state := t.TempDir()
	env, err := Load(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.RunOperators(t.Context(), t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "no kubeconfig in "+state) {
		t.Errorf("RunOperators without a kubeconfig: %v, want an error naming the state folder", err)
	}
	if err := writeKubeconfig(filepath.Join(state, "kubeconfig"), "https://127.0.0.1:6443", []byte("ca"), "token"); err != nil {
		t.Fatal(err)
	}
	if env, err = Load(state); err != nil {
		t.Fatal(err)
	}
	err = env.RunOperators(t.Context(), t.TempDir(), nil)
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("RunOperators with an empty binary folder: %v, want an error wrapping ErrNotBuilt", err)
	}
	for _, name := range []string{KuadrantOperator, AuthorinoOperator, LimitadorOperator, AuthorinoServer} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name the missing %s", err, name)
		}
	}
}

// TestStartFailure runs Start against stand-in binaries (shell scripts) to
// check the failure paths without a real control plane: a component that
// exits is named with its log, a port taken between pick and bind is
// retried, and nothing is left running.
func TestStartFailure(t *testing.T) {
	crds := t.TempDir()
	for _, d := range PlatformCRDDirs {
		if err := os.MkdirAll(filepath.Join(crds, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(crds, d, "x.yaml"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The stand-in apiserver records its pid and then never becomes ready;
	// the stand-in etcd fails only once the apiserver runs, so that the
	// cleanup of a started component is exercised.
	apiserver := "#!/bin/sh\necho $$ > apiserver.tmp && mv apiserver.tmp apiserver.realpid\nexec sleep 300\n"
	const waitForAPIServer = "while [ ! -s apiserver.realpid ]; do sleep 0.05; done\n"
	tests := []struct {
		name         string
		etcd         string
		wantErr      []string
		wantAttempts int
	}{
		{
			name:         "component exits",
			etcd:         "#!/bin/sh\necho x >> attempts\n" + waitForAPIServer + "echo 'etcd: boom' >&2\nexit 3\n",
			wantErr:      []string{"etcd exited (exit status 3)", "etcd: boom", "state and logs in"},
			wantAttempts: 1,
		},
		{
			// A Go panic: its first line is named although the stack
			// pushes it out of the quoted last lines.
			name: "component panics",
			etcd: "#!/bin/sh\necho x >> attempts\n" + waitForAPIServer +
				"echo 'panic: runtime error: invalid memory address or nil pointer dereference' >&2\n" +
				"for i in $(seq 30); do echo \"\tframe $i\" >&2; done\nexit 2\n",
			wantErr:      []string{"etcd exited (exit status 2); it crashed: panic: runtime error: invalid memory address", "frame 30"},
			wantAttempts: 1,
		},
		{
			name:         "port taken is retried",
			etcd:         "#!/bin/sh\necho x >> attempts\n" + waitForAPIServer + "echo 'listen tcp 127.0.0.1:2379: bind: address already in use' >&2\nexit 1\n",
			wantErr:      []string{"address already in use"},
			wantAttempts: maxPortAttempts,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, state := t.TempDir(), t.TempDir()
			for name, script := range map[string]string{Etcd: tt.etcd, KubeAPIServer: apiserver} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Start(t.Context(), Options{BinDir: bin, StateDir: state, CRDDir: crds, NoControllers: true, StartTimeout: time.Minute})
			if err == nil {
				t.Fatal("Start succeeded with a failing etcd")
			}
			t.Logf("Start error:\n%v", err)
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			b, rerr := os.ReadFile(filepath.Join(state, "attempts"))
			if rerr != nil {
				t.Fatal(rerr)
			}
			if got := strings.Count(string(b), "x"); got != tt.wantAttempts {
				t.Errorf("etcd started %d times, want %d", got, tt.wantAttempts)
			}
			pb, rerr := os.ReadFile(filepath.Join(state, "apiserver.realpid"))
			if rerr != nil {
				t.Fatal(rerr)
			}
			var pid int
			if _, err := fmt.Sscan(string(pb), &pid); err != nil {
				t.Fatal(err)
			}
			if pidRunning(pid) {
				t.Errorf("stand-in kube-apiserver (pid %d) still runs after the failed Start", pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
}

func TestVolumeDirsRewrite(t *testing.T) {
	v := volumeDirs{"/etc/ssl/certs": "/state/pods/u/tls-cert", "/etc/ssl": "/state/pods/u/other",
		"/etc/ssl/tls.key": "/state/pods/u/key/tls.key"}
	for in, want := range map[string]string{
		"--tls-cert-key=/etc/ssl/tls.key":   "--tls-cert-key=/state/pods/u/key/tls.key",
		"--tls-cert=/etc/ssl/certs/tls.crt": "--tls-cert=/state/pods/u/tls-cert/tls.crt",
		"--x=/etc/ssl/a.pem":                "--x=/state/pods/u/other/a.pem",
		"--timeout=0":                       "--timeout=0",
		"--y=/etc/ssl/certsx/a":             "--y=/state/pods/u/other/certsx/a",
		"/usr/etc/ssl/a.pem":                "/usr/etc/ssl/a.pem",
		"--z=/usr/etc/ssl/certs/a":          "--z=/usr/etc/ssl/certs/a",
		"/etc/ssl/a:/etc/ssl/certs/b":       "/state/pods/u/other/a:/state/pods/u/tls-cert/b",
		"/etc/ssl":                          "/state/pods/u/other",
	} {
		if got := v.rewrite(in); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWithRestarts(t *testing.T) {
	dir := t.TempDir()
	log := "starting\npanic: runtime error: index out of range\n\tframe\nnetns-run: restart /bin/olm in 10s: it exited (exit status 2) after 1s\n" +
		"panic: again\nnetns-run: restart /bin/olm in 20s: it exited (exit status 2) after 1s\n"
	if err := os.WriteFile(filepath.Join(dir, OLMOperator+".log"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, CatalogOperator+".log"), []byte("fine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := errors.New("wait for CatalogSource READY: context deadline exceeded")
	err := withRestarts(dir, base, OLMOperator, CatalogOperator)
	if !errors.Is(err, base) {
		t.Errorf("%v does not wrap the wait's error", err)
	}
	want := `olm was restarted 2 times after exiting; first crash: "panic: runtime error: index out of range"`
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	if strings.Contains(err.Error(), CatalogOperator+" was restarted") {
		t.Errorf("error %q names the catalog operator, which did not restart", err)
	}
}

func TestComponentEnvGOGC(t *testing.T) {
	cases := []struct {
		gogc, memlimit string
		want           map[string][]string
	}{
		{"", "", map[string][]string{
			KubeAPIServer: {"GOGC=" + DefaultGOGC, "GOMEMLIMIT=" + DefaultGOMEMLIMIT},
			Etcd:          {"GOGC=" + DefaultGOGC},
		}},
		{"150", "", map[string][]string{
			KubeAPIServer: {"GOGC=150", "GOMEMLIMIT=" + DefaultGOMEMLIMIT},
			Etcd:          {"GOGC=150"},
		}},
		{"100", "off", map[string][]string{
			KubeAPIServer: {"GOGC=100"},
			Etcd:          {"GOGC=100"},
		}},
		{"", "3GiB", map[string][]string{
			KubeAPIServer: {"GOGC=" + DefaultGOGC, "GOMEMLIMIT=3GiB"},
			Etcd:          {"GOGC=" + DefaultGOGC},
		}},
	}
	for _, c := range cases {
		t.Setenv(EnvGOGC, c.gogc)
		t.Setenv(EnvGOMEMLIMIT, c.memlimit)
		for _, name := range []string{KubeAPIServer, Etcd, KubeControllerManager, OLMOperator} {
			got := componentEnv(name)
			if !slices.Equal(got, c.want[name]) {
				t.Errorf("%s=%q %s=%q: componentEnv(%s) = %q, want %q", EnvGOGC, c.gogc, EnvGOMEMLIMIT, c.memlimit, name, got, c.want[name])
			}
		}
	}
}

// TestComponentsListStoppedOLM: after `testenv-ctl down` removed the pid
// files, status still lists OLM's two operators when their logs show they
// ran (stopped, like every other component), and leaves them out of a
// control plane that never started OLM.
func TestComponentsListStoppedOLM(t *testing.T) {
	names := func(dir string) map[string]string {
		env, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range env.Components() {
			out[c.Name] = fmt.Sprintf("pid %d running %v", c.PID, c.Running)
		}
		return out
	}
	dir := t.TempDir()
	if got := names(dir); got[OLMOperator] != "" || got[CatalogOperator] != "" || got[KubeAPIServer] == "" {
		t.Errorf("a state folder without OLM's logs: components %v, want kube-apiserver and no OLM rows", got)
	}
	for _, c := range []string{OLMOperator, CatalogOperator} {
		if err := os.WriteFile(filepath.Join(dir, c+".log"), []byte("stopped\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := names(dir)
	for _, c := range []string{OLMOperator, CatalogOperator} {
		if got[c] != "pid 0 running false" {
			t.Errorf("%s after down: %q, want listed and not running; components %v", c, got[c], got)
		}
	}
}
