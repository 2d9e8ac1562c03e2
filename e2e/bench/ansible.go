package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

// The playbook under e2e/bench/ansible/ is a generic interpreter: install.yaml
// walks steps in dependency order; each step is a list of actions, either
// "apply this file" (kubernetes.core.k8s, server-side apply) or "wait for
// this object" (kubernetes.core.k8s_info with until/retries). The bench
// writes the actions from the same rendered objects maasctl applies and
// with the readiness conditions maasctl waits for (steps/objects.go).

// ansibleWait is one wait of the playbook (e2e/bench/ansible/wait.yaml).
type ansibleWait struct {
	APIVersion string `json:"api_version"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Check is served (the kind is served), exists, condition, phase,
	// subscription (installedCSV, then the CSV's phase Succeeded), route
	// (Admitted) or kuadrant (Ready; restart the operator pods once on
	// MissingDependency).
	Check     string   `json:"check"`
	Condition string   `json:"condition,omitempty"`
	Phases    []string `json:"phases,omitempty"`
}

// ansibleAction is apply (a file of objects) or wait.
type ansibleAction struct {
	Apply string       `json:"apply,omitempty"`
	Wait  *ansibleWait `json:"wait,omitempty"`
}

type ansibleStep struct {
	ID      string          `json:"id"`
	Actions []ansibleAction `json:"actions"`
}

// ansibleVars is the playbook's extra-vars file.
type ansibleVars struct {
	Kubeconfig string `json:"kubeconfig"`
	// Retries and Delay are each wait's until/retries/delay (seconds;
	// Ansible's delay is a whole number, 0 polls back to back).
	Retries          int           `json:"retries"`
	Delay            int           `json:"delay"`
	OperatorSelector string        `json:"kuadrant_operator_selector"`
	OperatorNS       string        `json:"kuadrant_operator_namespace"`
	Steps            []ansibleStep `json:"steps"`
}

// waitFor is the playbook wait for obj, mirroring maasctl's readiness
// (steps/objects.go); nil when maasctl only needs the object to exist,
// which a successful apply already proves.
func waitFor(obj *unstructured.Unstructured) []ansibleWait {
	w := ansibleWait{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
	cond := func(t string) ansibleWait { c := w; c.Check, c.Condition = "condition", t; return c }
	phase := func(p ...string) ansibleWait { c := w; c.Check, c.Phases = "phase", p; return c }
	gk := obj.GroupVersionKind().GroupKind()
	switch gk.Group + "/" + gk.Kind {
	case "postgresql.cnpg.io/Cluster", "cert-manager.io/Certificate", "operator.authorino.kuadrant.io/Authorino":
		return []ansibleWait{cond("Ready")}
	case "operator.openshift.io/LeaderWorkerSetOperator":
		return []ansibleWait{cond("Available")}
	case "gateway.networking.k8s.io/GatewayClass":
		return []ansibleWait{cond("Accepted")}
	case "gateway.networking.k8s.io/Gateway":
		return []ansibleWait{cond("Accepted"), cond("Programmed")}
	case "route.openshift.io/Route":
		w.Check = "route"
		return []ansibleWait{w}
	case "kuadrant.io/Kuadrant":
		w.Check = "kuadrant"
		return []ansibleWait{w}
	case "dscinitialization.opendatahub.io/DSCInitialization", "inference.opendatahub.io/ExternalProvider", "inference.opendatahub.io/ExternalModel":
		return []ansibleWait{phase("Ready")}
	case "datasciencecluster.opendatahub.io/DataScienceCluster":
		return []ansibleWait{phase("Ready")}
	case "maas.opendatahub.io/MaaSModelRef":
		return []ansibleWait{phase("Pending", "Ready", "Unhealthy")}
	case "maas.opendatahub.io/MaaSAuthPolicy", "maas.opendatahub.io/MaaSSubscription":
		return []ansibleWait{phase("Active")}
	case "operators.coreos.com/Subscription":
		w.Check = "subscription"
		return []ansibleWait{w}
	}
	return nil
}

// servedWait waits until the API server serves obj's kind, for kinds an
// operator installs during the run (maasctl's REST mapper re-discovers
// them, case B03). It asks for the kind itself (k8s_info's api_found):
// k8s_info on the CRD fails in the python client for CRDs whose schema has
// a property named "self" (CEL rules), as postgresql.cnpg.io's has.
func servedWait(obj *unstructured.Unstructured) *ansibleWait {
	switch obj.GroupVersionKind().Group {
	case "", "apps", "operators.coreos.com", "route.openshift.io", "gateway.networking.k8s.io", "cert-manager.io", "config.openshift.io":
		return nil // served from the start
	}
	return &ansibleWait{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(), Check: "served"}
}

// writeAnsibleVars writes one YAML file per apply and the vars file, for
// the objects maasctl renders against this cluster and the database
// password given.
func writeAnsibleVars(ctx context.Context, c *cluster, inv *inventory.Inventory, password, dir string) (string, error) {
	clients, err := kube.New(c.te.RESTConfig())
	if err != nil {
		return "", err
	}
	env, err := steps.NewEnv(ctx, clients, inv, nil, nil)
	if err != nil {
		return "", fmt.Errorf("render for Ansible: %w", err)
	}
	reg, err := steps.NewRegistry(inv)
	if err != nil {
		return "", err
	}
	order, err := reg.TopoOrder()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// maasctl reuses an OperatorGroup already in a namespace (OLM allows
	// one); so does the playbook.
	ogs := map[string]bool{}
	if ri, _, err := clients.Resource(schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1", Kind: "OperatorGroup"}, ""); err == nil {
		if list, err := ri.List(ctx, metav1.ListOptions{}); err == nil {
			for _, og := range list.Items {
				ogs[og.GetNamespace()] = true
			}
		}
	}
	v := ansibleVars{Kubeconfig: c.kubeconfig, Retries: 3000, Delay: 0,
		OperatorSelector: inv.Kuadrant.OperatorSelector, OperatorNS: inv.Kuadrant.OperatorNamespace}
	n := 0
	applyFile := func(objs ...*unstructured.Unstructured) (ansibleAction, error) {
		n++
		b, err := assets.YAML(objs)
		if err != nil {
			return ansibleAction{}, err
		}
		p := filepath.Join(dir, fmt.Sprintf("%03d.yaml", n))
		return ansibleAction{Apply: p}, os.WriteFile(p, b, 0o600)
	}
	for _, s := range order {
		st := ansibleStep{ID: s.ID, Actions: []ansibleAction{}}
		var objs []*unstructured.Unstructured
		for _, o := range env.Objects[s.ID] {
			if o.GetKind() == "OperatorGroup" && ogs[o.GetNamespace()] {
				continue
			}
			objs = append(objs, o)
		}
		switch s.ID {
		case "database/secret":
			d := inv.Database
			objs = append(objs, secret(d.Namespace, d.SecretName, "kubernetes.io/basic-auth", map[string]string{"username": d.Owner, "password": password}))
		case "dbsecret/maas-db-config":
			objs = append(objs, secret(inv.DBConfig.Namespace, inv.DBConfig.Name, "Opaque", map[string]string{"DB_CONNECTION_URL": steps.DBConnectionURL(inv, password)}))
		}
		var waits []ansibleWait
		served := map[string]bool{}
		for i, o := range objs {
			if w := servedWait(o); w != nil && !served[w.APIVersion+"/"+w.Kind] {
				served[w.APIVersion+"/"+w.Kind] = true
				st.Actions = append(st.Actions, ansibleAction{Wait: w})
			}
			if s.ID == "platform/authorino-tls" {
				// As maasctl: the Authorino operator creates the Service,
				// and the service CA the Secret Authorino mounts.
				pre := ansibleWait{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), Check: "exists"}
				if o.GetKind() == "Authorino" {
					pre = ansibleWait{APIVersion: "v1", Kind: "Secret", Namespace: inv.Kuadrant.Namespace, Name: inv.Kuadrant.AuthorinoCertSecret, Check: "exists"}
				}
				st.Actions = append(st.Actions, ansibleAction{Wait: &pre})
			}
			a, err := applyFile(objs[i])
			if err != nil {
				return "", err
			}
			st.Actions = append(st.Actions, a)
			waits = append(waits, waitFor(o)...)
		}
		maasAPI := ansibleWait{APIVersion: "apps/v1", Kind: "Deployment", Namespace: inv.RHOAI.MaaSAPINamespace, Name: "maas-api", Check: "condition", Condition: "Available"}
		switch s.ID {
		case "rhoai/dsc":
			waits = append(waits, maasAPI)
		case "verify/status":
			// The end state maasctl's last step checks: DSC, Kuadrant,
			// Gateway, maas-api, each model Ready, policies Active.
			for _, prev := range order {
				for _, o := range env.Objects[prev.ID] {
					switch o.GetKind() {
					case "DataScienceCluster", "Kuadrant", "Gateway", "MaaSAuthPolicy", "MaaSSubscription":
						waits = append(waits, waitFor(o)...)
					case "MaaSModelRef":
						waits = append(waits, ansibleWait{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), Check: "phase", Phases: []string{"Ready"}})
					}
				}
			}
			waits = append(waits, maasAPI)
		}
		for i := range waits {
			st.Actions = append(st.Actions, ansibleAction{Wait: &waits[i]})
		}
		v.Steps = append(v.Steps, st)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "vars.json")
	return p, os.WriteFile(p, b, 0o600)
}

func secret(ns, name, typ string, data map[string]string) *unstructured.Unstructured {
	d := map[string]any{}
	for k, v := range data {
		d[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{assets.ManagedByLabel: "ansible"}},
		"type":     typ, "data": d,
	}}
}

// ansiblePlaybook finds ansible-playbook and the Python it runs with; if
// it is missing and install is true, it installs Debian's ansible and
// python3-kubernetes packages (root and apt-get needed). The error says
// why the Ansible figures are skipped.
func ansiblePlaybook(ctx context.Context, install bool, logf func(string, ...any)) (bin, python string, err error) {
	bin, err = exec.LookPath("ansible-playbook")
	if err != nil && install {
		if _, aerr := exec.LookPath("apt-get"); aerr != nil || os.Geteuid() != 0 {
			return "", "", errors.New("ansible-playbook is not installed, and apt-get as root is not available to install it (apt-get install ansible python3-kubernetes)")
		}
		logf("ansible-playbook not found: apt-get install -y ansible python3-kubernetes")
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "ansible", "python3-kubernetes")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, ierr := cmd.CombinedOutput(); ierr != nil {
			return "", "", fmt.Errorf("install ansible with apt-get: %v\n%s", ierr, tail(string(out), 10))
		}
		bin, err = exec.LookPath("ansible-playbook")
	}
	if err != nil {
		return "", "", errors.New("ansible-playbook is not installed (apt-get install ansible python3-kubernetes)")
	}
	// The playbook's modules run under the Python that runs Ansible.
	f, err := os.Open(bin)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	python = strings.TrimSpace(strings.TrimPrefix(line, "#!"))
	if i := strings.IndexByte(python, ' '); i > 0 {
		python = python[:i] // "#!/usr/bin/env python3" keeps env; fine for exec below
	}
	if out, err := exec.CommandContext(ctx, python, "-c", "import kubernetes").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("the Python of ansible-playbook (%s) lacks the kubernetes client (apt-get install python3-kubernetes): %s", python, bytes.TrimSpace(out))
	}
	return bin, python, nil
}

// runPlaybook runs e2e/bench/ansible/install.yaml with the vars file and
// returns its wall time; the log goes to logFile.
func runPlaybook(ctx context.Context, bin, python, playbook, vars, logFile string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, bin, "-i", "localhost,", "-c", "local", playbook,
		"-e", "@"+vars, "-e", "ansible_python_interpreter="+python)
	cmd.Env = append(os.Environ(), "ANSIBLE_LOCALHOST_WARNING=False", "ANSIBLE_NOCOLOR=1", "ANSIBLE_RETRY_FILES_ENABLED=False")
	out, err := os.Create(logFile)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	t0 := time.Now()
	err = cmd.Run()
	d := time.Since(t0)
	if err != nil {
		b, _ := os.ReadFile(logFile)
		return d, fmt.Errorf("ansible-playbook: %v (log %s)\n%s", err, logFile, tail(string(b), 25))
	}
	return d, nil
}

// checkAnsibleVars reads back a vars file: every step of reg in order,
// every apply file a list of objects with kind and name, every wait named.
func checkAnsibleVars(path string, reg *steps.Registry) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var v ansibleVars
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(v.Steps) != len(reg.Steps) {
		return fmt.Errorf("%s: %d steps, the registry has %d", path, len(v.Steps), len(reg.Steps))
	}
	applies := 0
	for _, s := range v.Steps {
		if reg.Get(s.ID) == nil {
			return fmt.Errorf("%s: unknown step %s", path, s.ID)
		}
		for _, a := range s.Actions {
			switch {
			case a.Apply != "":
				objs, err := yamlOf(a.Apply)
				if err != nil {
					return err
				}
				for _, o := range objs {
					md, _ := o["metadata"].(map[string]any)
					if o["kind"] == nil || md["name"] == nil {
						return fmt.Errorf("%s: an object without kind or name", a.Apply)
					}
				}
				applies++
			case a.Wait != nil:
				if a.Wait.Kind == "" || a.Wait.Name == "" || a.Wait.Check == "" {
					return fmt.Errorf("%s: step %s: incomplete wait %+v", path, s.ID, *a.Wait)
				}
			default:
				return fmt.Errorf("%s: step %s: an action that neither applies nor waits", path, s.ID)
			}
		}
	}
	if applies == 0 {
		return fmt.Errorf("%s: nothing to apply", path)
	}
	return nil
}

// yamlOf reads back a generated apply file.
func yamlOf(path string) ([]map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, err
		}
		if m != nil {
			out = append(out, m)
		}
	}
	return out, nil
}
