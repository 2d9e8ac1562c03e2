package verify

import "testing"

func TestNameInstallCommand(t *testing.T) {
	const site = "maasctl install -f /site/site.yaml"
	for _, c := range []struct{ fix, cmd, want string }{
		{"maasctl install   (re-creates it from the inventory)", site, site + "   (re-creates it from the inventory)"},
		{"maasctl install", site, site},
		{"maasctl install, then restart Authorino", site, site + ", then restart Authorino"},
		{"change authPolicies in the inventory, then maasctl install -f <inventory>", site, "change authPolicies in the inventory, then maasctl install -f <inventory>"},
		{"maasctl install --defaults", site, "maasctl install --defaults"},
		{"maasctl installs nothing here", site, "maasctl installs nothing here"},
		{"maasctl install; maasctl install", site, site + "; " + site},
		{"oc scale deployment x -n y --replicas=1", site, "oc scale deployment x -n y --replicas=1"},
		{"maasctl install", "", "maasctl install"},
	} {
		if got := NameInstallCommand(c.fix, c.cmd); got != c.want {
			t.Errorf("NameInstallCommand(%q, %q) = %q, want %q", c.fix, c.cmd, got, c.want)
		}
	}
}
