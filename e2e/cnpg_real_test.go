package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/inventory"
)

// TestRealCNPGOperator runs the database phase against the real
// CloudNativePG operator v1.30.0 (testenv Options.RealCNPG) instead of the
// CNPG simulator: the Cluster maas-postgres becomes Ready with the status
// the real operator writes (its field manager on the status subresource,
// phase "Cluster in healthy state"), from what the harness stands in for
// (the initdb Job's work in the real PostgreSQL, a PV, the instance
// manager's status port answering what that PostgreSQL says); the owner
// role logs into the real PostgreSQL over TLS with the password maasctl
// stored in the Vault stand-in; and the operator's sockets stay on
// loopback or inside its own network namespace.
func TestRealCNPGOperator(t *testing.T) {
	parallel(t)
	t0 := time.Now()
	c := newCluster(t, clusterOptions{realCNPG: true})
	if c.env == nil {
		t.Skip("needs the local control plane")
	}
	t.Logf("control plane and simulators up after %s", time.Since(t0).Round(time.Millisecond))
	r := c.install(t, "--only", "database", "--set", "waitTimeoutSeconds=300")
	t.Logf("install --only database: exit %d after %s", r.exit, time.Since(t0).Round(time.Millisecond))
	if r.exit != 0 {
		logCNPG(t, c)
	}
	mustSucceed(t, r)

	ctx := context.Background()
	d := inventory.Default().Database
	dyn, err := dynamic.NewForConfig(c.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "postgresql.cnpg.io", Version: "v1", Resource: "clusters"}
	cl, err := dyn.Resource(gvr).Namespace(d.Namespace).Get(ctx, d.ClusterName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	phase, _, _ := unstructured.NestedString(cl.Object, "status", "phase")
	if phase != "Cluster in healthy state" {
		t.Errorf("Cluster %s/%s phase %q, want %q", d.Namespace, d.ClusterName, phase, "Cluster in healthy state")
	}
	conds, _, _ := unstructured.NestedSlice(cl.Object, "status", "conditions")
	ready := false
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			ready = true
			t.Logf("Ready condition: reason %v, message %v", m["reason"], m["message"])
		}
	}
	if !ready {
		t.Errorf("Cluster %s/%s has no Ready=True condition: %v", d.Namespace, d.ClusterName, conds)
	}
	// Who wrote the status: the real operator's client (its field manager
	// is its binary's name), never the simulators.
	statusBy := map[string]bool{}
	for _, mf := range cl.GetManagedFields() {
		if mf.Subresource == "status" {
			statusBy[mf.Manager] = true
		}
	}
	if !statusBy[testenv.CNPGManager] {
		t.Errorf("status of Cluster %s/%s written by %v, want %s (the real operator)", d.Namespace, d.ClusterName, statusBy, testenv.CNPGManager)
	}
	for m := range statusBy {
		if strings.HasPrefix(m, "maasctl-sim") || strings.HasPrefix(m, "sim") {
			t.Errorf("status of Cluster %s/%s also written by %q (a simulator)", d.Namespace, d.ClusterName, m)
		}
	}
	if fp, _, _ := unstructured.NestedString(cl.Object, "status", "operatorCertificateFingerprint"); fp == "" {
		t.Errorf("no status.operatorCertificateFingerprint: the real operator did not register its client certificate")
	}

	// The owner logs in with the password maasctl stored in Vault.
	pw := c.vault.Data(vaultMount, vaultPath)["password"]
	if pw == "" {
		t.Fatalf("no password at %s/%s in the Vault stand-in", vaultMount, vaultPath)
	}
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgresql://%s:%s@%s/%s?sslmode=require&connect_timeout=5", d.Owner, urlEscape(pw), c.env.Postgres().Addr(), d.Name))
	if err != nil {
		t.Fatalf("owner %s cannot log into database %s with the Vault password: %s", d.Owner, d.Name, scrubbed(err, pw))
	}
	var who string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&who); err != nil || who != d.Owner {
		t.Errorf("current_user %q (%v), want %q", who, err, d.Owner)
	}
	_ = conn.Close(ctx)

	// The network rule: the operator's sockets are on loopback, or inside
	// its own namespace (pod and Service IPs are local to it there).
	hostNS, _ := os.Readlink("/proc/self/ns/net")
	conns, err := c.env.Connections()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cn := range conns {
		if cn.Component != testenv.CNPGManager {
			continue
		}
		n++
		if cn.LeavesLoopback() && !cn.StaysInNamespace(hostNS) {
			t.Errorf("CNPG connection leaves loopback and its namespace: %s", cn)
		}
		if cn.StaysInNamespace(hostNS) {
			t.Logf("CNPG connection inside its namespace: %s", cn)
		}
	}
	if n == 0 {
		t.Errorf("no sockets of %s found; the network check would pass vacuously", testenv.CNPGManager)
	}
	assertLoopbackOnly(t, c)
	// What the harness stood in for, from its log: the initdb Job, the
	// PV, the first-primary mark and the status calls it answered.
	if b, err := os.ReadFile(c.env.LogFile(testenv.CNPGInstanceLog)); err == nil {
		statusOK := 0
		var other []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if strings.Contains(l, "GET /pg/status") && strings.Contains(l, ": 200 ") {
				statusOK++
				continue
			}
			other = append(other, l)
		}
		t.Logf("instance stand-in: %d status calls answered 200; other lines:\n%s", statusOK, strings.Join(other, "\n"))
		if statusOK == 0 {
			t.Errorf("the operator never got a status from the instance stand-in")
		}
	}
	if b, err := os.ReadFile(c.env.LogFile(testenv.CNPGManager)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			var e struct{ Level, Ts, Msg, Error string }
			if json.Unmarshal([]byte(l), &e) != nil {
				continue
			}
			if strings.Contains(e.Msg, "healthy") || e.Level == "error" {
				t.Logf("cnpg-manager: %s %s %s %s", e.Ts, e.Level, e.Msg, e.Error)
			}
		}
	}
	for _, st := range c.env.OperatorStarts() {
		if st.Component == testenv.CNPGManager {
			t.Logf("CNPG operator started for pod %s; CPU of its processes so far: %s", st.Pod, childrenCPU(st.PID))
		}
	}
	t.Logf("TestRealCNPGOperator wall time %s", time.Since(t0).Round(time.Millisecond))
}

// logCNPG prints the end of the real operator's log and the stand-in's.
func logCNPG(t *testing.T, c *cluster) {
	t.Helper()
	for _, comp := range []string{testenv.CNPGManager, testenv.CNPGInstanceLog} {
		b, err := os.ReadFile(c.env.LogFile(comp))
		if err != nil {
			t.Logf("%s log: %v", comp, err)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s log (%d lines), the last 40:\n%s", comp, len(lines), strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// childrenCPU is the user+system CPU time of pid's child processes that
// still run (the operator under netns-run), from /proc/<pid>/stat
// (fields 14 and 15, in clock ticks of 1/100 s).
func childrenCPU(pid int) string {
	ents, _ := os.ReadDir("/proc")
	var ticks int64
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 || f[1] != fmt.Sprint(pid) {
			continue
		}
		var u, sy int64
		fmt.Sscan(f[11], &u)
		fmt.Sscan(f[12], &sy)
		ticks += u + sy
	}
	return (time.Duration(ticks) * 10 * time.Millisecond).String()
}
