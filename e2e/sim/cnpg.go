package sim

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/url"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The simulated CloudNativePG operator (cloudnative-pg/cloudnative-pg v1.30,
// CRD in ../shared/crds/cnpg). Sources: docs/src/bootstrap.md (initdb with a
// custom basic-auth secret; the <cluster>-app secret is only generated when
// no secret is given, issue #6650), docs/src/service_management.md (the
// -rw, -ro and -r Services), api/v1/cluster_types.go (phase strings,
// condition Ready with reasons ClusterIsReady / ClusterIsNotReady) and
// docs/src/storage.md (one PVC per instance, named <cluster>-<serial>).
type cnpg struct {
	m *manager
	r *reconciler
}

const (
	cnpgPhaseHealthy      = "Cluster in healthy state"
	cnpgPhaseSettingUp    = "Setting up primary"
	cnpgReasonReady       = "ClusterIsReady"
	cnpgReasonNotReady    = "ClusterIsNotReady"
	cnpgClusterLabel      = "cnpg.io/cluster"
	basicAuthSecretType   = "kubernetes.io/basic-auth"
	defaultStorageClassAn = "storageclass.kubernetes.io/is-default-class"
)

func registerCNPG(m *manager) {
	c := &cnpg{m: m}
	c.r = &reconciler{
		name: "cnpg/cluster", delayKey: CNPG, primary: gvrCNPGCluster,
		watches: []watch{
			{gvr: gvrSecret, mapFn: m.allOf(gvrCNPGCluster, true)},
			{gvr: gvrService, mapFn: ownerKeys("Cluster")},
			{gvr: gvrPVC, mapFn: func(u *unstructured.Unstructured) []key {
				if n := u.GetLabels()[cnpgClusterLabel]; n != "" {
					return []key{{Namespace: u.GetNamespace(), Name: n}}
				}
				return nil
			}},
			{gvr: gvrStorageClass, mapFn: m.allOf(gvrCNPGCluster, false)},
		},
		reconcile: c.reconcile,
	}
	c.r.watches = append(c.r.watches, m.operatorWatches(gvrCNPGCluster)...)
	m.add(c.r)
}

func (c *cnpg) reconcile(ctx context.Context, k key) error {
	m := c.m
	cl := m.get(gvrCNPGCluster, k.Namespace, k.Name)
	if cl == nil || cl.GetDeletionTimestamp() != nil || !m.operatorRunning("clusters.postgresql.cnpg.io") {
		return nil
	}
	// PVCs, Services and Secrets are made at once; the Cluster's status
	// waits for the CNPG delay (hold).
	ctx = m.hold(ctx, c.r, cl, "create")
	instances, found, _ := unstructured.NestedInt64(cl.Object, "spec", "instances")
	if !found || instances < 1 {
		instances = 1
	}
	gen := cl.GetGeneration()
	oldConds := statusConditions(cl)
	notReady := func(reason, msg string) error {
		status := map[string]any{
			"phase":          cnpgPhaseSettingUp,
			"phaseReason":    msg,
			"instances":      int64(0),
			"readyInstances": int64(0),
			"conditions":     conditions(oldConds, cond("Ready", false, reason, msg).gen(gen)),
		}
		// An elected primary stays in the status (CNPG never clears
		// currentPrimary once the bootstrap made one).
		for _, f := range []string{"currentPrimary", "currentPrimaryTimestamp", "writeService"} {
			if v := str(cl, "status", f); v != "" {
				status[f] = v
			}
		}
		return m.updateStatus(ctx, gvrCNPGCluster, cl, status)
	}

	// Bootstrap credentials: a custom initdb secret must be a basic-auth
	// Secret whose username is the database owner; its password becomes
	// the owner's password.
	owner := str(cl, "spec", "bootstrap", "initdb", "owner")
	if owner == "" {
		owner = str(cl, "spec", "bootstrap", "initdb", "database")
	}
	if owner == "" {
		owner = "app"
	}
	secretName := str(cl, "spec", "bootstrap", "initdb", "secret", "name")
	if secretName != "" {
		s := m.get(gvrSecret, k.Namespace, secretName)
		if s == nil {
			return notReady(cnpgReasonNotReady, fmt.Sprintf("initdb secret %s/%s not found", k.Namespace, secretName))
		}
		if t := str(s, "type"); t != basicAuthSecretType {
			return notReady(cnpgReasonNotReady, fmt.Sprintf("initdb secret %s/%s has type %q, want %s", k.Namespace, secretName, t, basicAuthSecretType))
		}
		user, err := secretValue(s, "username")
		if err != nil {
			return notReady(cnpgReasonNotReady, fmt.Sprintf("initdb secret %s/%s: %v", k.Namespace, secretName, err))
		}
		if user != owner {
			return notReady(cnpgReasonNotReady, fmt.Sprintf("initdb secret %s/%s: username %q does not match the database owner %q", k.Namespace, secretName, user, owner))
		}
		if pw, err := secretValue(s, "password"); err != nil || pw == "" {
			return notReady(cnpgReasonNotReady, fmt.Sprintf("initdb secret %s/%s: missing password", k.Namespace, secretName))
		}
	} else if err := c.ensureAppSecret(ctx, cl, owner); err != nil {
		return err
	}

	// A PVC needs a StorageClass: the named one or the cluster default;
	// without either it stays Pending and the primary never starts (case B09).
	sc := str(cl, "spec", "storage", "storageClass")
	if sc == "" {
		sc = c.defaultStorageClass()
		if sc == "" {
			return notReady(cnpgReasonNotReady, "no default StorageClass and spec.storage.storageClass is empty: PVCs stay Pending")
		}
	} else if m.get(gvrStorageClass, "", sc) == nil {
		return notReady(cnpgReasonNotReady, fmt.Sprintf("StorageClass %q not found: PVCs stay Pending", sc))
	}
	size := str(cl, "spec", "storage", "size")
	if size == "" {
		size = "1Gi"
	}
	var names, pvcs []any
	for i := int64(1); i <= instances; i++ {
		name := fmt.Sprintf("%s-%d", k.Name, i)
		if err := c.ensurePVC(ctx, cl, name, sc, size); err != nil {
			return err
		}
		names = append(names, name)
		pvcs = append(pvcs, name)
	}
	for _, svc := range []struct{ suffix, role string }{{"rw", "primary"}, {"ro", "replica"}, {"r", ""}} {
		if err := c.ensureService(ctx, cl, svc.suffix, svc.role); err != nil {
			return err
		}
	}
	if m.opts.Faults.CNPGInitdbFails {
		if err := c.failInitdbJob(ctx, cl); err != nil {
			return err
		}
		return notReady(cnpgReasonNotReady, cnpgPhaseSettingUp)
	}
	// initdb: the owner role and the database in the real PostgreSQL,
	// once per Cluster (cnpg_db.go).
	if err := c.bootstrapDatabase(ctx, cl, owner, secretName); err != nil {
		if serr := notReady(cnpgReasonNotReady, cnpgPhaseSettingUp); serr != nil {
			return serr
		}
		return err // retried with backoff
	}
	primary := k.Name + "-1"
	status := map[string]any{
		"phase":               cnpgPhaseHealthy,
		"instances":           instances,
		"readyInstances":      instances,
		"instanceNames":       names,
		"healthyPVC":          pvcs,
		"pvcCount":            instances,
		"latestGeneratedNode": instances,
		"currentPrimary":      primary,
		"targetPrimary":       primary,
		"writeService":        k.Name + "-rw",
		"readService":         k.Name + "-r",
		"instancesStatus":     map[string]any{"healthy": names},
		"conditions":          conditions(oldConds, cond("Ready", true, cnpgReasonReady, "Cluster is Ready").gen(gen)),
	}
	if v := str(cl, "status", "currentPrimaryTimestamp"); v != "" {
		status["currentPrimaryTimestamp"] = v
	} else {
		status["currentPrimaryTimestamp"] = nowString()
	}
	return m.updateStatus(ctx, gvrCNPGCluster, cl, status)
}

func (c *cnpg) defaultStorageClass() string {
	for _, s := range c.m.list(gvrStorageClass, "") {
		if s.GetAnnotations()[defaultStorageClassAn] == "true" {
			return s.GetName()
		}
	}
	return ""
}

func clusterOwner(cl *unstructured.Unstructured) []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: "postgresql.cnpg.io/v1", Kind: "Cluster", Name: cl.GetName(), UID: cl.GetUID(),
		Controller: new(true), BlockOwnerDeletion: new(true),
	}}
}

func (c *cnpg) ensurePVC(ctx context.Context, cl *unstructured.Unstructured, name, sc, size string) error {
	if c.m.get(gvrPVC, cl.GetNamespace(), name) != nil {
		return nil
	}
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return fmt.Errorf("cluster %s storage size %q: %w", keyOf(cl), size, err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cl.GetNamespace(),
			Labels: map[string]string{
				cnpgClusterLabel: cl.GetName(), "cnpg.io/instanceName": name, "cnpg.io/pvcRole": "PG_DATA",
			},
			OwnerReferences: clusterOwner(cl),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}},
		},
	}
	_, err = c.m.kube.CoreV1().PersistentVolumeClaims(cl.GetNamespace()).Create(ctx, pvc, metaCreate)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create pvc %s/%s: %w", cl.GetNamespace(), name, err)
	}
	return nil
}

func (c *cnpg) ensureService(ctx context.Context, cl *unstructured.Unstructured, suffix, role string) error {
	name := cl.GetName() + "-" + suffix
	if c.m.get(gvrService, cl.GetNamespace(), name) != nil {
		return nil
	}
	sel := map[string]string{cnpgClusterLabel: cl.GetName()}
	if role != "" {
		sel["cnpg.io/instanceRole"] = role
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cl.GetNamespace(),
			Labels:          map[string]string{cnpgClusterLabel: cl.GetName()},
			OwnerReferences: clusterOwner(cl),
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: sel,
			Ports: []corev1.ServicePort{{
				Name: "postgres", Port: 5432, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(5432),
			}},
		},
	}
	_, err := c.m.kube.CoreV1().Services(cl.GetNamespace()).Create(ctx, svc, metaCreate)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service %s/%s: %w", cl.GetNamespace(), name, err)
	}
	return nil
}

// ensureAppSecret generates <cluster>-app when no initdb secret is given.
func (c *cnpg) ensureAppSecret(ctx context.Context, cl *unstructured.Unstructured, owner string) error {
	name := cl.GetName() + "-app"
	if c.m.get(gvrSecret, cl.GetNamespace(), name) != nil {
		return nil
	}
	db := str(cl, "spec", "bootstrap", "initdb", "database")
	if db == "" {
		db = "app"
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return fmt.Errorf("generate password: %w", err)
	}
	pw := base64.RawURLEncoding.EncodeToString(raw)
	host := fmt.Sprintf("%s-rw.%s", cl.GetName(), cl.GetNamespace())
	uri := (&url.URL{Scheme: "postgresql", User: url.UserPassword(owner, pw), Host: host + ":5432", Path: "/" + db}).String()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cl.GetNamespace(),
			Labels:          map[string]string{cnpgClusterLabel: cl.GetName(), "cnpg.io/reload": "true"},
			OwnerReferences: clusterOwner(cl),
		},
		Type: corev1.SecretTypeBasicAuth,
		StringData: map[string]string{
			"username": owner, "password": pw, "dbname": db, "host": host, "port": "5432",
			"uri":    uri,
			"pgpass": fmt.Sprintf("%s:5432:%s:%s:%s\n", host, db, owner, pw),
		},
	}
	_, err := c.m.kube.CoreV1().Secrets(cl.GetNamespace()).Create(ctx, s, metaCreate)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create secret %s/%s: %w", cl.GetNamespace(), name, err)
	}
	return nil
}

// failInitdbJob creates the bootstrap Job <cluster>-1-initdb the way CNPG
// labels it and gives it the status the Job controller writes once its
// backoff limit is exceeded (FailureTarget, then Failed, reason
// BackoffLimitExceeded). spec.managedBy keeps the real Job controller of
// the test cluster away from it (batch/v1 JobSpec.managedBy). CNPG itself
// never copies the failure into the Cluster status (cloudnative-pg#11044).
func (c *cnpg) failInitdbJob(ctx context.Context, cl *unstructured.Unstructured) error {
	jobs := c.m.kube.BatchV1().Jobs(cl.GetNamespace())
	name := cl.GetName() + "-1-initdb"
	j, err := jobs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		backoff := int32(6)
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: cl.GetNamespace(),
				Labels: map[string]string{
					cnpgClusterLabel: cl.GetName(), "cnpg.io/jobRole": "initdb", "cnpg.io/instanceName": cl.GetName() + "-1",
				},
				OwnerReferences: clusterOwner(cl),
			},
			Spec: batchv1.JobSpec{
				BackoffLimit: &backoff,
				ManagedBy:    new("maasctl.io/sim-cnpg"),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "initdb", Image: "registry.invalid/maasctl-sim/postgresql:17"}},
				}},
			},
		}
		if j, err = jobs.Create(ctx, job, metaCreate); err != nil {
			return fmt.Errorf("create job %s/%s: %w", cl.GetNamespace(), name, err)
		}
	} else if err != nil {
		return fmt.Errorf("get job %s/%s: %w", cl.GetNamespace(), name, err)
	}
	for _, cd := range j.Status.Conditions {
		if cd.Type == batchv1.JobFailed && cd.Status == corev1.ConditionTrue {
			return nil
		}
	}
	now := metav1.Now()
	msg := "Job has reached the specified backoff limit"
	j.Status = batchv1.JobStatus{
		StartTime: &now, Failed: 6,
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: msg, LastProbeTime: now, LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, Message: msg, LastProbeTime: now, LastTransitionTime: now},
		},
	}
	if _, err := jobs.UpdateStatus(ctx, j, metaUpdate); err != nil {
		return fmt.Errorf("update job status %s/%s: %w", cl.GetNamespace(), name, err)
	}
	return nil
}

// secretValue returns the decoded value of key in a cached Secret. The value
// is never logged.
func secretValue(s *unstructured.Unstructured, k string) (string, error) {
	enc, found, _ := unstructured.NestedString(s.Object, "data", k)
	if !found {
		return "", fmt.Errorf("no key %q", k)
	}
	b, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("key %q: not base64", k)
	}
	return string(b), nil
}
