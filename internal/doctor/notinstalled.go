package doctor

import (
	"strings"
	"time"
)

// CodeNotInstalled: maasctl uninstall removed MaaS from this cluster on
// purpose. It stands alone: the checks of every object and step an install
// makes would each fail, and none of those findings would say more.
const CodeNotInstalled = "MAAS-D037"

// Uninstalled is the mark a finished maasctl uninstall left in the cluster
// (steps.UninstalledConfigMap): when it ended and what it kept on purpose.
type Uninstalled struct {
	At   time.Time
	Kept []string
	// Where names the mark ("ConfigMap maasctl/maasctl-uninstalled").
	Where string
}

// notInstalled is the one finding for a cluster maasctl uninstall removed
// MaaS from (its mark u), nil without a mark. A cluster nothing installed
// MaaS on yet gets every finding instead: there, what is missing before
// an install (the model server not serving, say) is worth naming.
func notInstalled(u *Uninstalled) *Finding {
	if u == nil {
		return nil
	}
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
