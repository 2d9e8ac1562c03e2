package doctor

import (
	"fmt"
	"strings"
	"time"

	"github.com/maasctl/maasctl/internal/verify"
)

// CodeNotInstalled: MaaS is not installed on this cluster, on purpose
// (maasctl uninstall finished) or because nothing installed it yet. It
// stands alone: the checks of every object and step an install makes
// would each fail, and none of those findings would say more.
const CodeNotInstalled = "MAAS-D037"

// Uninstalled is the mark a finished maasctl uninstall left in the cluster
// (steps.UninstalledConfigMap): when it ended and what it kept on purpose.
type Uninstalled struct {
	At   time.Time
	Kept []string
	// Where names the mark ("ConfigMap maasctl/maasctl-uninstalled").
	Where string
}

// notInstalled is the one finding for a cluster MaaS is not installed on:
// the uninstall's mark when there is one, else when no install step has a
// checkpoint and none of the objects every MaaS install has (the
// DataScienceCluster, the Kuadrant CR, the MaaS Gateway, Deployment
// maas-api) exists. nil otherwise: a cluster installed by other means
// than maasctl (no checkpoint, but its objects) gets every finding.
func notInstalled(s *verify.State, steps []StepState, u *Uninstalled) *Finding {
	if u != nil {
		ev := "maasctl uninstall finished"
		if !u.At.IsZero() {
			ev += " at " + u.At.UTC().Format(time.RFC3339)
		}
		ev += " (" + u.Where + ")"
		if len(u.Kept) > 0 {
			ev += "; kept on purpose: " + strings.Join(u.Kept, "; ")
		}
		f := finding(CodeNotInstalled, "MaaS", ev,
			"MaaS was removed from this cluster on purpose; what uninstall kept stays for the next install, which reuses it",
			"maasctl install   (installs MaaS again; if MaaS was installed again by other means, delete "+u.Where+" and run maasctl doctor)")
		return &f
	}
	if len(steps) == 0 {
		return nil
	}
	for _, st := range steps {
		if st.Ran {
			return nil
		}
	}
	if s.DSC != nil || s.Kuadrant != nil || s.Gateway != nil || s.MaaSAPI != nil {
		return nil
	}
	f := finding(CodeNotInstalled, "MaaS", fmt.Sprintf("none of the %d install steps has a checkpoint, and there is no DataScienceCluster, Kuadrant CR, MaaS Gateway or Deployment maas-api", len(steps)),
		"nothing installed MaaS on this cluster yet (or it was uninstalled with --delete-data, which removes maasctl's state too)",
		"maasctl install   (runs every step; 'maasctl plan' shows them first)")
	return &f
}
