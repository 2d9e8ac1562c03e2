package e2e

// Case B04 (../shared/cases/SECOND-SET.md): the DataScienceCluster MaaS
// switch moved between RHOAI 3.4 (spec.components.kserve.modelsAsService,
// condition ModelsAsServiceReady) and 3.5
// (spec.components.aigateway.modelsAsAService, ModelsAsAServiceReady; the
// old field kept, with a CEL rule against re-enabling it). Real OLM (the
// generated catalog offers rhods-operator stable-3.3/3.4/3.5, each head
// carrying an olm.skipRange from 3.3.0) and the real kube-apiserver with
// the real RHOAI CRDs; the RHOAI operator itself is simulated (e2e/sim: it
// has no buildable upstream that runs without its operands' images).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

const (
	rhoaiNS  = "redhat-ods-operator"
	rhoaiPkg = "rhods-operator"
	// onlyRHOAI installs nothing but the RHOAI operator (preflight runs
	// on every run).
	onlyRHOAI = "--only=operators/rhoai"
	// ignoreAll skips the preflight verdict where a test drives a channel
	// change itself; rhoai-version is the check that would stop it (and
	// `all` is understood by maasctl versions without that check, so the
	// test shows the same fault on them).
	ignoreAll = "--ignore-preflight=all"
)

// subscriptionOf returns the RHOAI Subscription's channel, installed CSV
// and metadata.generation (moved by every spec write; OLM's status writes
// leave it).
func subscriptionOf(t *testing.T, c *cluster) (channel, installed string, gen int64) {
	t.Helper()
	sub := get(t, c, "operators.coreos.com/v1alpha1", "Subscription", rhoaiNS, rhoaiPkg)
	channel, _, _ = unstructured.NestedString(sub.Object, "spec", "channel")
	installed, _, _ = unstructured.NestedString(sub.Object, "status", "installedCSV")
	return channel, installed, sub.GetGeneration()
}

// installRHOAIOperator installs only the RHOAI operator from channel;
// extra are more install flags.
func installRHOAIOperator(t *testing.T, c *cluster, channel string, extra ...string) {
	t.Helper()
	r := c.install(t, append([]string{onlyRHOAI, "--set", "operators[rhoai].channel=" + channel}, extra...)...)
	mustSucceed(t, r)
	if _, csv, _ := subscriptionOf(t, c); !strings.HasPrefix(csv, rhoaiPkg+"."+strings.TrimPrefix(channel, "stable-")) {
		t.Fatalf("setup: installed CSV %q from channel %s", csv, channel)
	}
}

// TestB04VersionSkewStopsBeforeWrite: RHOAI 3.4 runs (CSV
// rhods-operator.3.4.4, the 3.4 DSC CRD without aigateway) and the
// inventory's channel is the default stable-3.5. The run must stop in
// preflight, before any write, naming the running version and its CSV,
// the field the inventory expects and the fixes; the Subscription keeps its
// channel and no DataScienceCluster is written (the case's trigger 1: a
// 3.5 DSC on a 3.4 schema would be pruned silently). The downgrade (a 3.5
// cluster, channel stable-3.4) is refused the same way.
func TestB04VersionSkewStopsBeforeWrite(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{rhoai: sim.RHOAI34})
	installRHOAIOperator(t, c, "stable-3.4")
	_, _, rv := subscriptionOf(t, c)

	// --defaults: the cluster was installed with channel stable-3.4 (as
	// another tool would leave it); the run asks for the default inventory.
	r := c.install(t, "--defaults")
	mustFail(t, r)
	msg := failure(r, steps.PreflightStepID)
	mustContain(t, "preflight failure", msg, "rhoai-version", "operator version 3.4.4", "CSV "+rhoaiNS+"/rhods-operator.3.4.4",
		"expects spec.components.aigateway.modelsAsAService", "operators[rhoai].channel=stable-3.4", `{"spec":{"channel":"stable-3.5"}}`)
	for _, ev := range r.events {
		if ev.Type == steps.EventDone && ev.Step != steps.PreflightStepID {
			t.Errorf("step %s ran after the version skew", ev.Step)
		}
	}
	channel, csv, rv2 := subscriptionOf(t, c)
	if channel != "stable-3.4" || csv != "rhods-operator.3.4.4" || rv2 != rv {
		t.Errorf("Subscription changed (channel %s, CSV %s, generation %d → %d): preflight must stop before any write", channel, csv, rv, rv2)
	}
	if c.exists(t, "datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "default-dsc") {
		t.Errorf("a DataScienceCluster was written on the 3.4 cluster")
	}
	if c.exists(t, "v1", "Namespace", "", "rhoai-maas-db") {
		t.Errorf("namespace rhoai-maas-db exists: the install wrote before preflight passed")
	}
	// preflight on its own says the same.
	p := c.maasctl(t, "preflight")
	if p.exit == 0 {
		t.Errorf("maasctl preflight passed on the skew:\n%s", p.stdout)
	}
	mustContain(t, "maasctl preflight", p.stdout, "rhoai-version", "rhods-operator.3.4.4")

	// A channel below the running release: OLM never downgrades.
	r = c.install(t, "--set", "operators[rhoai].channel=stable-3.3")
	mustFail(t, r)
	mustContain(t, "preflight failure (downgrade)", failure(r, steps.PreflightStepID), "rhoai-version", "operators[rhoai].channel is stable-3.3", "never downgrades")
	if _, _, rv3 := subscriptionOf(t, c); rv3 != rv {
		t.Errorf("Subscription written on the downgrade attempt")
	}
}

// TestB04ChannelChangeResolutionFailed: RHOAI 3.5 runs and the Subscription
// is moved to a channel the catalog does not have (stable-3.6). OLM keeps
// reporting the old CSV AtLatestKnown and sets ResolutionFailed
// (ConstraintsNotSatisfiable, "no operators found in channel"). The step
// must fail on that at once with OLM's message, not accept the old CSV
// and not wait for its timeout.
func TestB04ChannelChangeResolutionFailed(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	installRHOAIOperator(t, c, "stable-3.5")

	start := time.Now()
	r := c.install(t, onlyRHOAI, ignoreAll, "--set", "operators[rhoai].channel=stable-3.6", "--set", "waitTimeoutSeconds=400")
	took := time.Since(start)
	msg := failure(r, "operators/rhoai")
	if msg == "" {
		t.Fatalf("operators/rhoai did not fail after the channel moved to stable-3.6 (exit %d): the old CSV was taken for the new channel\n%s", r.exit, progress(r, "operators/rhoai"))
	}
	mustContain(t, "operators/rhoai failure", msg, "Subscription "+rhoaiNS+"/"+rhoaiPkg, "ResolutionFailed", "ConstraintsNotSatisfiable", "no operators found in channel stable-3.6")
	if r.exit == 4 || took > 120*time.Second {
		t.Errorf("the step failed by timeout (exit %d after %s), want at once on ResolutionFailed", r.exit, took)
	}
	if strings.Contains(progress(r, "operators/rhoai"), "rhods-operator.3.5.0 installed") {
		t.Errorf("the old CSV was reported installed for channel stable-3.6")
	}
}

// TestB04ChannelChangeWaitsForNewCSV: RHOAI 3.4 runs; the inventory moves
// the Subscription to stable-3.5 (the skew check ignored: the user asks
// maasctl to upgrade). Variant of the trigger the case does not spell out:
// the InstallPlan on the new channel is Manual. Until it is approved the
// old CSV rhods-operator.3.4.4, still AtLatestKnown for a moment, must
// never count: the step stops naming the plan of rhods-operator.3.5.0.
// Approved (--approve-installplans), the step ends only with
// rhods-operator.3.5.0 Succeeded.
func TestB04ChannelChangeWaitsForNewCSV(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{rhoai: sim.RHOAI34})
	// The Subscription is Manual from the start (its first plan approved
	// by maasctl), so the plan OLM makes for the new channel is Manual
	// too. Changing the approval in the same write as the channel raced
	// OLM under load: it once made the stable-3.5 plan Automatic 7 s
	// after the stable-3.4 one, with the Subscription already Manual.
	installRHOAIOperator(t, c, "stable-3.4", "--set", "operators[rhoai].approval=Manual", "--approve-installplans")

	manual := []string{onlyRHOAI, ignoreAll, "--set", "operators[rhoai].channel=stable-3.5", "--set", "operators[rhoai].approval=Manual", "--set", "waitTimeoutSeconds=300"}
	r := c.install(t, manual...)
	msg := failure(r, "operators/rhoai")
	if msg == "" {
		sub := get(t, c, "operators.coreos.com/v1alpha1", "Subscription", rhoaiNS, rhoaiPkg)
		var plans []string
		for _, ip := range c.list(t, gvkIP, rhoaiNS) {
			a, _, _ := unstructured.NestedString(ip.Object, "spec", "approval")
			ok, _, _ := unstructured.NestedBool(ip.Object, "spec", "approved")
			csvs, _, _ := unstructured.NestedStringSlice(ip.Object, "spec", "clusterServiceVersionNames")
			plans = append(plans, fmt.Sprintf("%s approval=%s approved=%v csvs=%v (created %s)", ip.GetName(), a, ok, csvs, ip.GetCreationTimestamp()))
		}
		t.Fatalf("operators/rhoai did not stop at the Manual InstallPlan of channel stable-3.5 (exit %d): the old CSV was taken as done\nSubscription spec %v\nInstallPlans %v\n%s", r.exit, sub.Object["spec"], plans, progress(r, "operators/rhoai"))
	}
	mustContain(t, "operators/rhoai failure", msg, "InstallPlan "+rhoaiNS+"/install-", "rhods-operator.3.5.0", "--approve-installplans")
	mustContain(t, "operators/rhoai progress", progress(r, "operators/rhoai"), "channel stable-3.4 → stable-3.5", "rhods-operator.3.4.4 does not count")
	if channel, csv, _ := subscriptionOf(t, c); channel != "stable-3.5" || csv != "rhods-operator.3.4.4" {
		t.Errorf("Subscription channel %s, installed %s; want stable-3.5 with 3.4.4 still installed (plan not approved)", channel, csv)
	}

	r = c.install(t, append(manual, "--approve-installplans")...)
	if msg := failure(r, "operators/rhoai"); msg != "" {
		t.Fatalf("operators/rhoai failed with the plan approvable: %s\n%s", msg, progress(r, "operators/rhoai"))
	}
	pr := progress(r, "operators/rhoai")
	mustContain(t, "operators/rhoai progress", pr, "approved InstallPlan", "rhods-operator.3.5.0 installed")
	if strings.Contains(pr, "rhods-operator.3.4.4 installed") {
		t.Errorf("the old CSV was reported installed:\n%s", pr)
	}
	// When the step ended, the new CSV was installed and Succeeded.
	if _, csv, _ := subscriptionOf(t, c); csv != "rhods-operator.3.5.0" {
		t.Errorf("installed CSV %q after the step, want rhods-operator.3.5.0", csv)
	}
	csv := get(t, c, "operators.coreos.com/v1alpha1", "ClusterServiceVersion", rhoaiNS, "rhods-operator.3.5.0")
	if p, _, _ := unstructured.NestedString(csv.Object, "status", "phase"); p != "Succeeded" {
		t.Errorf("CSV rhods-operator.3.5.0 phase %q when the step ended, want Succeeded", p)
	}
}

// TestB04MissingMaaSConditionKeepsWaiting: on 3.5 the operator reports MaaS
// only under the 3.4 condition name ModelsAsServiceReady=True (never
// ModelsAsAServiceReady) while the DSC is Ready and AIGatewayReady is True.
// The DSC wait must go on until its timeout and say which condition it
// waits for; the old name never satisfies it.
func TestB04MissingMaaSConditionKeepsWaiting(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{faults: sim.Faults{LegacyMaaSCondition: true}})
	r := c.install(t, "--set", "waitTimeoutSeconds=90")
	msg := failure(r, "rhoai/dsc")
	for try := 1; try <= 3 && r.exit != 0 && !strings.Contains(msg, "no ModelsAsAServiceReady condition yet"); try++ {
		// On a loaded machine the 90 s may end before the DSC is Ready
		// but for MaaS: an earlier step's wait ran out (rhoai/dsc is then
		// blocked), or the simulated operator was still registering the
		// components' CRDs (the DSC is Not Ready for kserve, which the
		// message rightly says). What is under test is the wait in that
		// state: resume the install (done steps are unchanged) until the
		// DSC is Ready but for MaaS, then judge the message.
		t.Logf("run %d: rhoai/dsc %q; resuming\n%s", try, msg, failedSummary(r))
		if msg != "" {
			waitDSCReady(t, c, 5*time.Minute)
		}
		r = c.install(t, "--set", "waitTimeoutSeconds=90")
		msg = failure(r, "rhoai/dsc")
	}
	if msg == "" {
		t.Fatalf("rhoai/dsc ended without ModelsAsAServiceReady (exit %d): the 3.4 condition name or the aggregate Ready was taken for MaaS\n%s", r.exit, progress(r, "rhoai/dsc"))
	}
	// The wait ran to its timeout (the run's exit code is 1: a step failed).
	mustContain(t, "rhoai/dsc failure", msg, "timed out waiting for DataScienceCluster default-dsc", "no ModelsAsAServiceReady condition yet", "ModelsAsServiceReady is the RHOAI 3.3/3.4 name")
	dsc := get(t, c, "datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "default-dsc")
	if s, _, _ := unstructured.NestedString(dsc.Object, "spec", "components", "aigateway", "modelsAsAService", "managementState"); s != "Managed" {
		t.Errorf("aigateway.modelsAsAService.managementState = %q, want Managed", s)
	}
}

// waitDSCReady waits until DataScienceCluster default-dsc has Ready=True.
func waitDSCReady(t *testing.T, c *cluster, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(time.Second) {
		dsc := get(t, c, "datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "default-dsc")
		if condStatus(dsc, "Ready") == "True" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("DataScienceCluster default-dsc not Ready within %s: %v", within, dsc.Object["status"])
		}
	}
}

// TestB04LegacyKServeSwitchKept: the RHOAI operator was upgraded to 3.5
// while the DataScienceCluster is the one maasctl wrote for 3.4, with
// spec.components.kserve.modelsAsService.managementState Managed owned by
// field manager maasctl (the case's trigger 2, and the variant where
// maasctl itself set the old field). First the mechanism, on the real
// kube-apiserver: a server-side apply of the 3.5 DSC by the same manager
// that leaves the old field out drops it, and the 3.5 schema defaults it
// to Removed. Then maasctl install must enable aigateway.modelsAsAService,
// leave kserve.modelsAsService Managed exactly as it is, without a 422,
// and a second run must change nothing.
func TestB04LegacyKServeSwitchKept(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	installRHOAIOperator(t, c, "stable-3.5")
	ctx := context.Background()

	render := func(version string) *unstructured.Unstructured {
		objs, err := assets.Render(inventory.Default(), assets.Facts{Host: appsHost, Release: release.New(version, "test")})
		if err != nil {
			t.Fatal(err)
		}
		return objs["rhoai/dsc"][0]
	}
	old := render("3.4")
	if s, _, _ := unstructured.NestedString(old.Object, "spec", "components", "kserve", "modelsAsService", "managementState"); s != "Managed" {
		t.Fatalf("the 3.4 DSC does not set kserve.modelsAsService Managed: %q", s)
	}
	if _, err := c.clients.Apply(ctx, old); err != nil {
		t.Fatalf("apply the 3.4 DataScienceCluster as field manager %s: %v", kube.FieldManager, err)
	}
	// The mechanism: the 3.5 DSC applied as is, by the manager that owns
	// the old field, would drop it (dry run: nothing changes).
	plain, err := c.clients.DryRunApply(ctx, render("3.5"))
	if err != nil {
		t.Fatalf("dry-run apply of the 3.5 DSC: %v", err)
	}
	if s, _, _ := unstructured.NestedString(plain.Object, "spec", "components", "kserve", "modelsAsService", "managementState"); s != "Removed" {
		t.Errorf("a plain server-side apply of the 3.5 DSC leaves kserve.modelsAsService.managementState %q; expected the apiserver to drop the field and default it to Removed (what this test guards against)", s)
	}

	r := c.install(t)
	mustSucceed(t, r)
	mustContain(t, "rhoai/dsc progress", progress(r, "rhoai/dsc"),
		"leaving spec.components.kserve.modelsAsService as it is (managementState Managed)", "MaaS enabled through spec.components.aigateway.modelsAsAService")
	dsc := get(t, c, "datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "default-dsc")
	if s, _, _ := unstructured.NestedString(dsc.Object, "spec", "components", "kserve", "modelsAsService", "managementState"); s != "Managed" {
		t.Errorf("kserve.modelsAsService.managementState = %q after the 3.5 install, want Managed as it was", s)
	}
	if s, _, _ := unstructured.NestedString(dsc.Object, "spec", "components", "aigateway", "modelsAsAService", "managementState"); s != "Managed" {
		t.Errorf("aigateway.modelsAsAService.managementState = %q, want Managed", s)
	}
	if st := condStatus(dsc, "ModelsAsAServiceReady"); st != "True" {
		t.Errorf("ModelsAsAServiceReady = %q, want True (the condition waited on)", st)
	}

	again := c.install(t)
	mustSucceed(t, again)
	for _, id := range stepsWith(again.events, steps.EventDone) {
		if id == "rhoai/dsc" {
			t.Errorf("second run re-applied rhoai/dsc (%q), want unchanged (runs took %s and %s); its progress:\n%s\nfirst run:\n%s", startedMessage(again, "rhoai/dsc"), r.wall, again.wall, progress(again, "rhoai/dsc"), progress(r, "rhoai/dsc"))
		}
	}
	dsc = get(t, c, "datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "default-dsc")
	if s, _, _ := unstructured.NestedString(dsc.Object, "spec", "components", "kserve", "modelsAsService", "managementState"); s != "Managed" {
		t.Errorf("kserve.modelsAsService.managementState = %q after the second run, want Managed", s)
	}
}

// startedMessage is the message of step's started event (why it runs).
func startedMessage(r run, step string) string {
	for _, ev := range r.events {
		if ev.Type == steps.EventStarted && ev.Step == step {
			return ev.Message
		}
	}
	return ""
}

// condStatus returns the status of condition typ, "" when absent.
func condStatus(obj *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}
