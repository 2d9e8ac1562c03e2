package doctor

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/verify"
)

// CodeSharedPriority: a MaaSSubscription of the installed inventory shares
// its spec.priority with another subscription (issue 18).
const CodeSharedPriority = "MAAS-D035"

// sharedPriority reads the SpecPriorityDuplicate condition maas-controller
// writes on every MaaSSubscription (maassubscription_controller.go,
// duplicatePriorityScanHandler: True, reason SharedPriority, message
// "spec.priority N is shared with: ns/a, ..."). For a user in both
// subscriptions maas-api picks one by a tie-break the user cannot see, so
// the token limit that applies is not the one the inventory's priorities
// promise. maasctl's own inventory cannot hold two equal priorities
// (inventory validation), so a peer is a subscription someone else made:
// the fix changes that one, or the inventory's priority.
func sharedPriority(s *verify.State) []Finding {
	var out []Finding
	for _, is := range s.Inv.Subscriptions {
		live := byName(s.Subscriptions, is.Name)
		c, ok := cond(live, "SpecPriorityDuplicate")
		if !ok || c.Status != "True" {
			continue
		}
		ns := s.Inv.RHOAI.MaaSNamespace
		peers := peersOf(c.Message)
		fix := fmt.Sprintf("give subscriptions[%s].priority in the inventory a value no other MaaSSubscription uses, then maasctl install", is.Name)
		if len(peers) > 0 {
			fix = fmt.Sprintf("oc patch maassubscription %s -n %s --type merge -p '{\"spec\":{\"priority\":%d}}'   (a priority no other MaaSSubscription uses, below this one's; or change subscriptions[%s].priority in the inventory and run maasctl install)",
				peers[0][1], peers[0][0], freePriority(s, is.Priority), is.Name)
		}
		out = append(out, finding(CodeSharedPriority, obj("MaaSSubscription", ns, is.Name), c.String(),
			"another MaaSSubscription has the same spec.priority; for a user in both, maas-api picks one of them by a tie-break, so the token limit that applies may not be this one",
			fix))
	}
	return out
}

// peersOf parses "spec.priority N is shared with: ns/a, ns/b" into
// namespace/name pairs; nil when the message has another shape.
func peersOf(msg string) [][2]string {
	_, list, ok := strings.Cut(msg, "is shared with: ")
	if !ok {
		return nil
	}
	var out [][2]string
	for _, p := range strings.Split(list, ",") {
		if ns, name, ok := strings.Cut(strings.TrimSpace(p), "/"); ok && ns != "" && name != "" {
			out = append(out, [2]string{ns, name})
		}
	}
	return out
}

// freePriority is the highest spec.priority below p that no live
// MaaSSubscription in the MaaS namespace uses: given to the peer, the
// inventory's subscription wins for users in both.
func freePriority(s *verify.State, p int) int {
	used := map[int64]bool{}
	for _, l := range s.Subscriptions {
		if v, ok, _ := unstructured.NestedInt64(l.Object, "spec", "priority"); ok {
			used[v] = true
		}
	}
	for q := p - 1; ; q-- {
		if !used[int64(q)] {
			return q
		}
	}
}
