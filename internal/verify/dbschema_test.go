package verify

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

// crashPod is a maas-api pod whose container crash-loops with message as
// its last termination message.
func crashPod(name, message string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "redhat-ai-gateway-infra", "labels": map[string]any{"app.kubernetes.io/name": "maas-api"}},
		"status": map[string]any{"phase": "Running", "containerStatuses": []any{map[string]any{
			"name": "maas-api", "ready": false, "restartCount": int64(4),
			"state":     map[string]any{"waiting": map[string]any{"reason": "CrashLoopBackOff"}},
			"lastState": map[string]any{"terminated": map[string]any{"exitCode": int64(1), "reason": "Error", "message": message}},
		}}},
	}}
}

func TestMaaSAPIMigrationCheck(t *testing.T) {
	tests := []struct {
		name, message string
		want          Result
		in            []string
	}{
		{"healthy pod", "", Pass, []string{"1 pod(s), none reports"}},
		{"unrelated crash", "failed to connect: FATAL: password authentication failed", Pass, nil},
		{"must be owner (N10 a)", "level=ERROR msg=\"schema migration failed\" error=\"migration failed: must be owner of table api_keys (SQLSTATE 42501)\"", Fail,
			[]string{"CrashLoopBackOff", "must be owner of table api_keys", "does not own api_keys", "ALTER TABLE api_keys OWNER TO maas;", "oc rollout restart deployment/maas-api -n redhat-ai-gateway-infra"}},
		{"dirty (N10 b)", "line one\nerror: Dirty database version 6. Fix and force version.", Fail,
			[]string{"Dirty database version 6", "dirty at version 6", "db/schema/0006_", "UPDATE schema_migrations SET version = 5, dirty = false;", "migrate force 5", "--replicas=0"}},
		{"other migration failure", "schema migration failed: syntax error", Fail, []string{"oc logs -n redhat-ai-gateway-infra deploy/maas-api --previous"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := healthyReader(t)
			edit(t, r, DeploymentGVK, "redhat-ai-gateway-infra", "maas-api", func(o *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringMap(o.Object, map[string]string{"app.kubernetes.io/name": "maas-api"}, "spec", "selector", "matchLabels")
			})
			r.Put(crashPod("maas-api-abc", tc.message))
			s, err := Snapshot(context.Background(), r, inventory.Default(), release.Release{})
			if err != nil {
				t.Fatal(err)
			}
			c := checkMigrations(s)
			if c.Result != tc.want {
				t.Fatalf("result %s, want %s: %+v", c.Result, tc.want, c)
			}
			all := c.Detail + " | " + c.Cause + " | " + c.Fix
			for _, w := range tc.in {
				if !strings.Contains(all, w) {
					t.Errorf("check lacks %q:\n%s", w, all)
				}
			}
		})
	}
}

func TestDBSchemaCheck(t *testing.T) {
	s, err := Snapshot(context.Background(), healthyReader(t), inventory.Default(), release.Release{})
	if err != nil {
		t.Fatal(err)
	}
	if c := checkDBSchema(s); c.Result != Skip || !strings.Contains(c.Detail, "--database") {
		t.Errorf("without a probe: %+v", c)
	}
	for _, tc := range []struct {
		probe SchemaProbe
		want  Result
		in    []string
		not   []string
	}{
		{SchemaProbe{Ran: true, Job: "rhoai-maas-db/j"}, Pass, []string{"idx_api_keys_labels_gin valid"}, nil},
		{SchemaProbe{Ran: true, Bits: SchemaInvalidIndex, Job: "rhoai-maas-db/j"}, Fail,
			[]string{"idx_api_keys_labels_gin is INVALID", "REINDEX INDEX CONCURRENTLY idx_api_keys_labels_gin;", "DROP INDEX CONCURRENTLY IF EXISTS idx_api_keys_labels_gin;", "-c postgres -- psql -d maas"},
			[]string{"not owned", "dirty"}},
		{SchemaProbe{Ran: true, Bits: SchemaNotOwner | SchemaDirty, Job: "rhoai-maas-db/j"}, Fail,
			[]string{"api_keys is not owned by role maas", "schema_migrations is dirty", "ALTER TABLE api_keys OWNER TO maas;", "SELECT version, dirty FROM schema_migrations;"}, []string{"INVALID"}},
		{SchemaProbe{Err: "the schema check Job rhoai-maas-db/j failed (BackoffLimitExceeded: ...)"}, Fail, []string{"could not be asked", "maas-postgres-secret"}, nil},
	} {
		s.Schema = &tc.probe
		c := checkDBSchema(s)
		all := c.Detail + " | " + c.Cause + " | " + c.Fix
		if c.Result != tc.want {
			t.Errorf("bits %d: result %s, want %s: %s", tc.probe.Bits, c.Result, tc.want, all)
		}
		for _, w := range tc.in {
			if !strings.Contains(all, w) {
				t.Errorf("bits %d: lacks %q:\n%s", tc.probe.Bits, w, all)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(c.Detail, w) {
				t.Errorf("bits %d: names %q:\n%s", tc.probe.Bits, w, c.Detail)
			}
		}
	}
}

// TestSchemaJob: the check Job reads the owner's password only by
// secretKeyRef, runs SchemaSQL, and its podFailurePolicy fails the Job on
// exactly the exit codes the script uses for an answer.
func TestSchemaJob(t *testing.T) {
	inv := inventory.Default()
	j := SchemaJob(inv)
	if j.Namespace != inv.Database.Namespace || j.Labels[DBJobLabel] != DBJobSchema {
		t.Errorf("Job %s/%s labels %v", j.Namespace, j.GenerateName, j.Labels)
	}
	ctr := j.Spec.Template.Spec.Containers[0]
	for _, e := range ctr.Env {
		switch e.Name {
		case "PGPASSWORD":
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != inv.Database.SecretName || e.ValueFrom.SecretKeyRef.Key != "password" {
				t.Errorf("PGPASSWORD = %+v, want a secretKeyRef to %s/password", e, inv.Database.SecretName)
			}
		case "SCHEMA_SQL":
			if e.Value != SchemaSQL {
				t.Errorf("SCHEMA_SQL is not SchemaSQL")
			}
		case "PGUSER":
			if e.Value != inv.Database.Owner {
				t.Errorf("PGUSER %q, want the owner %q", e.Value, inv.Database.Owner)
			}
		}
	}
	if !strings.Contains(strings.Join(ctr.Command, " "), "exit $((64 + bits))") {
		t.Errorf("command %q", ctr.Command)
	}
	rules := j.Spec.PodFailurePolicy.Rules
	if len(rules) != 1 || rules[0].Action != "FailJob" || *rules[0].OnExitCodes.ContainerName != ctr.Name {
		t.Fatalf("podFailurePolicy %+v", rules)
	}
	for code := int32(0); code < 80; code++ {
		want := code >= 65 && code <= 71
		if got := slices.Contains(rules[0].OnExitCodes.Values, code); got != want {
			t.Errorf("exit code %d in FailJob rule: %v, want %v", code, got, want)
		}
	}
	if !strings.Contains(SchemaSQL, "'idx_api_keys_labels_gin'") || strings.Contains(strings.ToUpper(SchemaSQL), "UPDATE ") {
		t.Errorf("SchemaSQL:\n%s", SchemaSQL)
	}
}
