package migrate

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// WriteAudit renders the audit (upgrade guide 3.4): the gateway-level
// policies on the MaaS Gateway, old and new, the conflicts between them,
// and what each old tier grants.
func WriteAudit(w io.Writer, st *State, p *Plan) {
	fmt.Fprintf(w, "Gateway-level policies targeting Gateway %s:\n", st.Gateway.Name)
	if len(st.Policies) == 0 {
		fmt.Fprintln(w, "  (none)")
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KIND\tNAMESPACE\tNAME\tCLASS")
		for _, gp := range st.Policies {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", gp.Object.GetKind(), gp.Object.GetNamespace(), gp.Object.GetName(), gp.Class)
		}
		_ = tw.Flush()
	}
	for _, kind := range []string{"AuthPolicy", "TokenRateLimitPolicy"} {
		var old, cur []string
		for _, gp := range st.Policies {
			if gp.Object.GetKind() != kind {
				continue
			}
			switch gp.Class {
			case PolicyOld:
				old = append(old, gp.Object.GetNamespace()+"/"+gp.Object.GetName())
			case PolicyNew:
				cur = append(cur, gp.Object.GetNamespace()+"/"+gp.Object.GetName())
			}
		}
		if len(old) > 0 && len(cur) > 0 {
			fmt.Fprintf(w, "  conflict: %s %s (old) and %s (new) both target %s; Kuadrant behaviour is undefined until the old one is gone\n",
				kind, strings.Join(old, ", "), strings.Join(cur, ", "), st.Gateway.Name)
		}
	}
	fmt.Fprintln(w)
	var src []string
	for _, cm := range st.TierConfigMaps {
		src = append(src, key(cm))
	}
	if len(src) == 0 {
		src = []string{"no " + TierConfigMapName + " ConfigMap"}
	}
	fmt.Fprintf(w, "Tiers (%s):\n", strings.Join(src, ", "))
	if len(p.Tiers) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, t := range p.Tiers {
		name := t.Tier.Name
		if t.Tier.DisplayName != "" {
			name += " (" + t.Tier.DisplayName + ")"
		}
		fmt.Fprintf(w, "  %s, level %d\n", name, t.Tier.Level)
		fmt.Fprintf(w, "    groups:         %s\n", orNone(t.Tier.Groups))
		access := "yes"
		if !t.GatewayAccess {
			access = "no (denied by the gateway AuthPolicy)"
		}
		fmt.Fprintf(w, "    gateway access: %s\n", access)
		var lim []string
		for _, l := range t.Limits {
			lim = append(lim, l.String()+" tokens per user")
		}
		fmt.Fprintf(w, "    token limits:   %s\n", orNone(lim))
		for _, s := range t.LimitSources {
			fmt.Fprintf(w, "                    from %s\n", s)
		}
		var ms []string
		for _, m := range t.Models {
			ms = append(ms, m.String())
		}
		fmt.Fprintf(w, "    models:         %s\n", orNone(ms))
	}
}

// WritePlan renders the plan: the objects to create, the old objects to
// delete once they are ready, the notes and the blockers.
func WritePlan(w io.Writer, p *Plan) {
	fmt.Fprintln(w, "Create (server-side apply, field manager maasctl):")
	objs := p.Objects()
	if len(objs) == 0 {
		fmt.Fprintln(w, "  (nothing)")
	}
	for _, o := range objs {
		fmt.Fprintf(w, "  %s%s\n", key(o), summary(o))
	}
	for _, r := range p.Reused {
		fmt.Fprintf(w, "  %s (exists, reused)\n", r)
	}
	fmt.Fprintln(w, "Then, once every new object is Ready/Active and its Kuadrant policies are Enforced (or overridden only by the old ones deleted here, then Enforced after):")
	if len(p.Delete) == 0 && len(p.Unannotate) == 0 {
		fmt.Fprintln(w, "  (nothing to remove)")
	}
	for _, r := range p.Delete {
		fmt.Fprintf(w, "  delete %s\n", r)
	}
	for _, u := range p.Unannotate {
		fmt.Fprintf(w, "  remove annotation %s from %s (was %s)\n", TierAnnotation, u.Ref, u.Value)
	}
	if len(p.Skipped) > 0 {
		fmt.Fprintf(w, "Skipped (%s): no MaaSModelRef, in no tier's objects, annotation left as it is:\n", SkipInvalidFlag)
		for _, s := range p.Skipped {
			fmt.Fprintf(w, "  skip %s\n", s)
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, b := range p.Blockers {
		fmt.Fprintf(w, "BLOCKED: %s\n", b)
	}
}

// summary describes a planned object in a few words.
func summary(o *unstructured.Unstructured) string {
	switch o.GetKind() {
	case maasModelRefKind:
		n, _, _ := unstructured.NestedString(o.Object, "spec", "modelRef", "name")
		return " -> LLMInferenceService " + n
	case maasAuthPolicyKind:
		return fmt.Sprintf(" groups %s, models %s", groupNames(o, "subjects"), modelNames(o))
	case maasSubscriptionKind:
		prio, _, _ := unstructured.NestedInt64(o.Object, "spec", "priority")
		var lim []string
		refs, _, _ := unstructured.NestedSlice(o.Object, "spec", "modelRefs")
		if len(refs) > 0 {
			rm, _ := refs[0].(map[string]any)
			rates, _ := rm["tokenRateLimits"].([]any)
			for _, r := range rates {
				x, _ := r.(map[string]any)
				lim = append(lim, fmt.Sprintf("%v/%v", x["limit"], x["window"]))
			}
		}
		return fmt.Sprintf(" owners %s, priority %d, limits %s per user, models %s", groupNames(o, "owner"), prio, strings.Join(lim, " + "), modelNames(o))
	}
	return ""
}

func groupNames(o *unstructured.Unstructured, field string) string {
	gs, _, _ := unstructured.NestedSlice(o.Object, "spec", field, "groups")
	var out []string
	for _, g := range gs {
		gm, _ := g.(map[string]any)
		out = append(out, fmt.Sprint(gm["name"]))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func modelNames(o *unstructured.Unstructured) string {
	refs, _, _ := unstructured.NestedSlice(o.Object, "spec", "modelRefs")
	var out []string
	for _, r := range refs {
		rm, _ := r.(map[string]any)
		out = append(out, fmt.Sprintf("%v/%v", rm["namespace"], rm["name"]))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "(none)"
	}
	return strings.Join(l, ", ")
}

// PlanYAML renders the objects to create as one multi-document YAML
// stream, ready for kubectl apply.
func PlanYAML(p *Plan) ([]byte, error) {
	var buf bytes.Buffer
	for _, o := range p.Objects() {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", key(o), err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	return buf.Bytes(), nil
}
