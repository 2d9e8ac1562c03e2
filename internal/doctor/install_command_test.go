package doctor

import "testing"

func TestWithInstallCommand(t *testing.T) {
	const cmd = "maasctl install -f /site/site.yaml"
	for _, c := range []struct{ fix, want string }{
		{"maasctl install   (re-creates it from the inventory)", cmd + "   (re-creates it from the inventory)"},
		{"maasctl install", cmd},
		{"maasctl install, then restart Authorino", cmd + ", then restart Authorino"},
		{"change authPolicies in the inventory, then maasctl install -f <inventory>", "change authPolicies in the inventory, then maasctl install -f <inventory>"},
		{"maasctl install --defaults", "maasctl install --defaults"},
		{"maasctl installs nothing here", "maasctl installs nothing here"},
		{"maasctl install; maasctl install", cmd + "; " + cmd},
		{"oc scale deployment x -n y --replicas=1", "oc scale deployment x -n y --replicas=1"},
	} {
		if got := withInstallCommand(c.fix, cmd); got != c.want {
			t.Errorf("withInstallCommand(%q) = %q, want %q", c.fix, got, c.want)
		}
	}
}
