package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestInitdbArgs reads the database, owner and application Secret from an
// initdb Job shaped as CNPG v1.30.0 makes it (pkg/specs/jobs.go,
// CreatePrimaryJobViaInitdb: the init command's --app-db-name and
// --app-user; the APP_USERNAME env from the application Secret).
func TestInitdbArgs(t *testing.T) {
	j := &batchv1.Job{}
	j.Spec.Template.Spec.Containers = []corev1.Container{{
		Name:    "initdb",
		Command: []string{"/controller/manager", "instance", "init", "--initdb-flags", "--encoding=UTF8", "--app-db-name", "maas", "--app-user", "maas", "--log-level=info"},
		Env: []corev1.EnvVar{{Name: "APP_USERNAME", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "maas-postgres-secret"}, Key: "username"}}}},
	}}
	db, owner, secret, err := initdbArgs(j)
	if err != nil || db != "maas" || owner != "maas" || secret != "maas-postgres-secret" {
		t.Errorf("initdbArgs = %q, %q, %q, %v; want maas, maas, maas-postgres-secret", db, owner, secret, err)
	}
	j.Spec.Template.Spec.Containers[0].Command = []string{"/controller/manager", "instance", "init"}
	if _, _, _, err := initdbArgs(j); err == nil {
		t.Error("a Job without --app-db-name and --app-user: no error")
	}
}

// TestPgStatusJSON checks the stand-in's answer uses the JSON names of
// CNPG's postgres.PostgresqlStatus (pkg/postgres/status.go) that the
// operator reads to find the primary and to decide on a rollout.
func TestPgStatusJSON(t *testing.T) {
	b, err := json.Marshal(pgStatus{IsPrimary: true, SystemID: "7", CurrentLsn: "0/1", ExecutableHash: "h", IsPodReady: true, TimeLineID: 1})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"isPrimary", "systemID", "currentLsn", "executableHash", "isPodReady", "timeLineID", "pendingRestart", "mightBeUnavailable", "instanceArch", "instanceManagerVersion"} {
		if _, ok := m[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
}

// TestCNPGMoreCRDFiles: every CNPG CRD of the module but the two the
// fixture bundle brings.
func TestCNPGMoreCRDFiles(t *testing.T) {
	fs, err := cnpgMoreCRDFiles(context.Background())
	if errors.Is(err, ErrNotBuilt) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fs {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "postgresql.cnpg.io_"), ".yaml"))
	}
	if !slices.Contains(names, "poolers") || slices.Contains(names, "clusters") || slices.Contains(names, "databases") {
		t.Errorf("CRDs %v: want poolers and neither clusters nor databases", names)
	}
}
