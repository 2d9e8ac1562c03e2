// Package dbjob builds the short psql Jobs maasctl runs in the database
// namespace to ask the inventory's CloudNativePG database something as its
// owner role: the password proof and change of install and rotate-password
// (steps/dbproof.go) and verify's schema check (internal/verify/dbschema.go).
package dbjob

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/inventory"
)

// Container is the name of the Job's one container.
const Container = "psql"

// New returns a Job named maasctl-db-<kind>-<random> in the database
// namespace that runs command once (no retry, at most deadlineSeconds,
// removed an hour after it ends) in the inventory's client image, with
// libpq's PG* variables for the CNPG read-write Service (…-rw.<ns>.svc:5432,
// TLS required, 10 s connect timeout) as the owner role, PGPASSWORD from key
// passwordKey of Secret passwordSecret (by secretKeyRef: the password is
// never copied into the Job), then env. The pod has no service account
// token and runs non-root with every capability dropped; its termination
// message falls back to the log's end.
func New(d inventory.Database, kind string, labels map[string]string, passwordSecret, passwordKey string, command []string, env []corev1.EnvVar, deadlineSeconds int64) *batchv1.Job {
	image := d.ClientImage
	if image == "" {
		image = inventory.DefaultDBClientImage
	}
	all := append([]corev1.EnvVar{
		{Name: "PGHOST", Value: fmt.Sprintf("%s-rw.%s.svc", d.ClusterName, d.Namespace)},
		{Name: "PGPORT", Value: "5432"},
		{Name: "PGDATABASE", Value: d.Name},
		{Name: "PGUSER", Value: d.Owner},
		{Name: "PGSSLMODE", Value: "require"},
		{Name: "PGCONNECT_TIMEOUT", Value: "10"},
		{Name: "PGPASSWORD", ValueFrom: SecretKey(passwordSecret, passwordKey)},
	}, env...)
	backoff, ttl := int32(0), int32(3600)
	no, yes := false, true
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "maasctl-db-" + kind + "-", Namespace: d.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:            &backoff,
			ActiveDeadlineSeconds:   &deadlineSeconds,
			TTLSecondsAfterFinished: &ttl,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: &no,
					Containers: []corev1.Container{{
						Name: Container, Image: image, Command: command, Env: all,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: &no, RunAsNonRoot: &yes,
							Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
					}},
				},
			},
		},
	}
}

// SecretKey is an env value read from key of Secret name.
func SecretKey(name, key string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
}
