package steps

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

// TestN10MigrationFailureAfterRestart: the pods maas-api's restart waits
// for (case N10, after a password change): only a crash-looping pod whose
// last termination is a failed schema migration fails the wait, named
// with the verify MAAS-V015 cause and fix; a pod that crashed once and
// runs again, one being deleted, or a crash that is not a migration (a
// rejected password) keep the rollout wait going.
func TestN10MigrationFailureAfterRestart(t *testing.T) {
	const ns = "redhat-ai-gateway-infra"
	pod := func(name, waiting, message string, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		cs := corev1.ContainerStatus{Name: "maas-api", RestartCount: 3,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: message}}}
		if waiting != "" {
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}
		} else {
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
			cs.Ready = true
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		return p
	}
	owner := `level=ERROR msg="schema migration failed" error="migration failed: must be owner of table api_keys (SQLSTATE 42501) in line 0: ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS labels JSONB"`
	dirty := `level=ERROR msg="schema migration failed" error="Dirty database version 7. Fix and force version."`
	inv := inventory.Default()
	for _, tt := range []struct {
		name string
		pods []corev1.Pod
		want []string // nil: no failure
	}{
		{"old pod running, new pod crash-loops on ownership", []corev1.Pod{pod("maas-api-old", "", "", false), pod("maas-api-new", "CrashLoopBackOff", owner, false)},
			[]string{"pod " + ns + "/maas-api-new", "CrashLoopBackOff", "must be owner of table api_keys", "does not own api_keys", "ALTER TABLE api_keys OWNER TO " + inv.Database.Owner, "oc rollout restart deployment/maas-api -n " + ns}},
		{"dirty schema", []corev1.Pod{pod("maas-api-new", "CrashLoopBackOff", dirty, false)},
			[]string{"Dirty database version 7", "UPDATE schema_migrations SET version = 6, dirty = false"}},
		{"crashed once, runs again", []corev1.Pod{pod("maas-api-new", "", owner, false)}, nil},
		{"being deleted", []corev1.Pod{pod("maas-api-old", "CrashLoopBackOff", owner, true)}, nil},
		{"not a migration", []corev1.Pod{pod("maas-api-new", "CrashLoopBackOff", `FATAL: password authentication failed for user "maas"`, false)}, nil},
		{"still starting", []corev1.Pod{pod("maas-api-new", "ContainerCreating", "", false)}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := migrationFailure(inv, release.Release{}, tt.pods)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("failure %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no failure, want one")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
}
