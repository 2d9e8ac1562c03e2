package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// EnvAudit, set to "1", turns on Options.AuditLog for every Start that does
// not set it (the e2e tests then log each control plane's requests by
// program at its end).
const EnvAudit = "MAASCTL_TESTENV_AUDIT"

// auditLogName is the audit log's file name in the state folder.
const auditLogName = "audit.log"

// auditPolicy is the audit policy of Options.AuditLog: every request at
// level Metadata (who, verb, resource, response code; no bodies, so no
// Secret data), logged once when the response is complete (stage
// ResponseComplete; watches also at ResponseStarted). Upstream:
// k8s.io/apiserver/pkg/apis/audit/v1 Policy.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// auditArgs writes the audit policy into stateDir and returns the
// kube-apiserver flags that log to stateDir/audit.log; none when off.
func auditArgs(on bool, stateDir string) ([]string, error) {
	if !on {
		return nil, nil
	}
	policy := filepath.Join(stateDir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, fmt.Errorf("audit policy: %w", err)
	}
	return []string{
		"--audit-policy-file=" + policy,
		// With no --audit-log-maxsize, -maxage or -maxbackup the log is
		// one file, never rotated (a test's control plane logs a few MB).
		"--audit-log-path=" + filepath.Join(stateDir, auditLogName),
	}, nil
}

// AuditLog returns the path of the API server's audit log
// (StateDir/audit.log) when the control plane was started with
// Options.AuditLog (or EnvAudit=1), else "".
func (e *Env) AuditLog() string {
	p := filepath.Join(e.stateDir, auditLogName)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// AuditCount is how many requests one program sent with one verb to one
// resource, as the API server's audit log records them.
type AuditCount struct {
	// Program is the User-Agent up to its first "/" (client-go sends
	// "<argv[0] base>/<version> ..."): kube-apiserver, olm, catalog,
	// maasctl, maasctl-sim, kuadrant-operator and so on.
	Program string
	// Verb is the audit verb: get, list, watch, create, update, patch,
	// delete, deletecollection (lower case, as the API server logs them).
	Verb string
	// Resource is the resource, with "/subresource" when there is one
	// ("clusterserviceversions/status"); a non-resource URL (/readyz,
	// /apis) is its path.
	Resource string
	// Code counts the answers by HTTP status code.
	Code map[int]int
	// N is the number of requests.
	N int
}

// AuditSummary reads an audit log written with Options.AuditLog and counts
// its requests by program, verb and resource (one per ResponseComplete or
// Panic event; the ResponseStarted event of a watch is not counted), the
// most frequent first, ties by program, verb and resource. Lines that are
// not audit events (a torn last line while the server still writes) are
// skipped. Errors: the file cannot be read.
func AuditSummary(path string) ([]AuditCount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type key struct{ program, verb, resource string }
	counts := map[key]*AuditCount{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var ev struct {
			Stage      string `json:"stage"`
			Verb       string `json:"verb"`
			RequestURI string `json:"requestURI"`
			UserAgent  string `json:"userAgent"`
			ObjectRef  *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || (ev.Stage != "ResponseComplete" && ev.Stage != "Panic") {
			continue
		}
		k := key{program: ev.UserAgent, verb: ev.Verb}
		if i := strings.IndexByte(k.program, '/'); i >= 0 {
			k.program = k.program[:i]
		}
		switch {
		case ev.ObjectRef != nil && ev.ObjectRef.Subresource != "":
			k.resource = ev.ObjectRef.Resource + "/" + ev.ObjectRef.Subresource
		case ev.ObjectRef != nil:
			k.resource = ev.ObjectRef.Resource
		default:
			k.resource, _, _ = strings.Cut(ev.RequestURI, "?")
		}
		c := counts[k]
		if c == nil {
			c = &AuditCount{Program: k.program, Verb: k.verb, Resource: k.resource, Code: map[int]int{}}
			counts[k] = c
		}
		c.N++
		if ev.ResponseStatus != nil {
			c.Code[ev.ResponseStatus.Code]++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	out := make([]AuditCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.N != b.N {
			return a.N > b.N
		}
		if a.Program != b.Program {
			return a.Program < b.Program
		}
		if a.Verb != b.Verb {
			return a.Verb < b.Verb
		}
		return a.Resource < b.Resource
	})
	return out, nil
}

// AuditByProgram sums counts by program, the most requests first.
func AuditByProgram(counts []AuditCount) []AuditCount {
	by := map[string]int{}
	for _, c := range counts {
		by[c.Program] += c.N
	}
	out := make([]AuditCount, 0, len(by))
	for p, n := range by {
		out = append(out, AuditCount{Program: p, N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Program < out[j].Program
	})
	return out
}
