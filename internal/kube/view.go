package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ViewMaxAge is how long after BeginView a read view answers at most. A
// converged re-run's checks end well within it (the default inventory in
// about 0.2 s, 1,000 models in a few seconds); past it every read goes to
// the API server again, so a read-only path that loops (it should not
// read through a view) sees the cluster move after at most this long.
const ViewMaxAge = 10 * time.Second

// ViewOptions configures BeginView.
type ViewOptions struct {
	// Whole names resources read whole on their first read: the first GET
	// of one of their objects, or the first LIST the whole LIST covers,
	// makes the view LIST the resource (across all namespaces, or in the
	// read's namespace) and answer this read and the later ones of the run
	// from that LIST. For resources of which a run reads several objects
	// (OLM Subscriptions, CSVs and OperatorGroups in several namespaces;
	// the operators' Deployments and Pods of one namespace), one LIST
	// replaces a read each. A LIST that fails (RBAC forbids listing across
	// namespaces, say) is not retried; the reads then go to the API server.
	Whole map[schema.GroupResource]WholeList
	// MaxAge overrides ViewMaxAge (tests).
	MaxAge time.Duration
}

// WholeList is how a read view lists a resource whole (ViewOptions.Whole).
type WholeList struct {
	// Selector is the LIST's label selector ("" for every object). A LIST
	// with a selector answers GETs of the objects it holds (others are
	// sent) and LISTs with the same selector.
	Selector string
	// PerNamespace lists the namespace of the read instead of all
	// namespaces.
	PerNamespace bool
}

// ReadView shares the reads of one run that has not written yet: a read
// sent with a context from ViewReads is answered from an earlier read of
// the same run when one holds the answer, else sent and kept. It answers
//
//   - the same GET (same path and query) again;
//   - a GET of one object from a complete LIST (no continue token, no field
//     selector) of its resource whose namespace covers it: the object
//     itself, or NotFound when that LIST had no label selector;
//   - a LIST from a complete LIST without a label selector, or with the
//     same one, of a covering namespace: its items filtered by namespace
//     and label selector.
//
// It answers only while the run has written nothing: the first write sent
// through the Clients (any method but GET, HEAD and OPTIONS; dry runs,
// access reviews, Lease writes and writes marked KeepView aside) ends it
// for good, since from then
// on a kept answer may be older than what the run itself changed; and
// ViewMaxAge after it began. Watches, paged LISTs and reads without
// ViewReads are always sent. Answers are replayed bytes (a GET from a LIST
// is the LIST's item with its kind and apiVersion), so callers decode them
// as they would a response and cannot change what the view keeps.
//
// A converged re-run reads the same objects several times (preflight, each
// step's Check, verify) and one object per kind where a LIST of the kind
// would do (issue 16: at most 1.2 reads per managed object); within the
// checks of one such run the cluster is read as of one moment, as a single
// pass over it would be. Create with Clients.BeginView.
type ReadView struct {
	begun  time.Time
	maxAge time.Duration
	whole  map[schema.GroupResource]WholeList

	off      atomic.Bool
	answered atomic.Int64

	mu    sync.Mutex
	exact map[string]*viewCall
	lists map[string][]*viewList // by collection: API prefix and resource
	tried map[string]bool        // the Whole LISTs sent (wholeKey)
}

// viewCall is one GET sent once for every caller asking the same: done is
// closed when resp is set (nil when the answer is not kept).
type viewCall struct {
	done chan struct{}
	resp *keptResponse
}

type keptResponse struct {
	status int
	header http.Header
	body   []byte
}

// viewList is one complete LIST: scope is its namespace ("" for all
// namespaces, or a cluster-scoped resource), selector its label selector
// ("" for none). done is closed once ok and items are set.
type viewList struct {
	scope, selector string
	key             string // the Whole LIST's key in tried; "" for others
	done            chan struct{}
	ok              bool
	apiVersion      string
	kind            string // the item kind (the list's kind without "List")
	rv              string
	items           []viewItem
}

type viewItem struct {
	ns, name string
	labels   map[string]string
	raw      json.RawMessage // with kind and apiVersion
}

type viewReadsKey struct{}

// ViewReads marks ctx: the reads sent with it may be answered by the read
// view of the Clients (BeginView), if one is open.
func ViewReads(ctx context.Context) context.Context {
	return context.WithValue(ctx, viewReadsKey{}, true)
}

type keepViewKey struct{}

// KeepView marks ctx: a write sent with it leaves the read view open
// instead of ending it (ReadView), and the view forgets what it kept of
// the written resource (every namespace), so a later read of that
// resource is sent again. For maasctl's own bookkeeping (its state
// Namespace, run record and checkpoints), which no operator reacts to and
// no check judges: without it, a first install's view ended before
// preflight and the record's snapshot read anything (issue 16).
func KeepView(ctx context.Context) context.Context {
	return context.WithValue(ctx, keepViewKey{}, true)
}

// BeginView opens a read view on c (see ReadView) and returns it; End
// closes it. One view is open at a time: a second BeginView replaces the
// first.
func (c *Clients) BeginView(o ViewOptions) *ReadView {
	v := &ReadView{begun: time.Now(), maxAge: o.MaxAge, whole: o.Whole,
		exact: map[string]*viewCall{}, lists: map[string][]*viewList{}, tried: map[string]bool{}}
	if c.view == nil { // Clients not built by NewWithOptions: nothing reads through a view
		c.view = new(viewSlot)
	}
	if v.maxAge == 0 {
		v.maxAge = ViewMaxAge
	}
	c.view.Store(v)
	return v
}

// ViewAnswered is the number of reads the open or last view of c answered
// without a request (0 without a view).
func (c *Clients) ViewAnswered() int64 {
	if c.view == nil {
		return 0
	}
	if v := c.view.Load(); v != nil {
		return v.Answered()
	}
	return 0
}

// ViewOpen reports whether c has a read view open (BeginView, and no
// write, End or ViewMaxAge since).
func (c *Clients) ViewOpen() bool {
	if c.view == nil {
		return false
	}
	v := c.view.Load()
	return v != nil && v.Open()
}

// End closes the view and drops what it kept.
func (v *ReadView) End() { v.stop() }

// Answered is the number of reads the view answered without a request.
func (v *ReadView) Answered() int64 { return v.answered.Load() }

// Open reports whether the view still answers (no write yet, not ended,
// not older than its maximum age).
func (v *ReadView) Open() bool { return !v.off.Load() && time.Since(v.begun) < v.maxAge }

func (v *ReadView) stop() {
	if v.off.Swap(true) {
		return
	}
	v.mu.Lock()
	v.exact, v.lists, v.tried = nil, nil, nil
	v.mu.Unlock()
}

// viewSlot is shared by the transports of one Clients (dynamic, typed and
// discovery clients each build their own): the open view, if any.
type viewSlot = atomic.Pointer[ReadView]

// viewTransport is the outermost transport of Clients: it answers marked
// reads from the open view and ends the view on a write.
type viewTransport struct {
	next http.RoundTripper
	slot *viewSlot
}

func (t *viewTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	v := t.slot.Load()
	if v == nil || v.off.Load() {
		return t.next.RoundTrip(req)
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if req.Context().Value(keepViewKey{}) != nil {
			// Before and after: a read answered while the write was
			// on its way is not kept either.
			v.forget(req.URL.Path)
			resp, err := t.next.RoundTrip(req)
			v.forget(req.URL.Path)
			return resp, err
		} else if endsView(req) {
			v.stop()
		}
		return t.next.RoundTrip(req)
	}
	if req.Method != http.MethodGet || req.Context().Value(viewReadsKey{}) == nil || !v.Open() {
		return t.next.RoundTrip(req)
	}
	return v.roundTrip(req, t.next)
}

// forget drops what the view kept of the resource a write to path
// changes (KeepView): its LISTs in every namespace, its exact GETs, and
// its Whole LISTs, which a later read sends again. A path it cannot take
// apart ends the view.
func (v *ReadView) forget(path string) {
	p, ok := parseViewPath(path)
	if !ok {
		v.stop()
		return
	}
	coll := p.collection()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.exact == nil {
		return
	}
	delete(v.lists, coll)
	for key := range v.tried {
		if strings.HasPrefix(key, coll+"|") {
			delete(v.tried, key)
		}
	}
	for key := range v.exact {
		u, err := url.Parse(key)
		if err != nil {
			delete(v.exact, key)
			continue
		}
		if q, ok := parseViewPath(u.Path); ok && q.collection() == coll {
			delete(v.exact, key)
		}
	}
}

// endsView says whether a write ends the view: every write but dry runs,
// access and token reviews (they change nothing) and Leases (the run's own
// lock, taken and renewed while the checks run).
func endsView(req *http.Request) bool {
	if req.URL.Query().Get("dryRun") != "" {
		return false
	}
	p := req.URL.Path
	return !strings.HasPrefix(p, "/apis/authorization.k8s.io/") &&
		!strings.HasPrefix(p, "/apis/authentication.k8s.io/") &&
		!strings.HasPrefix(p, "/apis/coordination.k8s.io/")
}

// viewPath is a request path taken apart: prefix is /api/v1 or
// /apis/<group>/<version>; name is empty for a collection.
type viewPath struct {
	prefix, group, ns, resource, name string
	namespaced                        bool
}

func (p viewPath) collection() string { return p.prefix + "|" + p.resource }

// parseViewPath takes apart the path of a GET of one object or of a
// collection; ok is false for anything else (subresources, discovery,
// non-resource paths).
func parseViewPath(path string) (p viewPath, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 3 && parts[0] == "api" && parts[1] == "v1":
		p.prefix, rest = "/api/v1", parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		p.prefix, p.group, rest = "/apis/"+parts[1]+"/"+parts[2], parts[1], parts[3:]
	default:
		return p, false
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		p.namespaced, p.ns, rest = true, rest[1], rest[2:]
		if rest[0] == "status" || rest[0] == "finalize" {
			return p, false // a Namespace's subresource
		}
	}
	switch len(rest) {
	case 1:
		p.resource = rest[0]
	case 2:
		p.resource, p.name = rest[0], rest[1]
	default:
		return p, false
	}
	return p, p.resource != "" && !strings.Contains(p.resource, ".")
}

func (v *ReadView) roundTrip(req *http.Request, next http.RoundTripper) (*http.Response, error) {
	q := req.URL.Query()
	if q.Get("watch") != "" || q.Get("continue") != "" || q.Get("sendInitialEvents") != "" {
		return next.RoundTrip(req)
	}
	p, ok := parseViewPath(req.URL.Path)
	// Leases are read fresh always: a lock decides on them.
	if !ok || !jsonAccepted(req) || p.group == "coordination.k8s.io" {
		return next.RoundTrip(req)
	}
	// Every read through the view asks for JSON, so that one answer serves
	// the typed clients (which prefer protobuf) and the dynamic ones alike,
	// and a LIST can answer GETs.
	if req.Header.Get("Accept") != "application/json" {
		req = req.Clone(req.Context())
		req.Header.Set("Accept", "application/json")
	}
	// Only a LIST of the objects as they are now (no field selector, no
	// resourceVersion but the API server's cache "0", no
	// resourceVersionMatch) is kept as a list or answered from one.
	simple := q.Get("fieldSelector") == "" && q.Get("resourceVersionMatch") == "" &&
		(q.Get("resourceVersion") == "" || q.Get("resourceVersion") == "0")
	if simple {
		selector := q.Get("labelSelector")
		answer := func() *http.Response {
			if p.name != "" {
				return v.objectFromLists(req, p)
			}
			return v.listFromLists(req, p, selector, q.Get("limit"))
		}
		if resp := answer(); resp != nil {
			return resp, nil
		}
		w, ok := v.whole[schema.GroupResource{Group: p.group, Resource: p.resource}]
		if ok && (p.name != "" || w.Selector == "" || w.Selector == selector) && (!w.PerNamespace || p.ns != "") {
			if l := v.claimWhole(p, w); l != nil {
				v.listWhole(req, p, l, next)
				if resp := answer(); resp != nil {
					return resp, nil
				}
			}
		}
	}
	return v.exactly(req, p, simple && p.name == "", next)
}

// jsonAccepted says whether the caller decodes JSON objects (not a Table
// or metadata-only rendering of them).
func jsonAccepted(req *http.Request) bool {
	a := req.Header.Get("Accept")
	if strings.Contains(a, "as=") { // a Table or metadata-only view of the objects
		return false
	}
	return a == "" || strings.Contains(a, "application/json") || strings.Contains(a, "*/*")
}

// exactly answers req from the same GET sent earlier in the view, or sends
// it once for every caller asking at the same time. A complete JSON LIST
// (asList) is kept as a list, to answer GETs and LISTs it covers; other
// 200 and 404 answers are kept as bytes.
func (v *ReadView) exactly(req *http.Request, p viewPath, asList bool, next http.RoundTripper) (*http.Response, error) {
	key := req.URL.RequestURI()
	v.mu.Lock()
	if v.exact == nil { // ended meanwhile
		v.mu.Unlock()
		return next.RoundTrip(req)
	}
	if c, ok := v.exact[key]; ok {
		v.mu.Unlock()
		select {
		case <-c.done:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
		if c.resp != nil {
			return v.replay(req, c.resp), nil
		}
		if asList {
			if resp := v.listFromLists(req, p, req.URL.Query().Get("labelSelector"), req.URL.Query().Get("limit")); resp != nil {
				return resp, nil
			}
		}
		return next.RoundTrip(req)
	}
	c := &viewCall{done: make(chan struct{})}
	v.exact[key] = c
	var l *viewList
	if asList {
		l = v.addList(p, req.URL.Query().Get("labelSelector"))
	}
	v.mu.Unlock()

	resp, err := next.RoundTrip(req)
	var kept *keptResponse
	if err == nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound) && !isChunkedWatch(resp) {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr != nil {
			err = rerr
			resp = nil
		} else {
			resp.Body = io.NopCloser(bytes.NewReader(body))
			kept = &keptResponse{status: resp.StatusCode, header: resp.Header.Clone(), body: body}
		}
	}
	if l != nil {
		// A LIST is kept parsed (it answers the GETs and LISTs it covers)
		// or not at all: a page of a paged LIST is not asked for twice.
		v.fillList(l, kept)
		kept = nil
	}
	c.resp = kept
	close(c.done)
	return resp, err
}

func isChunkedWatch(resp *http.Response) bool {
	return strings.Contains(resp.Header.Get("Content-Type"), "watch")
}

// addList registers a LIST being sent; the caller holds v.mu.
func (v *ReadView) addList(p viewPath, selector string) *viewList {
	l := &viewList{scope: p.ns, selector: selector, done: make(chan struct{})}
	v.lists[p.collection()] = append(v.lists[p.collection()], l)
	return l
}

// fillList parses a LIST's answer into l and closes l.done; l.ok only for a
// complete JSON LIST.
func (v *ReadView) fillList(l *viewList, kept *keptResponse) {
	defer close(l.done)
	if kept == nil || kept.status != http.StatusOK || !strings.HasPrefix(kept.header.Get("Content-Type"), "application/json") {
		return
	}
	var doc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			ResourceVersion string `json:"resourceVersion"`
			Continue        string `json:"continue"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if json.Unmarshal(kept.body, &doc) != nil || doc.Metadata.Continue != "" || !strings.HasSuffix(doc.Kind, "List") {
		return
	}
	l.apiVersion, l.kind, l.rv = doc.APIVersion, strings.TrimSuffix(doc.Kind, "List"), doc.Metadata.ResourceVersion
	l.items = make([]viewItem, 0, len(doc.Items))
	for _, raw := range doc.Items {
		var m struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string            `json:"name"`
				Namespace string            `json:"namespace"`
				Labels    map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
			return
		}
		if m.Kind == "" {
			// Lists of built-in kinds leave their items' type out.
			var b bytes.Buffer
			b.WriteString(`{"kind":`)
			b.WriteString(strconv.Quote(l.kind))
			b.WriteString(`,"apiVersion":`)
			b.WriteString(strconv.Quote(l.apiVersion))
			if len(bytes.TrimSpace(raw[1:])) > 1 {
				b.WriteByte(',')
			}
			b.Write(raw[1:])
			raw = b.Bytes()
		}
		l.items = append(l.items, viewItem{ns: m.Metadata.Namespace, name: m.Metadata.Name, labels: m.Metadata.Labels, raw: raw})
	}
	l.ok = true
}

// covering returns the lists of p's collection whose namespace covers p's,
// after waiting for those still being read.
func (v *ReadView) covering(ctx context.Context, p viewPath) []*viewList {
	v.mu.Lock()
	var out []*viewList
	if v.lists != nil {
		for _, l := range v.lists[p.collection()] {
			if l.scope == "" || l.scope == p.ns {
				out = append(out, l)
			}
		}
	}
	v.mu.Unlock()
	for _, l := range out {
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil
		}
	}
	return out
}

// objectFromLists answers a GET of one object from a complete LIST, or
// returns nil.
func (v *ReadView) objectFromLists(req *http.Request, p viewPath) *http.Response {
	lists := v.covering(req.Context(), p)
	absent := false
	for _, l := range lists {
		if !l.ok {
			continue
		}
		for _, it := range l.items {
			if it.name == p.name && it.ns == p.ns {
				return v.answer(req, http.StatusOK, it.raw)
			}
		}
		absent = absent || l.selector == ""
	}
	if absent {
		return v.answer(req, http.StatusNotFound, notFoundStatus(p))
	}
	return nil
}

// listFromLists answers a LIST from a complete LIST of a covering
// namespace without a label selector or with the same one, or returns nil;
// also nil when more items match than the LIST's limit (the API server
// would answer a first page and a continue token).
func (v *ReadView) listFromLists(req *http.Request, p viewPath, selector, limit string) *http.Response {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil
	}
	most := -1
	if limit != "" {
		if most, err = strconv.Atoi(limit); err != nil || most <= 0 {
			return nil
		}
	}
	for _, l := range v.covering(req.Context(), p) {
		if !l.ok || (l.selector != "" && l.selector != selector) {
			continue
		}
		var b bytes.Buffer
		b.WriteString(`{"kind":`)
		b.WriteString(strconv.Quote(l.kind + "List"))
		b.WriteString(`,"apiVersion":`)
		b.WriteString(strconv.Quote(l.apiVersion))
		b.WriteString(`,"metadata":{"resourceVersion":`)
		b.WriteString(strconv.Quote(l.rv))
		b.WriteString(`},"items":[`)
		n := 0
		for _, it := range l.items {
			if (p.ns != "" && it.ns != p.ns) || !sel.Matches(labels.Set(it.labels)) {
				continue
			}
			if n == most {
				return nil
			}
			if n > 0 {
				b.WriteByte(',')
			}
			b.Write(it.raw)
			n++
		}
		b.WriteString(`]}`)
		return v.answer(req, http.StatusOK, b.Bytes())
	}
	return nil
}

// claimWhole registers the Whole LIST w of p's resource (in p's namespace
// when w.PerNamespace) when no read asked for it yet; later reads wait for
// it in covering. nil when it was asked for already.
func (v *ReadView) claimWhole(p viewPath, w WholeList) *viewList {
	lp := viewPath{prefix: p.prefix, group: p.group, resource: p.resource}
	if w.PerNamespace {
		lp.ns, lp.namespaced = p.ns, true
	}
	key := lp.collection() + "|" + lp.ns
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tried == nil || v.tried[key] {
		return nil
	}
	v.tried[key] = true
	l := v.addList(lp, w.Selector)
	l.key = key
	return l
}

// listWhole sends the Whole LIST l of p's resource with req's headers and
// keeps its answer in l.
func (v *ReadView) listWhole(req *http.Request, p viewPath, l *viewList, next http.RoundTripper) {
	u := *req.URL
	u.Path = p.prefix + "/" + p.resource
	if l.scope != "" {
		u.Path = p.prefix + "/namespaces/" + l.scope + "/" + p.resource
	}
	q := url.Values{}
	if l.selector != "" {
		q.Set("labelSelector", l.selector)
	}
	u.RawQuery = q.Encode()
	lr := req.Clone(req.Context())
	lr.URL = &u
	resp, err := next.RoundTrip(lr)
	var kept *keptResponse
	if err == nil {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil {
			kept = &keptResponse{status: resp.StatusCode, header: resp.Header, body: body}
		}
	}
	v.fillList(l, kept)
	if !l.ok && req.Context().Err() != nil {
		// Cut short by its reader's context, not refused: a later read
		// may send it again.
		v.mu.Lock()
		if v.tried != nil {
			delete(v.tried, l.key)
		}
		v.mu.Unlock()
	}
}

func (v *ReadView) answer(req *http.Request, status int, body []byte) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return v.replay(req, &keptResponse{status: status, header: h, body: body})
}

func (v *ReadView) replay(req *http.Request, k *keptResponse) *http.Response {
	v.answered.Add(1)
	return &http.Response{
		Status:        strconv.Itoa(k.status) + " " + http.StatusText(k.status),
		StatusCode:    k.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        k.header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(k.body)),
		ContentLength: int64(len(k.body)),
		Request:       req,
	}
}

// notFoundStatus is the API server's NotFound Status for p's object.
func notFoundStatus(p viewPath) []byte {
	type details struct {
		Name  string `json:"name"`
		Group string `json:"group,omitempty"`
		Kind  string `json:"kind"`
	}
	qualified := p.resource
	if p.group != "" {
		qualified += "." + p.group
	}
	b, _ := json.Marshal(struct {
		Kind       string         `json:"kind"`
		APIVersion string         `json:"apiVersion"`
		Metadata   map[string]any `json:"metadata"`
		Status     string         `json:"status"`
		Message    string         `json:"message"`
		Reason     string         `json:"reason"`
		Details    details        `json:"details"`
		Code       int            `json:"code"`
	}{"Status", "v1", map[string]any{}, "Failure", qualified + ` "` + p.name + `" not found`, "NotFound", details{p.name, p.group, p.resource}, http.StatusNotFound})
	return b
}
