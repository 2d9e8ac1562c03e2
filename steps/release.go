package steps

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

// detectRelease reads which RHOAI release the cluster serves, in this order: the
// DataScienceCluster CRD's v2 schema (authoritative for the MaaS switch and
// the components), the version of the rhods-operator CSV the inventory's
// Subscription installed, the inventory's rhoai channel (stable-3.4 → 3.4),
// and finally 3.5. It only reads; a kind the cluster does not serve (no
// OLM) moves on to the next source.
func detectRelease(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (release.Release, error) {
	csvVersion, csvName, err := installedRHOAIVersion(ctx, c, inv)
	if err != nil {
		return release.Release{}, err
	}
	crd, err := c.Dynamic.Resource(crdGVR).Get(ctx, release.DSCCRD, metav1.GetOptions{})
	switch {
	case err == nil:
		if l, ok := release.FromCRD(crd); ok {
			// The schema decides the layout; the CSV, when it agrees, names
			// the exact minor (3.3 and 3.4 share the kserve layout).
			if csvVersion != "" && (release.Minor(csvVersion) < 5) == l.KServeMaaS() {
				l.Version = csvVersion
				l.Source = "DataScienceCluster CRD schema and CSV " + csvName
			}
			return l, nil
		}
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
	default:
		return release.Release{}, fmt.Errorf("get CRD %s: %w", release.DSCCRD, err)
	}
	if csvVersion != "" {
		return release.New(csvVersion, "CSV "+csvName), nil
	}
	if op := inv.Operator("rhoai"); op != nil {
		if v := release.VersionOf(op.Channel); v != "" {
			return release.New(v, "channel "+op.Channel), nil
		}
	}
	return release.New(release.RHOAI35, "default"), nil
}

// installedRHOAIVersion returns the minor version and name of the CSV the
// inventory's rhods-operator Subscription installed, or "" when there is
// none (yet).
func installedRHOAIVersion(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (string, string, error) {
	v, name, err := installedRHOAICSV(ctx, c, inv)
	return release.VersionOf(v), name, err
}

// installedRHOAICSV returns the CSV the inventory's rhods-operator
// Subscription installed (status.installedCSV): its spec.version (3.4.4)
// and name, or "" when there is none (yet), OLM is not served or reading
// it is forbidden.
func installedRHOAICSV(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (string, string, error) {
	op := inv.Operator("rhoai")
	if op == nil {
		return "", "", nil
	}
	ri, _, err := c.Resource(subscriptionGVK, op.Namespace)
	if kube.IsNotServed(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	sub, err := ri.Get(ctx, op.Package, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("get Subscription %s/%s: %w", op.Namespace, op.Package, err)
	}
	name, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
	if name == "" {
		return "", "", nil
	}
	cri, _, err := c.Resource(csvGVK, op.Namespace)
	if err != nil {
		return "", "", err
	}
	csv, err := cri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("get CSV %s/%s: %w", op.Namespace, name, err)
	}
	v, _, _ := unstructured.NestedString(csv.Object, "spec", "version")
	return v, name, nil
}

// VersionSkew is an RHOAI minor the cluster serves that is not the minor of
// the inventory's rhoai channel (case B04): writing the channel's layout
// would be pruned (3.4 CRD) or rejected (3.5 CEL rules), and changing the
// channel is an operator upgrade.
type VersionSkew struct {
	// Channel is operators[rhoai].channel; Want its minor (3.5).
	Channel, Want string
	// Have is the minor the cluster serves; HaveVersion the installed CSV's
	// spec.version (3.4.4) and CSV its namespace/name, both "" when the
	// minor comes from the DataScienceCluster CRD schema alone.
	Have, HaveVersion, CSV string
	// Source says where Have was read: "CSV ..." or the CRD.
	Source string
	// Namespace and Package are the rhoai Subscription's.
	Namespace, Package string
}

// Error names the detected version and its CSV, the field the inventory's
// channel expects, and both fixes: Problem, then Fix.
func (v *VersionSkew) Error() string { return v.Problem() + ": " + v.Fix() }

// Problem names the detected version and its CSV (or CRD) and the field
// the inventory's channel expects.
func (v *VersionSkew) Problem() string {
	want, have := release.New(v.Want, ""), release.New(v.Have, "")
	what, ver := "CSV "+v.CSV, v.Have
	if v.CSV == "" {
		what = v.Source
	} else if v.HaveVersion != "" {
		ver = v.HaveVersion
	}
	return fmt.Sprintf("RHOAI version skew: the cluster runs RHOAI operator version %s (%s; its DataScienceCluster switches MaaS with %s), but operators[rhoai].channel is %s, whose release expects %s",
		ver, what, have.MaaSField(), v.Channel, want.MaaSField())
}

// Fix says how to resolve the skew either way.
func (v *VersionSkew) Fix() string {
	if release.Minor(v.Want) < release.Minor(v.Have) {
		return fmt.Sprintf("set operators[rhoai].channel=stable-%s to install for the running release; OLM never downgrades an operator, so RHOAI %s needs an uninstall of %s first",
			v.Have, v.Want, v.Have)
	}
	return fmt.Sprintf("set operators[rhoai].channel=stable-%s to install for the running release, or upgrade the operator to %s first "+
		"(oc patch subscription %s -n %s --type merge -p '{\"spec\":{\"channel\":\"%s\"}}', wait until its CSV %s.%s.x is Succeeded) and re-run; "+
		"--ignore-preflight rhoai-version lets maasctl change the channel itself",
		v.Have, v.Want, v.Package, v.Namespace, v.Channel, v.Package, v.Want)
}

// DetectVersionSkew compares the RHOAI minor the cluster serves (the
// installed rhods-operator CSV's spec.version, else the DataScienceCluster
// CRD schema's layout) with the minor of operators[rhoai].channel. It
// returns nil when they agree, when the channel names no minor
// (stable-3.x) or when the cluster serves no RHOAI yet. It only reads.
//
// Only the CSV tells 3.3 from 3.4; from the CRD alone a skew is reported
// only when the MaaS switch differs (3.5 against 3.3/3.4).
func DetectVersionSkew(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (*VersionSkew, error) {
	op := inv.Operator("rhoai")
	if op == nil {
		return nil, nil
	}
	want := release.VersionOf(op.Channel)
	if want == "" {
		return nil, nil
	}
	skew := &VersionSkew{Channel: op.Channel, Want: want, Namespace: op.Namespace, Package: op.Package}
	full, name, err := installedRHOAICSV(ctx, c, inv)
	if err != nil {
		return nil, err
	}
	if have := release.VersionOf(full); have != "" {
		if have == want {
			return nil, nil
		}
		skew.Have, skew.HaveVersion, skew.CSV, skew.Source = have, full, op.Namespace+"/"+name, "CSV "+name
		return skew, nil
	}
	crd, err := c.Dynamic.Resource(crdGVR).Get(ctx, release.DSCCRD, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || kube.IsNotServed(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get CRD %s: %w", release.DSCCRD, err)
	}
	l, ok := release.FromCRD(crd)
	if !ok || l.KServeMaaS() == release.New(want, "").KServeMaaS() {
		return nil, nil
	}
	skew.Have, skew.Source = l.Version, "the DataScienceCluster CRD "+release.DSCCRD+" schema, no rhods-operator CSV of Subscription "+op.Namespace+"/"+op.Package
	return skew, nil
}
