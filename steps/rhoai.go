package steps

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// MaaSCRDs are the CRDs the RHOAI operator registers once MaaS is enabled
// (opendatahub-io/models-as-a-service deployment/base/maas-controller/crd).
var MaaSCRDs = []string{
	"maasmodelrefs.maas.opendatahub.io",
	"maasauthpolicies.maas.opendatahub.io",
	"maassubscriptions.maas.opendatahub.io",
	"externalproviders.inference.opendatahub.io",
	"externalmodels.inference.opendatahub.io",
}

func dbSecretSteps(inv *inventory.Inventory) []*Step {
	return []*Step{{
		ID: "dbsecret/maas-db-config", Title: "Secret " + inv.DBConfig.Namespace + "/" + inv.DBConfig.Name + " (DB_CONNECTION_URL for maas-api)",
		After: []string{"database/cluster"},
		Apply: applyDBConfig,
		Check: func(ctx context.Context, e *Env) (bool, string, error) {
			s, err := dbConfigSecret(ctx, e)
			if err != nil {
				return false, "", err
			}
			return checkSecret(ctx, e, s)
		},
		HashExtra: func(e *Env) string { return "vault:" + e.Inv.Database.VaultPath },
	}}
}

func dbConfigSecret(ctx context.Context, e *Env) (*unstructured.Unstructured, error) {
	pw, err := e.Secrets.DBPassword(ctx)
	if err != nil {
		return nil, fmt.Errorf("database password from Vault %s: %w", e.Inv.Database.VaultPath, err)
	}
	c := e.Inv.DBConfig
	return secretObject(c.Namespace, c.Name, "Opaque", map[string]string{"DB_CONNECTION_URL": DBConnectionURL(e.Inv, pw)}), nil
}

// applyDBConfig writes maas-db-config, which must exist before MaaS is
// enabled (case B06). If it changed while maas-api already runs, maas-api is
// restarted so it reads the new URL (it reads the Secret only at start).
func applyDBConfig(ctx context.Context, e *Env) error {
	const id = "dbsecret/maas-db-config"
	for _, ns := range e.objects(id) {
		if err := ensureNamespace(ctx, e, id, ns); err != nil {
			return err
		}
	}
	s, err := dbConfigSecret(ctx, e)
	if err != nil {
		return err
	}
	same, _, err := checkSecret(ctx, e, s)
	if err != nil {
		return err
	}
	if same {
		return nil
	}
	if _, err := e.Clients.Apply(ctx, s); err != nil {
		return err
	}
	deps := e.Clients.Kube.AppsV1().Deployments(e.Inv.RHOAI.MaaSAPINamespace)
	if _, err := deps.Get(ctx, "maas-api", metav1.GetOptions{}); err == nil {
		e.progress(id, "maas-db-config changed: restarting Deployment %s/maas-api", e.Inv.RHOAI.MaaSAPINamespace)
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"maasctl.io/restartedAt":%q}}}}}`, time.Now().UTC().Format(time.RFC3339))
		if _, err := deps.Patch(ctx, "maas-api", "application/strategic-merge-patch+json", []byte(patch), metav1.PatchOptions{FieldManager: "maasctl"}); err != nil {
			return fmt.Errorf("restart maas-api after maas-db-config changed: %w", err)
		}
	}
	return nil
}

func rhoaiSteps(inv *inventory.Inventory) []*Step {
	dscAfter := []string{"rhoai/dsci", "dbsecret/maas-db-config", "platform/gateway"}
	if inv.Kuadrant.AuthorinoTLS {
		dscAfter = append(dscAfter, "platform/authorino-tls")
	} else {
		dscAfter = append(dscAfter, "platform/kuadrant")
	}
	if inv.Operator("lws") != nil {
		dscAfter = append(dscAfter, "operators/lws-instance")
	}
	return []*Step{
		withAfter(plainStep("rhoai/dsci", "DSCInitialization "+inv.RHOAI.DSCIName), "operators/rhoai", "platform/monitoring"),
		{
			ID: "rhoai/dsc", Title: "DataScienceCluster " + inv.RHOAI.DSCName + " with Models-as-a-Service",
			After: dscAfter,
			Apply: applyDSC, Check: checkDSC,
		},
		withAfter(plainStep("rhoai/dashboard", "dashboard MaaS, external models and Gen AI studio views"), "rhoai/dsc"),
	}
}

// dscReady is done when the DSC reports phase Ready and condition Ready,
// and MaaS itself is ready: an aggregate Ready can hide a MaaS component
// that never deployed (case B05), so AIGatewayReady (3.5) must be True too.
func dscReady(obj *unstructured.Unstructured) waiters.Result {
	r := waiters.And(waiters.Phase([]string{"Ready"}), waiters.ConditionTrue("Ready"))(obj)
	if !r.Done {
		return r
	}
	if c, ok := waiters.GetCondition(obj, "ModelsAsAServiceReady"); ok && c.Status != "True" {
		return waiters.Result{Status: c.String()}
	}
	return waiters.ConditionTrue("AIGatewayReady")(obj)
}

func maasAPITarget(e *Env) waiters.Target {
	return waiters.Target{GVK: deploymentGVK, Namespace: e.Inv.RHOAI.MaaSAPINamespace, Name: "maas-api",
		Cond: waiters.ConditionTrue("Available"),
		OnChange: func(r waiters.Result) {
			if !r.Done {
				e.progress("rhoai/dsc", "waiting for Deployment %s/maas-api: %s", e.Inv.RHOAI.MaaSAPINamespace, r.Status)
			}
		}}
}

func applyDSC(ctx context.Context, e *Env) error {
	const id = "rhoai/dsc"
	objs := e.objects(id)
	if err := applyObjects(ctx, e, id, objs); err != nil {
		return err
	}
	t := target(objs[0], e, id)
	t.Cond = dscReady
	targets := []waiters.Target{t, maasAPITarget(e)}
	for _, crd := range MaaSCRDs {
		targets = append(targets, waiters.CRDEstablished(crd))
	}
	if err := waiters.All(ctx, e.Clients, targets...); err != nil {
		return err
	}
	e.Clients.Mapper.Reset()
	return nil
}

func checkDSC(ctx context.Context, e *Env) (bool, string, error) {
	const id = "rhoai/dsc"
	obj := e.objects(id)[0]
	live, err := e.Clients.Get(ctx, obj)
	if err != nil {
		return false, "DataScienceCluster missing", nil
	}
	if p, ok := Contains(live.Object, obj.Object); !ok {
		return false, "DataScienceCluster drifted at " + p, nil
	}
	if r := dscReady(live); !r.Done {
		return false, "DataScienceCluster " + r.Status, nil
	}
	for _, crd := range MaaSCRDs {
		if ok, err := crdEstablished(ctx, e, crd); err != nil || !ok {
			return false, "CRD " + crd + " not Established", err
		}
	}
	d, err := e.Clients.Kube.AppsV1().Deployments(e.Inv.RHOAI.MaaSAPINamespace).Get(ctx, "maas-api", metav1.GetOptions{})
	if err != nil {
		return false, "Deployment maas-api missing", nil
	}
	avail := false
	for _, c := range d.Status.Conditions {
		if c.Type == "Available" && c.Status == "True" {
			avail = true
		}
	}
	if !avail {
		return false, "Deployment maas-api not Available", nil
	}
	return true, "", nil
}
