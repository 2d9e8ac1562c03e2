package steps

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// cnpgCRD is the CRD whose presence means CloudNativePG is already installed.
const cnpgCRD = "clusters.postgresql.cnpg.io"

func databaseSteps(inv *inventory.Inventory) []*Step {
	op := inv.Database.Operator
	return []*Step{
		{
			ID: "database/operator", Title: "CloudNativePG operator (OLM, unless postgresql.cnpg.io is served)",
			Apply: func(ctx context.Context, e *Env) error {
				if served, err := crdEstablished(ctx, e, cnpgCRD); err != nil || served {
					if served {
						e.progress("database/operator", "%s already served: not installing CNPG", cnpgCRD)
					}
					return err
				}
				return olmInstall(ctx, e, "database/operator", op)
			},
			Check: func(ctx context.Context, e *Env) (bool, string, error) {
				served, err := crdEstablished(ctx, e, cnpgCRD)
				if err != nil || !served {
					return false, cnpgCRD + " not served", err
				}
				return true, "", nil
			},
		},
		{
			ID: "database/secret", Title: "database password (Vault, generated once) and basic-auth Secret",
			Apply: func(ctx context.Context, e *Env) error {
				objs := e.objects("database/secret")
				for _, ns := range objs {
					if err := ensureNamespace(ctx, e, "database/secret", ns); err != nil {
						return err
					}
				}
				s, err := dbSecret(ctx, e)
				if err != nil {
					return err
				}
				_, err = e.Clients.Apply(ctx, s)
				return err
			},
			Check: func(ctx context.Context, e *Env) (bool, string, error) {
				s, err := dbSecret(ctx, e)
				if err != nil {
					return false, "", err
				}
				return checkSecret(ctx, e, s)
			},
			HashExtra: func(e *Env) string { return "vault:" + e.Inv.Database.VaultPath },
		},
		{
			ID: "database/cluster", Title: "CloudNativePG Cluster " + inv.Database.ClusterName,
			After: []string{"database/operator", "database/secret"},
			Apply: applyAndWait("database/cluster"),
			Check: checkObjects("database/cluster"),
		},
	}
}

// dbSecret builds the basic-auth Secret CNPG's initdb reads for the owner
// (cloudnative-pg docs "Bootstrap": bootstrap.initdb.secret must be of type
// kubernetes.io/basic-auth with username equal to the owner).
func dbSecret(ctx context.Context, e *Env) (*unstructured.Unstructured, error) {
	pw, err := e.Secrets.DBPassword(ctx)
	if err != nil {
		return nil, fmt.Errorf("database password from Vault %s: %w", e.Inv.Database.VaultPath, err)
	}
	d := e.Inv.Database
	return secretObject(d.Namespace, d.SecretName, "kubernetes.io/basic-auth", map[string]string{
		"username": d.Owner,
		"password": pw,
	}), nil
}

// DBConnectionURL is the DB_CONNECTION_URL maas-api reads from maas-db-config:
// postgresql://OWNER:PASSWORD@CLUSTER-rw.NAMESPACE.svc:5432/DB?sslmode=MODE,
// with user and password URL-encoded (case B07).
func DBConnectionURL(inv *inventory.Inventory, password string) string {
	d := inv.Database
	u := url.URL{
		Scheme:   "postgresql",
		User:     url.UserPassword(d.Owner, password),
		Host:     fmt.Sprintf("%s-rw.%s.svc:5432", d.ClusterName, d.Namespace),
		Path:     "/" + d.Name,
		RawQuery: url.Values{"sslmode": {inv.DBConfig.SSLMode}}.Encode(),
	}
	return u.String()
}

func secretObject(ns, name, typ string, data map[string]string) *unstructured.Unstructured {
	sd := map[string]any{}
	for k, v := range data {
		sd[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{
			"name": name, "namespace": ns,
			"labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue},
		},
		"type": typ,
		"data": sd,
	}}
}

// checkSecret compares a live Secret's data with the wanted stringData
// without ever putting a value into the returned message.
func checkSecret(ctx context.Context, e *Env, want *unstructured.Unstructured) (bool, string, error) {
	live, err := e.Clients.Kube.CoreV1().Secrets(want.GetNamespace()).Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, kube.Describe(want) + " missing", nil
	}
	if err != nil {
		return false, "", err
	}
	sd, _, _ := unstructured.NestedStringMap(want.Object, "data")
	for k, v := range sd {
		if base64.StdEncoding.EncodeToString(live.Data[k]) != v {
			return false, fmt.Sprintf("%s key %s differs", kube.Describe(want), k), nil
		}
	}
	if typ, _, _ := unstructured.NestedString(want.Object, "type"); string(live.Type) != typ {
		return false, fmt.Sprintf("%s has type %s, want %s", kube.Describe(want), live.Type, typ), nil
	}
	return true, "", nil
}

func crdEstablished(ctx context.Context, e *Env, name string) (bool, error) {
	crd, err := e.Clients.Dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get CRD %s: %w", name, err)
	}
	return waiters.ConditionTrue("Established")(crd).Done, nil
}
