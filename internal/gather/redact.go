package gather

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/waiters"
)

// lastApplied is kubectl's annotation holding the whole applied object,
// Secret data included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

var secretEnvName = regexp.MustCompile(`(?i)pass|secret|token|key|credential|auth`)

// Redact returns a copy of u fit for a support archive: managedFields and
// the last-applied annotation dropped, Secret data and stringData replaced
// by "<redacted: N bytes>", and literal env values with secret-looking
// names removed from Pods and Deployments.
func Redact(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata", "managedFields")
	if ann := c.GetAnnotations(); ann != nil {
		if _, ok := ann[lastApplied]; ok {
			delete(ann, lastApplied)
			c.SetAnnotations(ann)
		}
	}
	switch c.GetKind() {
	case "Secret":
		for _, f := range []string{"data", "stringData"} {
			m, ok, _ := unstructured.NestedMap(c.Object, f)
			if !ok {
				continue
			}
			for k, v := range m {
				s, _ := v.(string)
				n := len(s)
				if f == "data" { // base64; padding is not data
					if b, err := base64.StdEncoding.DecodeString(s); err == nil {
						n = len(b)
					}
				}
				m[k] = fmt.Sprintf("<redacted: %d bytes>", n)
			}
			_ = unstructured.SetNestedMap(c.Object, m, f)
		}
	case "Pod":
		redactPodSpec(c.Object, "spec")
	case "Deployment":
		redactPodSpec(c.Object, "spec", "template", "spec")
	}
	return c
}

func redactPodSpec(obj map[string]any, path ...string) {
	for _, list := range []string{"containers", "initContainers"} {
		cs, ok, _ := unstructured.NestedSlice(obj, append(path, list)...)
		if !ok {
			continue
		}
		for _, c := range cs {
			cm, _ := c.(map[string]any)
			env, _ := cm["env"].([]any)
			for _, e := range env {
				em, _ := e.(map[string]any)
				name, _ := em["name"].(string)
				if _, lit := em["value"]; lit && secretEnvName.MatchString(name) {
					em["value"] = "<redacted>"
				}
			}
		}
		_ = unstructured.SetNestedSlice(obj, cs, append(path, list)...)
	}
}

// conditionsTable renders phase and conditions of every object that has a
// status.
func conditionsTable(objs []*unstructured.Unstructured) []byte {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tPHASE\tCONDITION")
	for _, u := range objs {
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		l, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if phase == "" && len(l) == 0 {
			continue
		}
		ns := u.GetNamespace()
		if ns == "" {
			ns = "-"
		}
		if len(l) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\n", u.GetKind(), ns, u.GetName(), phase)
		}
		for _, x := range l {
			m, _ := x.(map[string]any)
			typ, _ := m["type"].(string)
			c, _ := waiters.GetCondition(u, typ)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.GetKind(), ns, u.GetName(), dash(phase), oneLine(c.String()))
		}
	}
	_ = tw.Flush()
	return b.Bytes()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// eventsText renders core/v1 events oldest first.
func eventsText(evs []*unstructured.Unstructured) []byte {
	type row struct{ t, line string }
	var rows []row
	for _, e := range evs {
		t, _, _ := unstructured.NestedString(e.Object, "lastTimestamp")
		if t == "" {
			t, _, _ = unstructured.NestedString(e.Object, "eventTime")
		}
		if t == "" {
			t = e.GetCreationTimestamp().UTC().Format("2006-01-02T15:04:05Z")
		}
		typ, _, _ := unstructured.NestedString(e.Object, "type")
		reason, _, _ := unstructured.NestedString(e.Object, "reason")
		kind, _, _ := unstructured.NestedString(e.Object, "involvedObject", "kind")
		name, _, _ := unstructured.NestedString(e.Object, "involvedObject", "name")
		msg, _, _ := unstructured.NestedString(e.Object, "message")
		count, _, _ := unstructured.NestedInt64(e.Object, "count")
		rows = append(rows, row{t, fmt.Sprintf("%s\t%s\t%s\t%s/%s\tx%d\t%s", t, typ, reason, kind, name, count, oneLine(msg))})
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].t < rows[j].t })
	var b bytes.Buffer
	for _, r := range rows {
		b.WriteString(r.line + "\n")
	}
	return b.Bytes()
}
