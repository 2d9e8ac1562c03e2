package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// The real CloudNativePG operator of the local control plane
// (Options.RealCNPG): cnpg-manager, built by `make testenv` from
// github.com/cloudnative-pg/cloudnative-pg CNPGVersion (cmd/manager), run
// as the process of the pod of the cloudnative-pg CSV's Deployment
// (olmcatalog.go) as kuadrant.go runs the Kuadrant operators, once that CSV
// is Succeeded: `cnpg-manager controller` with the pod's env, through
// netns-run in a network namespace of its own with the kube-apiserver's
// port forwarded, kwok's pod range (10.244.0.1/16) and the Service range
// (10.96.0.1/16) on its lo, so that every pod IP it dials is local to that
// namespace and nothing it sends leaves it (REAL-COMPONENTS.md, "The
// network rule"). Out of a cluster it needs (REAL-COMPONENTS.md, pitfalls):
// OPERATOR_NAMESPACE; WEBHOOK_CERT_DIR holding apiserver.crt and
// apiserver.key (internal/cmd/manager/controller/controller.go, RunController:
// with WEBHOOK_CERT_DIR set it uses OLM's certificate names);
// --metrics-bind-address=0 and a free --webhook-port; and a working folder
// holding operator/manager_amd64 (pkg/utils/discovery.go,
// DetectAvailableArchitectures globs "operator/manager_*", relative).
//
// kwok runs no containers and the Job controller is off (start.go,
// kcmControllers), so the harness does for the operator's Clusters what the
// kubelet, the Job controller and the instance manager inside the
// PostgreSQL pod would (cnpgKubelet):
//
//   - the initdb Job (cnpg.io/jobRole=initdb; pkg/specs/jobs.go,
//     CreatePrimaryJobViaInitdb: `instance init ... --app-db-name DB
//     --app-user OWNER`): its work is done in the control plane's real
//     PostgreSQL (the owner role with LOGIN and the database owned by it,
//     pkg/management/postgres/initdb.go, ConfigureNewInstance), then the
//     Job gets the status the Job controller writes for one successful pod
//     (Succeeded 1, SuccessCriteriaMet and Complete): the operator waits
//     for exactly that (pkg/utils/job_conditions.go, JobHasOneCompletion).
//     The owner's password is then set from the application Secret, as the
//     instance manager does on the primary
//     (internal/management/controller/instance_controller.go,
//     reconcileUser: the Secret's username must be the owner). The Secret
//     is the one the Job's APP_USERNAME env names (jobs.go: a kubelet
//     would not start the container without it).
//   - a PVC of a Cluster (cnpg.io/cluster) that stays Pending gets a
//     hostPath PV pre-bound to it (no provisioner runs here).
//   - the instance manager's status server on the instance pod's IP, port
//     8000 (pkg/management/url/url.go, StatusPort): netns-run listens on
//     0.0.0.0:8000 inside the operator's namespace (--forward-from) and
//     relays to cnpgInstanceStandIn on the host's loopback. It speaks TLS
//     1.3 with the Cluster's server certificate (the operator verifies the
//     chain against the <cluster>-ca Secret's ca.crt and ignores names:
//     pkg/certs/tls.go, NewTLSConfigFromCertPool), asks for the operator's
//     client certificate and accepts it only when its public-key
//     fingerprint is the Cluster's status.operatorCertificateFingerprint
//     (pkg/management/postgres/webserver/remote.go, withOperatorAuth: 401
//     without a certificate, 503 for an unknown one). GET /pg/status
//     answers what the real PostgreSQL says (pg_is_in_recovery, the
//     system identifier, the timeline, the current WAL LSN), never more.
//     With more than one instance pod it cannot tell which one is dialled
//     (the relay hides the address) and answers 500.

// CNPGManager is the component name of the real CloudNativePG operator
// (its binary in Options.BinDir, its log StateDir/cnpg-manager.log).
const CNPGManager = "cnpg-manager"

// CNPGVersion is the github.com/cloudnative-pg/cloudnative-pg version of
// CNPGManager.
const CNPGVersion = "v1.30.0"

// CNPGInstanceLog is the base name of the instance manager stand-in's log
// (StateDir/cnpg-instance.log): one line per request and per harness action.
const CNPGInstanceLog = "cnpg-instance"

// Pod and Service ranges put on the operator's lo: kwok's --cidr and the
// kube-apiserver's --service-cluster-ip-range.
const (
	cnpgPodCIDR     = "10.244.0.1/16"
	cnpgServiceCIDR = "10.96.0.1/16"
)

var (
	gvrCNPGClusters = schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}
)

// cnpgMoreCRDFiles are the CRDs of CNPGVersion (config/crd/bases in the
// module cache) that the cloudnative-pg bundle of the fixture catalog does
// not bring (it has only Cluster and Database, olmcatalog.go): the real
// operator watches them all and exits at start without them ("no matches
// for kind Pooler", internal/cmd/manager/controller/controller.go,
// setupReconcilers). A real CNPG bundle carries every one of them.
func cnpgMoreCRDFiles(ctx context.Context) ([]string, error) {
	cache, err := goModCache(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "github.com", "cloudnative-pg", "cloudnative-pg@"+CNPGVersion, "config", "crd", "bases")
	all, err := filepath.Glob(filepath.Join(dir, "postgresql.cnpg.io_*.yaml"))
	if err != nil || len(all) == 0 {
		return nil, fmt.Errorf("%w: CNPG CRDs not in the module cache (%s)", ErrNotBuilt, dir)
	}
	var out []string
	for _, f := range all {
		switch filepath.Base(f) {
		case "postgresql.cnpg.io_clusters.yaml", "postgresql.cnpg.io_databases.yaml":
			continue // the bundle's (../shared/crds/cnpg)
		}
		out = append(out, f)
	}
	return out, nil
}

// cnpgState is the harness's part of the real CNPG operator.
type cnpgState struct {
	mu      sync.Mutex
	standIn *cnpgInstanceStandIn
	done    map[types.UID]bool // initdb Jobs completed
	last    time.Time          // last cnpgKubelet pass
	logf    func(string, ...any)
	logFile *os.File
}

func (s *operatorSupervisor) cnpgOperator() realOperator {
	return realOperator{
		component:  CNPGManager,
		selector:   labels.SelectorFromSet(labels.Set{"app.kubernetes.io/name": "cloudnative-pg"}),
		csvPrefix:  "cloudnative-pg.",
		argsPrefix: []string{"controller"},
		// A crash loop (e.g. a CRD missing at start) would otherwise
		// start it five times a second.
		restartBackoff: true,
		prepare:        (*operatorSupervisor).prepareCNPG,
	}
}

// prepareCNPG makes the operator's working folder (operator/manager_amd64,
// the webhook certificate) and starts the instance manager stand-in.
func (s *operatorSupervisor) prepareCNPG(ctx context.Context, pod *corev1.Pod) (launchExtras, error) {
	st, err := s.cnpgStateOf()
	if err != nil {
		return launchExtras{}, err
	}
	dir := filepath.Join(s.o.StateDir, "cnpg")
	if err := os.MkdirAll(filepath.Join(dir, "operator"), 0o755); err != nil {
		return launchExtras{}, err
	}
	bin := filepath.Join(dir, "operator", "manager_amd64")
	_ = os.Remove(bin)
	if err := os.Symlink(filepath.Join(s.o.BinDir, CNPGManager), bin); err != nil {
		return launchExtras{}, fmt.Errorf("cnpg working folder: %w", err)
	}
	certDir := filepath.Join(dir, "webhook")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return launchExtras{}, err
	}
	if err := writeSelfSignedCert(filepath.Join(certDir, "apiserver.crt"), filepath.Join(certDir, "apiserver.key")); err != nil {
		return launchExtras{}, fmt.Errorf("cnpg webhook certificate: %w", err)
	}
	ports, err := freePorts(1)
	if err != nil {
		return launchExtras{}, err
	}
	env := []string{"WEBHOOK_CERT_DIR=" + certDir}
	if !hasEnv(pod, "OPERATOR_NAMESPACE") {
		env = append(env, "OPERATOR_NAMESPACE="+pod.Namespace)
	}
	return launchExtras{
		netns: []string{"--addr=" + cnpgPodCIDR, "--addr=" + cnpgServiceCIDR,
			fmt.Sprintf("--forward-from=0.0.0.0:8000=%d", st.standIn.port)},
		env:  env,
		args: []string{"--metrics-bind-address=0", "--webhook-port=" + strconv.Itoa(ports[0])},
		dir:  dir,
	}, nil
}

func hasEnv(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return true
			}
		}
	}
	return false
}

// cnpgStateOf returns the supervisor's CNPG state, starting the stand-in
// the first time.
func (s *operatorSupervisor) cnpgStateOf() (*cnpgState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cnpg != nil {
		return s.cnpg, nil
	}
	f, err := os.OpenFile(filepath.Join(s.o.StateDir, CNPGInstanceLog+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	st := &cnpgState{done: map[types.UID]bool{}, logFile: f}
	st.logf = func(format string, args ...any) {
		_, _ = fmt.Fprintf(f, time.Now().UTC().Format(time.RFC3339Nano)+" "+format+"\n", args...)
	}
	dyn, err := dynamic.NewForConfig(s.cfg)
	if err != nil {
		return nil, err
	}
	hash, err := fileSHA256(filepath.Join(s.o.BinDir, CNPGManager))
	if err != nil {
		return nil, fmt.Errorf("hash of %s: %w", CNPGManager, err)
	}
	im := &cnpgInstanceStandIn{s: s, dyn: dyn, logf: st.logf, hash: hash, session: randomHex(8)}
	if err := im.start(); err != nil {
		return nil, err
	}
	st.standIn = im
	s.cnpg = st
	return st, nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cnpgKubeletEvery is how often cnpgKubelet looks at Jobs and PVCs.
const cnpgKubeletEvery = time.Second

// cnpgKubelet does, once a second, what a Job controller and the
// provisioner would for the operator's Clusters (see the top of this
// file).
func (s *operatorSupervisor) cnpgKubelet(ctx context.Context) {
	st, err := s.cnpgStateOf()
	if err != nil {
		s.logf("cnpg: %v", err)
		return
	}
	if time.Since(st.last) < cnpgKubeletEvery {
		return
	}
	st.last = time.Now()
	jobs, err := s.kube.BatchV1().Jobs("").List(ctx, metav1.ListOptions{LabelSelector: "cnpg.io/jobRole=initdb"})
	if err == nil {
		for i := range jobs.Items {
			j := &jobs.Items[i]
			if st.done[j.UID] || j.Status.Succeeded > 0 || j.DeletionTimestamp != nil {
				continue
			}
			if err := s.cnpgInitdb(ctx, st, j); err != nil {
				st.logf("initdb job %s/%s: %v", j.Namespace, j.Name, err)
				continue
			}
			st.done[j.UID] = true
		}
	}
	if st.standIn != nil {
		st.standIn.markPrimary(ctx)
	}
	pvcs, err := s.kube.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{LabelSelector: "cnpg.io/cluster"})
	if err == nil {
		for i := range pvcs.Items {
			if err := s.cnpgPV(ctx, st, &pvcs.Items[i]); err != nil {
				st.logf("pv for pvc %s/%s: %v", pvcs.Items[i].Namespace, pvcs.Items[i].Name, err)
			}
		}
	}
}

// cnpgPV makes a hostPath PV pre-bound to a Pending PVC of a Cluster (the
// binder then binds them, whatever the StorageClass's binding mode).
func (s *operatorSupervisor) cnpgPV(ctx context.Context, st *cnpgState, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil {
		return nil
	}
	name := "cnpg-" + string(pvc.UID)
	if _, err := s.kube.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		return nil
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	sc := ""
	if pvc.Spec.StorageClassName != nil {
		sc = *pvc.Spec.StorageClassName
	}
	dir := filepath.Join(s.o.StateDir, "pvs", string(pvc.UID))
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"cnpg.io/cluster": pvc.Labels["cnpg.io/cluster"]}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              sc,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := s.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{FieldManager: "testenv-cnpg"}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	st.logf("pv %s created for pvc %s/%s (%s, class %q)", name, pvc.Namespace, pvc.Name, size.String(), sc)
	return nil
}

// initdbArgs reads --app-db-name and --app-user from the initdb Job's
// container command (pkg/specs/jobs.go, CreatePrimaryJobViaInitdb), and
// the application Secret from its APP_USERNAME env.
func initdbArgs(j *batchv1.Job) (db, owner, secret string, err error) {
	if len(j.Spec.Template.Spec.Containers) == 0 {
		return "", "", "", errors.New("no container")
	}
	c := j.Spec.Template.Spec.Containers[0]
	for i := 0; i+1 < len(c.Command); i++ {
		switch c.Command[i] {
		case "--app-db-name":
			db = c.Command[i+1]
		case "--app-user":
			owner = c.Command[i+1]
		}
	}
	for _, e := range c.Env {
		if e.Name == "APP_USERNAME" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secret = e.ValueFrom.SecretKeyRef.Name
		}
	}
	if db == "" || owner == "" {
		return "", "", "", fmt.Errorf("command %q has no --app-db-name and --app-user", c.Command)
	}
	return db, owner, secret, nil
}

// cnpgInitdb runs the initdb Job's work in the real PostgreSQL and writes
// the Job's completion.
func (s *operatorSupervisor) cnpgInitdb(ctx context.Context, st *cnpgState, j *batchv1.Job) error {
	db, owner, secretName, err := initdbArgs(j)
	if err != nil {
		return err
	}
	if secretName == "" {
		return errors.New("no application Secret (APP_USERNAME env) in the Job: not supported by the stand-in")
	}
	sec, err := s.kube.CoreV1().Secrets(j.Namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("application secret: %w (a kubelet would not start the container)", err)
	}
	if u := string(sec.Data["username"]); u != owner {
		return fmt.Errorf("secret %s: username %q is not the owner %q (reconcileUser refuses it)", secretName, u, owner)
	}
	password := string(sec.Data["password"])
	if password == "" {
		return fmt.Errorf("secret %s has no password", secretName)
	}
	pg := s.pgAdmin
	if pg == "" {
		return errors.New("no PostgreSQL")
	}
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A new Cluster has a new PGDATA: a database and role of that name
	// left by an earlier one are dropped first.
	stmts := []string{
		"DROP DATABASE IF EXISTS " + pgIdent(db) + " WITH (FORCE)",
		"DROP ROLE IF EXISTS " + pgIdent(owner),
		"CREATE ROLE " + pgIdent(owner) + " LOGIN",
		"CREATE DATABASE " + pgIdent(db) + " OWNER " + pgIdent(owner),
		// reconcileUser, on the primary once it runs.
		"ALTER ROLE " + pgIdent(owner) + " PASSWORD " + pgLiteral(password),
	}
	for i, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("step %d of %d: %w", i+1, len(stmts), pgErrNoEcho(err))
		}
	}
	now := metav1.Now()
	j.Status.StartTime = &now
	j.Status.CompletionTime = &now
	j.Status.Succeeded = 1
	j.Status.Conditions = append(j.Status.Conditions,
		batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now},
		batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now})
	if _, err := s.kube.BatchV1().Jobs(j.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{FieldManager: "testenv-cnpg"}); err != nil {
		return fmt.Errorf("job status: %w", err)
	}
	st.logf("initdb job %s/%s: role %q and database %q created in PostgreSQL, password from secret %s; job complete", j.Namespace, j.Name, owner, db, secretName)
	return nil
}

func pgIdent(s string) string   { return pgx.Identifier{s}.Sanitize() }
func pgLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// pgErrNoEcho keeps the server's message (which never quotes a password
// literal) and drops anything else.
func pgErrNoEcho(err error) error {
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) {
		return fmt.Errorf("SQLSTATE %s: %s", pe.SQLState(), strings.SplitN(err.Error(), "(SQLSTATE", 2)[0])
	}
	return errors.New("statement failed")
}

// cnpgInstanceStandIn answers the operator's calls to the instance
// manager's status port (see the top of this file).
type cnpgInstanceStandIn struct {
	s       *operatorSupervisor
	dyn     dynamic.Interface
	logf    func(string, ...any)
	hash    string // sha256 of operator/manager_amd64: what the pod would run
	session string
	port    int
	l       net.Listener
}

func (im *cnpgInstanceStandIn) start() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	im.l, im.port = l, l.Addr().(*net.TCPAddr).Port
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		ClientAuth:     tls.RequestClientCert,
		GetCertificate: im.certificate,
	}
	srv := &http.Server{Handler: http.HandlerFunc(im.serve), ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	go func() { _ = srv.Serve(tls.NewListener(l, tc)) }()
	im.logf("instance manager stand-in listening on 127.0.0.1:%d (relayed from 0.0.0.0:8000 in the operator's namespace)", im.port)
	return nil
}

// instance is the one instance pod the stand-in serves and its Cluster.
func (im *cnpgInstanceStandIn) instance(ctx context.Context) (*corev1.Pod, *unstructured.Unstructured, error) {
	pods, err := im.s.pods.List(labels.SelectorFromSet(labels.Set{"cnpg.io/podRole": "instance"}))
	if err != nil {
		return nil, nil, err
	}
	var live []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return nil, nil, fmt.Errorf("%d instance pods with an IP: the stand-in serves exactly one", len(live))
	}
	p := live[0]
	cl, err := im.dyn.Resource(gvrCNPGClusters).Namespace(p.Namespace).Get(ctx, p.Labels["cnpg.io/cluster"], metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	return p, cl, nil
}

func (im *cnpgInstanceStandIn) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, cl, err := im.instance(ctx)
	if err != nil {
		im.logf("tls: %v", err)
		return nil, err
	}
	name, _, _ := unstructured.NestedString(cl.Object, "status", "certificates", "serverTLSSecret")
	if name == "" {
		name = cl.GetName() + "-server"
	}
	sec, err := im.s.kube.CoreV1().Secrets(cl.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		im.logf("tls: server secret: %v", err)
		return nil, err
	}
	c, err := tls.X509KeyPair(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		im.logf("tls: server secret %s: %v", name, err)
		return nil, err
	}
	return &c, nil
}

// pgStatus is the part of CNPG's postgres.PostgresqlStatus
// (pkg/postgres/status.go) the stand-in fills, with its JSON names.
type pgStatus struct {
	CurrentLsn             string `json:"currentLsn,omitempty"`
	SystemID               string `json:"systemID"`
	IsPrimary              bool   `json:"isPrimary"`
	ReplayPaused           bool   `json:"replayPaused"`
	PendingRestart         bool   `json:"pendingRestart"`
	IsWalReceiverActive    bool   `json:"isWalReceiverActive"`
	IsPgRewindRunning      bool   `json:"isPgRewindRunning"`
	MightBeUnavailable     bool   `json:"mightBeUnavailable"`
	Node                   string `json:"node"`
	TimeLineID             int    `json:"timeLineID,omitempty"`
	ExecutableHash         string `json:"executableHash"`
	InstanceManagerVersion string `json:"instanceManagerVersion"`
	InstanceArch           string `json:"instanceArch"`
	IsInstanceManagerUpg   bool   `json:"isInstanceManagerUpgrading"`
	SessionID              string `json:"sessionID"`
	IsPodReady             bool   `json:"isPodReady"`
}

func (im *cnpgInstanceStandIn) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	pod, cl, err := im.instance(ctx)
	if err != nil {
		im.logf("%s %s: 500 %v", r.Method, r.URL.Path, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// withOperatorAuth (remote.go).
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		im.logf("%s %s: 401 no client certificate", r.Method, r.URL.Path)
		http.Error(w, "client certificate required", http.StatusUnauthorized)
		return
	}
	want, _, _ := unstructured.NestedString(cl.Object, "status", "operatorCertificateFingerprint")
	if want == "" || publicKeyFingerprint(r.TLS.PeerCertificates[0]) != want {
		im.logf("%s %s: 503 operator certificate not registered or not recognized", r.Method, r.URL.Path)
		http.Error(w, "operator certificate not recognized", http.StatusServiceUnavailable)
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != "/pg/status" {
		im.logf("%s %s: 404 not served by the stand-in", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	}
	st, err := im.pgStatus(ctx, pod)
	if err != nil {
		im.logf("GET /pg/status for %s/%s: 500 %v", pod.Namespace, pod.Name, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
	im.logf("GET /pg/status for %s/%s: 200 isPrimary=%v lsn=%s timeline=%d ready=%v", pod.Namespace, pod.Name, st.IsPrimary, st.CurrentLsn, st.TimeLineID, st.IsPodReady)
}

// markPrimary does the instance manager's first step on the primary
// (internal/management/controller/instance_startup.go,
// verifyPgDataCoherenceForPrimary: "First primary instance bootstrap,
// marking myself as primary"): when the Cluster's status.targetPrimary is
// the instance pod and status.currentPrimary is empty, and only when the
// real PostgreSQL is not in recovery, it patches status.currentPrimary
// (the pod) and currentPrimaryTimestamp (RFC 3339 with microseconds,
// machinery pkg/postgres/time GetCurrentTimestamp) with a merge patch of
// the status subresource. The operator waits for that before it counts a
// primary (internal/controller/cluster_upgrade.go: "expected 1 primary
// PostgreSQL but none found").
func (im *cnpgInstanceStandIn) markPrimary(ctx context.Context) {
	pod, cl, err := im.instance(ctx)
	if err != nil {
		return
	}
	target, _, _ := unstructured.NestedString(cl.Object, "status", "targetPrimary")
	current, _, _ := unstructured.NestedString(cl.Object, "status", "currentPrimary")
	if target != pod.Name || current != "" || pod.Status.Phase != corev1.PodRunning {
		return
	}
	st, err := im.pgStatus(ctx, pod)
	if err != nil || !st.IsPrimary {
		im.logf("not marking %s/%s primary: PostgreSQL says primary=%v (%v)", pod.Namespace, pod.Name, st != nil && st.IsPrimary, err)
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"currentPrimary": pod.Name, "currentPrimaryTimestamp": time.Now().Format(metav1.RFC3339Micro)}})
	_, err = im.dyn.Resource(gvrCNPGClusters).Namespace(cl.GetNamespace()).Patch(ctx, cl.GetName(), types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "testenv-cnpg-instance"}, "status")
	if err != nil {
		im.logf("mark %s/%s primary: %v", pod.Namespace, pod.Name, err)
		return
	}
	im.logf("first primary bootstrap: status.currentPrimary of cluster %s/%s set to %s (PostgreSQL not in recovery)", cl.GetNamespace(), cl.GetName(), pod.Name)
}

// publicKeyFingerprint is the hex SHA-256 of the certificate's
// SubjectPublicKeyInfo (pkg/certs/selfsigned.go, PublicKeyFingerprint).
func publicKeyFingerprint(c *x509.Certificate) string {
	d := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(d[:])
}

// pgStatus asks the real PostgreSQL what the instance manager reports
// (pkg/management/postgres/probes.go, GetStatus).
func (im *cnpgInstanceStandIn) pgStatus(ctx context.Context, pod *corev1.Pod) (*pgStatus, error) {
	pg := im.s.pgAdmin
	if pg == "" {
		return nil, errors.New("no PostgreSQL")
	}
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL not reachable: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st := &pgStatus{Node: pod.Spec.NodeName, ExecutableHash: im.hash, InstanceManagerVersion: strings.TrimPrefix(CNPGVersion, "v"),
		InstanceArch: "amd64", SessionID: im.session}
	var lsn *string
	err = conn.QueryRow(ctx, `SELECT NOT pg_is_in_recovery(),
		(SELECT system_identifier::text FROM pg_control_system()),
		(SELECT timeline_id FROM pg_control_checkpoint()),
		CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END`).Scan(&st.IsPrimary, &st.SystemID, &st.TimeLineID, &lsn)
	if err != nil {
		return nil, err
	}
	if lsn != nil {
		st.CurrentLsn = *lsn
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			st.IsPodReady = true
		}
	}
	return st, nil
}

func (st *cnpgState) close() {
	if st == nil {
		return
	}
	if st.standIn != nil && st.standIn.l != nil {
		_ = st.standIn.l.Close()
	}
	_ = st.logFile.Close()
}
