package inventory

import (
	"fmt"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// modelKey identifies a model as namespace/name.
func modelKey(namespace, name string) string { return namespace + "/" + name }

func (v *validator) externalModels(p *field.Path, models []ExternalModel) map[string]bool {
	byKey := map[string]bool{}
	names := map[string]*field.Path{}
	providers := map[string]int{}
	for i := range models {
		m := &models[i]
		mp := p.Index(i)
		v.label(mp.Child("name"), m.Name, "model name (ExternalModel and MaaSModelRef name, and the model ID clients send)", "qwen35-9b-coder")
		if m.Name != "" {
			if prev, ok := names[m.Name]; ok {
				e := field.Duplicate(mp.Child("name"), m.Name)
				e.Detail = fmt.Sprintf("%s has the same name; clients select a model by name, so names must be unique", prev)
				v.add(e)
			} else {
				names[m.Name] = mp
			}
		}
		v.label(mp.Child("namespace"), m.Namespace, "model namespace", "llm-coding-assistant")
		byKey[modelKey(m.Namespace, m.Name)] = true
		v.label(mp.Child("providerName"), m.ProviderName, "ExternalProvider name", "llama-coder-provider")
		v.oneOf(mp.Child("providerType"), m.ProviderType, providerTypes)
		v.endpoint(mp.Child("endpoint"), m.Endpoint, m.Namespace)
		for _, msg := range validation.IsValidPortNum(m.Port) {
			v.add(field.Invalid(mp.Child("port"), m.Port, msg+", e.g. 443 for HTTPS or 8080"))
		}
		// ExternalProvider spec.auth.secretRef.name has pattern
		// ^[a-z0-9]([a-z0-9\-]*[a-z0-9])?$: no dots, although Kubernetes
		// allows them in Secret names (case B16).
		if m.APIKeySecret == "" {
			v.add(field.Required(mp.Child("apiKeySecret"), "set the Secret (key api-key) that holds the provider API key, e.g. llama-coder-api-key"))
		} else if msgs := validation.IsDNS1123Label(m.APIKeySecret); len(msgs) > 0 {
			detail := "the ExternalProvider CRD accepts only ^[a-z0-9]([a-z0-9\\-]*[a-z0-9])?$ for spec.auth.secretRef.name (no dots or capitals, although Kubernetes allows dots in Secret names)"
			if fix := sanitizeName(m.APIKeySecret, false); fix != "" {
				detail += fmt.Sprintf("; copy the Secret to a compliant name such as %s and use that", fix)
			}
			v.add(field.Invalid(mp.Child("apiKeySecret"), m.APIKeySecret, detail))
		}
		if v.required(mp.Child("targetModel"), m.TargetModel, "set the model name the upstream server expects, e.g. qwen35-9b-coder") && len(m.TargetModel) > 253 {
			v.add(field.TooLong(mp.Child("targetModel"), m.TargetModel, 253))
		}
		if v.required(mp.Child("apiFormat"), m.APIFormat, "set the request format, e.g. openai-chat") && len(m.APIFormat) > 63 {
			v.add(field.TooLong(mp.Child("apiFormat"), m.APIFormat, 63))
		}
		switch {
		case m.Path == "":
			v.add(field.Required(mp.Child("path"), "set the upstream request path, e.g. /v1/chat/completions"))
		case !strings.HasPrefix(m.Path, "/"):
			v.add(field.Invalid(mp.Child("path"), m.Path, "must start with /: use /"+m.Path))
		case len(m.Path) > 512:
			v.add(field.TooLong(mp.Child("path"), m.Path, 512))
		}

		// One ExternalProvider has one endpoint and one key; models that share
		// it must agree on them.
		if m.ProviderName != "" {
			pk := modelKey(m.Namespace, m.ProviderName)
			if j, ok := providers[pk]; ok {
				o := &models[j]
				if o.Endpoint != m.Endpoint || o.Port != m.Port || o.TLS != m.TLS || o.ProviderType != m.ProviderType || o.APIKeySecret != m.APIKeySecret {
					v.add(field.Invalid(mp.Child("providerName"), m.ProviderName, fmt.Sprintf("%s uses this provider with a different providerType, endpoint, port, tls or apiKeySecret; give this model its own providerName or make them equal", p.Index(j))))
				}
			} else {
				providers[pk] = i
			}
		}
	}
	return byKey
}

// endpoint checks an ExternalProvider endpoint: a host name, no scheme, port
// or path.
func (v *validator) endpoint(p *field.Path, s, namespace string) {
	if s == "" {
		v.add(field.Required(p, "set the host name of the model server, e.g. api.openai.com"))
		return
	}
	host := s
	var fixes []string
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
		fixes = append(fixes, "scheme")
	}
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
		fixes = append(fixes, "path")
	}
	port := ""
	if h, pt, err := net.SplitHostPort(host); err == nil {
		host, port = h, pt
		fixes = append(fixes, "port")
	}
	if len(fixes) > 0 {
		detail := fmt.Sprintf("remove the %s: use %s", strings.Join(fixes, " and the "), host)
		if port != "" {
			detail += fmt.Sprintf(" and set port: %s", port)
		}
		v.add(field.Invalid(p, s, detail))
		return
	}
	if len(s) > 253 {
		v.add(field.TooLong(p, s, 253))
		return
	}
	if !endpointRE.MatchString(s) {
		detail := "must be a fully qualified host name (ExternalProvider spec.endpoint pattern), e.g. api.openai.com"
		if !strings.Contains(s, ".") && validation.IsDNS1123Label(s) == nil {
			ns := namespace
			if ns == "" {
				ns = "<namespace>"
			}
			detail = fmt.Sprintf("a bare name is rejected by the ExternalProvider CRD; for an in-cluster Service use %s.%s.svc.cluster.local", s, ns)
		}
		v.add(field.Invalid(p, s, detail))
	}
}

// subjects checks the groups and users of a policy or subscription.
func (v *validator) subjects(p *field.Path, groups, users []string) {
	if len(groups) == 0 && len(users) == 0 {
		v.add(field.Required(p.Child("groups"), "set at least one group or user, e.g. groups: [system:authenticated]"))
	}
	for i, g := range groups {
		v.required(p.Child("groups").Index(i), g, "remove the empty group name")
	}
	for i, u := range users {
		v.required(p.Child("users").Index(i), u, "remove the empty user name")
	}
}

// modelRef checks that a reference names an externalModels entry.
func (v *validator) modelRef(p *field.Path, name, namespace string, models map[string]bool) {
	okName := v.required(p.Child("name"), name, "set the name of an externalModels entry")
	okNS := v.required(p.Child("namespace"), namespace, "set the namespace of that externalModels entry")
	if !okName || !okNS || models[modelKey(namespace, name)] {
		return
	}
	var known []string
	for k := range models {
		known = append(known, k)
	}
	sort.Strings(known)
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	e := field.NotFound(p, modelKey(namespace, name))
	e.Detail = fmt.Sprintf("no externalModels entry has name %s and namespace %s; known models (namespace/name): %s", name, namespace, list)
	v.add(e)
}

func (v *validator) authPolicies(p *field.Path, policies []AuthPolicy, models map[string]bool) map[string]bool {
	granted := map[string]bool{}
	names := map[string]*field.Path{}
	for i := range policies {
		ap := &policies[i]
		pp := p.Index(i)
		v.label(pp.Child("name"), ap.Name, "MaaSAuthPolicy name", "llama-coder-access")
		v.unique(pp, ap.Name, names, "MaaSAuthPolicy names must be unique in the MaaS namespace")
		v.subjects(pp, ap.Groups, ap.Users)
		if len(ap.ModelRefs) == 0 {
			v.add(field.Required(pp.Child("modelRefs"), "list at least one model (name and namespace of an externalModels entry)"))
		}
		seen := map[string]bool{}
		for j, r := range ap.ModelRefs {
			rp := pp.Child("modelRefs").Index(j)
			v.modelRef(rp, r.Name, r.Namespace, models)
			k := modelKey(r.Namespace, r.Name)
			if seen[k] {
				e := field.Duplicate(rp, k)
				e.Detail = "listed twice; remove one"
				v.add(e)
			}
			seen[k] = true
			granted[k] = true
		}
	}
	return granted
}

func (v *validator) subscriptions(p *field.Path, subs []Subscription, models, granted map[string]bool) {
	names := map[string]*field.Path{}
	priorities := map[int]*field.Path{}
	for i := range subs {
		s := &subs[i]
		sp := p.Index(i)
		v.label(sp.Child("name"), s.Name, "MaaSSubscription name", "llama-coder-default")
		v.unique(sp, s.Name, names, "MaaSSubscription names must be unique in the MaaS namespace")
		if s.Priority < math.MinInt32 || s.Priority > math.MaxInt32 {
			v.add(field.Invalid(sp.Child("priority"), s.Priority, "must fit in 32 bits (MaaSSubscription spec.priority is int32)"))
		}
		// maas-controller marks subscriptions sharing a spec.priority
		// SpecPriorityDuplicate=True (SharedPriority): for a user in both,
		// maas-api then picks one by a tie-break the user cannot see.
		if prev, ok := priorities[s.Priority]; ok {
			e := field.Duplicate(sp.Child("priority"), s.Priority)
			e.Detail = fmt.Sprintf("%s has the same priority; the MaaS controller flags both SpecPriorityDuplicate, and for a user in both maas-api picks one by a tie-break the user cannot see; give each subscription its own priority (higher wins)", prev)
			v.add(e)
		} else {
			priorities[s.Priority] = sp
		}
		v.subjects(sp, s.Groups, s.Users)
		if len(s.ModelRefs) == 0 {
			v.add(field.Required(sp.Child("modelRefs"), "list at least one model with its tokenRateLimits"))
		}
		seen := map[string]bool{}
		for j := range s.ModelRefs {
			m := &s.ModelRefs[j]
			mp := sp.Child("modelRefs").Index(j)
			v.modelRef(mp, m.Name, m.Namespace, models)
			k := modelKey(m.Namespace, m.Name)
			if seen[k] {
				e := field.Duplicate(mp, k)
				e.Detail = "listed twice; remove one"
				v.add(e)
			}
			seen[k] = true
			// A model in a subscription but in no auth policy stays Pending
			// with "No active governance pairing found" (case B17).
			if m.Name != "" && m.Namespace != "" && models[k] && !granted[k] {
				v.add(field.Invalid(mp, k, "no authPolicies entry grants access to this model, so MaaS leaves it Pending (\"No active governance pairing found\"); add it to the modelRefs of an authPolicies entry"))
			}
			lp := mp.Child("tokenRateLimits")
			if len(m.TokenRateLimits) == 0 {
				v.add(field.Required(lp, "set at least one limit, e.g. [{limit: 200000, window: 1h}]"))
			}
			for l, trl := range m.TokenRateLimits {
				v.tokenRateLimit(lp.Index(l), trl)
			}
		}
	}
}

func (v *validator) tokenRateLimit(p *field.Path, t TokenRateLimit) {
	if t.Limit < 1 || t.Limit > maxTokenLimit {
		v.add(field.Invalid(p.Child("limit"), t.Limit, fmt.Sprintf("must be between 1 and %d tokens per window (MaaSSubscription tokenRateLimits[].limit)", maxTokenLimit)))
	}
	wp := p.Child("window")
	switch {
	case t.Window == "":
		v.add(field.Required(wp, "set the window, e.g. 1h"))
	case !windowRE.MatchString(t.Window):
		detail := "must be 1 to 9999 followed by s, m or h (MaaSSubscription pattern ^[1-9]\\d{0,3}(s|m|h)$), e.g. 1m, 1h or 24h"
		if m := daysRE.FindStringSubmatch(t.Window); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil && n <= 9999/24 {
				detail = fmt.Sprintf("days are not supported: use %dh", n*24)
			}
		}
		v.add(field.Invalid(wp, t.Window, detail))
	}
}
