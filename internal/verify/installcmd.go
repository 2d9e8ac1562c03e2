package verify

import "strings"

// NameInstallCommand replaces each "maasctl install" in fix that names no
// inventory of its own (not followed by " -f" or " --defaults") with cmd,
// the command that re-applies the inventory the cluster was judged
// against ("maasctl install -f site.yaml"): a plain install on a cluster
// installed from a file stops without writing, so a fix must name it.
// An empty cmd leaves fix as it is.
func NameInstallCommand(fix, cmd string) string {
	if cmd == "" {
		return fix
	}
	const plain = "maasctl install"
	var b strings.Builder
	for {
		i := strings.Index(fix, plain)
		if i < 0 {
			b.WriteString(fix)
			return b.String()
		}
		rest := fix[i+len(plain):]
		b.WriteString(fix[:i])
		if rest == "" || !(rest[0] >= 'a' && rest[0] <= 'z') && !strings.HasPrefix(rest, " -f") && !strings.HasPrefix(rest, " --defaults") {
			b.WriteString(cmd)
		} else {
			b.WriteString(plain)
		}
		fix = rest
	}
}
