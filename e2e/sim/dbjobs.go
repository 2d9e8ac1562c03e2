package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/steps"
)

// The kubelet and Job controller for maasctl's database Jobs (label
// steps.DBJobLabel: the proof Jobs of steps/dbproof.go and verify's schema
// check Job, internal/verify/dbschema.go), simulated.
//
// Why simulated: kwok runs no containers, and its pod-complete stage marks
// every Job pod Succeeded, so with the real Job controller a Job that
// proves a password would report Complete for a password nobody tried.
// The test cluster therefore runs kube-controller-manager without its Job
// controller (testenv: --controllers=*,-job-controller), and this
// stand-in does both halves for these Jobs:
//
//   - as the kubelet would run the container: it resolves the container's
//     env (value, or valueFrom.secretKeyRef read from the Secret at that
//     moment) and does what the container's psql does, with exactly those
//     libpq parameters (PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD,
//     PGSSLMODE, PGCONNECT_TIMEOUT) against the real PostgreSQL of
//     Options.Postgres: "prove" logs in and runs SELECT 1; "change" logs
//     in, runs ALTER ROLE CURRENT_USER PASSWORD with NEW_PASSWORD, then
//     logs in with NEW_PASSWORD and runs SELECT 1 (the script of
//     steps.changeScript); "schema" runs the container's SCHEMA_SQL and
//     exits 64 plus its answer when that is not 0 (verify's
//     schemaScript). PGHOST <service>.<namespace>.svc resolves only
//     when that Service exists and then reaches the test's server, as
//     e2e/dataplane maps the CNPG -rw Service; any other host fails as an
//     unknown name does;
//   - as the Job controller (pkg/controller/job) reports the outcome in
//     batch/v1 JobStatus: on success startTime, completionTime,
//     succeeded=1 and the conditions SuccessCriteriaMet and Complete; on
//     failure (backoffLimit 0, so the first failed pod ends the Job)
//     startTime, failed=1 and the conditions FailureTarget and Failed with
//     reason BackoffLimitExceeded (k8s.io/api/batch/v1 types.go,
//     JobConditionType and JobReasonBackoffLimitExceeded). A secretKeyRef
//     to a missing Secret or key, which leaves a real pod in
//     CreateContainerConfigError until activeDeadlineSeconds, fails at
//     once with reason DeadlineExceeded.
//
// No pod is created; a password is never logged or written to a status.

var gvrJob = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}

func registerDBJobs(m *manager) {
	r := &reconciler{name: "kubelet/db-job", delayKey: "db-job", primary: gvrJob, workers: 2}
	r.reconcile = func(ctx context.Context, k key) error { return runDBJob(ctx, m, k) }
	m.add(r)
}

func runDBJob(ctx context.Context, m *manager, k key) error {
	jobs := m.kube.BatchV1().Jobs(k.Namespace)
	j, err := jobs.Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return nil // gone
	}
	kind := j.Labels[steps.DBJobLabel]
	if (kind != steps.DBJobProve && kind != steps.DBJobChange && kind != verify.DBJobSchema) || len(j.Spec.Template.Spec.Containers) != 1 {
		return nil
	}
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	env, reason, msg := m.containerEnv(ctx, j)
	if reason == "" {
		exit, err := m.runPsql(ctx, kind, env)
		switch {
		case err != nil:
			reason, msg = batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"
			m.log.Info("db job failed", zap.String("job", k.Namespace+"/"+k.Name), zap.String("kind", kind), zap.String("cause", err.Error()))
		case exit != 0:
			reason, msg = podFailure(j, exit)
		}
	}
	now := metav1.Now()
	if reason == "" {
		j.Status = batchv1.JobStatus{
			StartTime: &now, CompletionTime: &now, Succeeded: 1,
			Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now},
				{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached, Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now},
			},
		}
	} else {
		j.Status = batchv1.JobStatus{
			StartTime: &now, Failed: 1,
			Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastProbeTime: now, LastTransitionTime: now},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastProbeTime: now, LastTransitionTime: now},
			},
		}
	}
	if _, err := jobs.UpdateStatus(ctx, j, metaUpdate); err != nil {
		return fmt.Errorf("update job status %s/%s: %w", k.Namespace, k.Name, err)
	}
	return nil
}

// containerEnv resolves the Job container's env as the kubelet does; a
// missing Secret or key gives the reason and message the Job ends with.
func (m *manager) containerEnv(ctx context.Context, j *batchv1.Job) (map[string]string, string, string) {
	env := map[string]string{}
	for _, e := range j.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := m.kube.CoreV1().Secrets(j.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, batchv1.JobReasonDeadlineExceeded, fmt.Sprintf("Job was active longer than specified deadline (pod: CreateContainerConfigError, secret %q not found)", ref.Name)
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				return nil, batchv1.JobReasonDeadlineExceeded, fmt.Sprintf("Job was active longer than specified deadline (pod: CreateContainerConfigError, couldn't find key %s in Secret %s)", ref.Key, ref.Name)
			}
			env[e.Name] = string(v)
		}
	}
	return env, "", ""
}

// podFailure is the Job controller's outcome of a container that exited
// with code exit under backoffLimit 0: the first FailJob rule of the
// Job's podFailurePolicy whose onExitCodes match gives reason
// PodFailurePolicy and its message (pkg/controller/job
// pod_failure_policy.go), otherwise BackoffLimitExceeded.
func podFailure(j *batchv1.Job, exit int32) (string, string) {
	ctr := j.Spec.Template.Spec.Containers[0].Name
	if pfp := j.Spec.PodFailurePolicy; pfp != nil {
		for i, r := range pfp.Rules {
			oc := r.OnExitCodes
			if oc == nil || (oc.ContainerName != nil && *oc.ContainerName != ctr) {
				continue
			}
			in := false
			for _, v := range oc.Values {
				in = in || v == exit
			}
			if in == (oc.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) && r.Action == batchv1.PodFailurePolicyActionFailJob {
				return batchv1.JobReasonPodFailurePolicy, fmt.Sprintf("Container %s for pod %s/%s-sim failed with exit code %d matching FailJob rule at index %d", ctr, j.Namespace, j.Name, exit, i)
			}
		}
	}
	return batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"
}

// runPsql does what the Job's psql does with env (see the file comment)
// and returns the container's exit code when it ran: the schema Job
// (verify.DBJobSchema) runs SCHEMA_SQL and exits 64 plus its answer when
// that is not 0 (verify's schemaScript); the others exit 0.
func (m *manager) runPsql(ctx context.Context, kind string, env map[string]string) (int32, error) {
	if m.opts.Postgres == "" {
		return 0, errors.New("no PostgreSQL in this test environment")
	}
	connect := func(password string) (*pgx.Conn, error) {
		cfg, err := m.libpqConfig(env, password)
		if err != nil {
			return nil, err
		}
		return pgx.ConnectConfig(ctx, cfg)
	}
	conn, err := connect(env["PGPASSWORD"])
	if err != nil {
		return 0, pgErr(err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	switch kind {
	case verify.DBJobSchema:
		var bits int32
		if err := conn.QueryRow(ctx, env["SCHEMA_SQL"]).Scan(&bits); err != nil {
			return 0, pgErr(err)
		}
		if bits != 0 {
			return 64 + bits, nil
		}
		return 0, nil
	case steps.DBJobChange:
		if _, err := conn.Exec(ctx, "ALTER ROLE CURRENT_USER PASSWORD "+literal(env["NEW_PASSWORD"])); err != nil {
			return 0, pgErr(err)
		}
		_ = conn.Close(ctx)
		if conn, err = connect(env["NEW_PASSWORD"]); err != nil {
			return 0, pgErr(err)
		}
	}
	var one int
	return 0, pgErr(conn.QueryRow(ctx, "SELECT 1").Scan(&one))
}

// libpqConfig builds the connection libpq makes from the PG* variables,
// with the Service host mapped to the test's PostgreSQL.
func (m *manager) libpqConfig(env map[string]string, password string) (*pgx.ConnConfig, error) {
	host := env["PGHOST"]
	svc, rest, _ := strings.Cut(host, ".")
	ns, suffix, _ := strings.Cut(rest, ".")
	if suffix != "svc" || m.get(gvrService, ns, svc) == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	admin, err := pgx.ParseConfig(m.opts.Postgres)
	if err != nil {
		return nil, err
	}
	timeout := env["PGCONNECT_TIMEOUT"]
	if _, err := strconv.Atoi(timeout); err != nil {
		timeout = "10"
	}
	mode := env["PGSSLMODE"]
	if mode == "" {
		mode = "prefer" // libpq's default
	}
	// Options.Postgres reaches the server over its unix socket (trust);
	// a pod reaches it over TCP, where pg_hba wants TLS and a password.
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d sslmode=%s connect_timeout=%s", admin.Port, mode, timeout))
	if err != nil {
		return nil, err
	}
	if p := env["PGPORT"]; p != "" && p != "5432" {
		return nil, fmt.Errorf("connection to %s port %s refused (the -rw Service listens on 5432)", host, p)
	}
	cfg.User, cfg.Password, cfg.Database = env["PGUSER"], password, env["PGDATABASE"]
	cfg.ConnectTimeout = 10 * time.Second
	return cfg, nil
}

// pgErr keeps the server's words (which never quote a password).
func pgErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s (SQLSTATE %s)", pe.Message, pe.Code)
	}
	return err
}
