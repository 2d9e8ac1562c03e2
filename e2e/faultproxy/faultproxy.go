// Package faultproxy is a loopback reverse proxy in front of a
// kube-apiserver that injects API faults into a configurable share of the
// requests passing through it: 500 Internal Server Error, 429 Too Many
// Requests with Retry-After, 409 Conflict on writes, and dropped connections,
// including watch streams cut in the middle. It counts what it injected and
// can record every request (times, user agent, status, the object a write
// returned, the events a watch delivered), so that tests and benchmarks can
// reason about what a client did.
//
// Clients reach it over plain HTTP on 127.0.0.1 without credentials (see
// WriteKubeconfig and RESTConfig); it forwards with the upstream
// rest.Config's credentials and TLS settings. The fault answers mirror the
// kube-apiserver's: a metav1.Status body with reason InternalError,
// TooManyRequests (with Retry-After and details.retryAfterSeconds, as the
// max-in-flight filter sends) or Conflict (the optimistic-concurrency
// message of the registry).
package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Fault is one kind of injected failure.
type Fault string

// The faults the proxy injects.
const (
	// Fault500 answers 500 with reason InternalError without forwarding.
	Fault500 Fault = "500"
	// Fault429 answers 429 with reason TooManyRequests and Retry-After
	// without forwarding.
	Fault429 Fault = "429"
	// Fault409 answers a write (POST, PUT, PATCH, DELETE) with 409 reason
	// Conflict without forwarding. Reads never get it.
	Fault409 Fault = "409"
	// FaultDrop closes the client's connection without an answer and
	// without forwarding.
	FaultDrop Fault = "drop"
	// FaultWatchCut forwards a watch and cuts its stream (closes the
	// connection mid-response) after a random time. It is chosen for watch
	// streams that got no fault at their start, with probability Rate.
	FaultWatchCut Fault = "watch-cut"
)

// AllFaults are the faults chosen from when Options.Faults is empty.
var AllFaults = []Fault{Fault500, Fault429, Fault409, FaultDrop}

// Options configures Start.
type Options struct {
	// Upstream is the API server to forward to; its credentials and TLS
	// settings are used for every forwarded request. Required.
	Upstream *rest.Config
	// Rate is the share of requests (0 to 1) that get a fault, chosen
	// uniformly from Faults. Watch streams that pass their start unharmed
	// are cut mid-stream with the same probability. Zero injects nothing.
	Rate float64
	// Faults are the kinds to choose from; default AllFaults. A request a
	// kind does not apply to (409 on a read) gets another kind of the list.
	Faults []Fault
	// WatchCutWithin bounds when a cut watch stream is cut: uniformly in
	// [0, WatchCutWithin) after it started. Default 2 s.
	WatchCutWithin time.Duration
	// RetryAfterSeconds is the Retry-After of injected 429s. Default 1.
	RetryAfterSeconds int
	// Seed makes the fault choices reproducible; zero picks one from the
	// clock (see Proxy.Seed).
	Seed uint64
	// Match limits faults to the requests it returns true for (for example
	// one client's User-Agent); nil means every request.
	Match func(*http.Request) bool
	// Record keeps a Request record of every request (see Requests).
	Record bool
	// RecordWatchEvents, with Record, also records the events of the JSON
	// watch streams it returns true for (time delivered, type, object).
	RecordWatchEvents func(*http.Request) bool
}

// ObjectRef names an object and the version of it an answer carried.
type ObjectRef struct {
	APIVersion      string `json:"apiVersion,omitempty"`
	Kind            string `json:"kind,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Generation      int64  `json:"generation,omitempty"`
	// Content, set for the object a write answered with, is a digest
	// (hex SHA-256) of the whole object but its resourceVersion and its
	// status: two writes that left the same content have the same Content
	// even when the API server stored the object again under a new
	// resourceVersion (it does for an unchanged custom resource whose
	// status is still its schema's default: the status, defaulted when
	// read, is stored on the next write), or answered a no-op with the
	// status another writer set meanwhile (kube-controller-manager writes a
	// Deployment's status without passing the proxy).
	Content string `json:"content,omitempty"`
	// Managers, set for the object a write answered with, is a digest
	// (hex SHA-256) of each field manager's metadata.managedFields entries
	// (operation, time, fields), by manager. A server-side apply that
	// changed nothing leaves its manager's entries as they were, whatever
	// other writers did to the object meanwhile.
	Managers map[string]string `json:"managers,omitempty"`
}

// Key is "Kind namespace/name" (or "Kind name").
func (o ObjectRef) Key() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// WatchEvent is one event a recorded watch stream delivered to the client.
type WatchEvent struct {
	Time   time.Time `json:"time"`
	Type   string    `json:"type"`
	Object ObjectRef `json:"object"`
}

// Request is the record of one request.
type Request struct {
	// Start is when the proxy received the request; End when its answer
	// (for a watch: the stream) ended.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// UserAgent, Method, Path and Query are the client's.
	UserAgent string `json:"userAgent"`
	Method    string `json:"method"`
	Path      string `json:"path"`
	Query     string `json:"query,omitempty"`
	// Accept is the client's Accept header (a metadata-only read asks for
	// ";as=PartialObjectMetadata").
	Accept string `json:"accept,omitempty"`
	// Watch is true for watch requests (watch=true or watch=1).
	Watch bool `json:"watch,omitempty"`
	// Status is the HTTP status sent (0 for a dropped connection).
	Status int `json:"status"`
	// Fault is the injected fault, empty when forwarded untouched.
	Fault Fault `json:"fault,omitempty"`
	// Object is what a successful write's answer carried (its
	// resourceVersion is the version the write left).
	Object *ObjectRef `json:"object,omitempty"`
	// Events are the delivered events of a recorded watch stream.
	Events []WatchEvent `json:"events,omitempty"`
}

// IsWrite reports whether the request was a write (not a dry run).
func (r *Request) IsWrite() bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return !strings.Contains(r.Query, "dryRun=")
}

// Counts are what the proxy saw and injected.
type Counts struct {
	// Requests is every request received.
	Requests int64
	// Injected counts faults by kind.
	Injected map[Fault]int64
	// Transient counts, by status, the answers forwarded from the upstream
	// (not injected) with a status a client may retry: 409, 429, 500, 502
	// (the proxy's own answer when the upstream connection failed), 503 and
	// 504. A loaded kube-apiserver sends them by itself (its max-in-flight
	// filter, request timeouts, a write that lost an optimistic-concurrency
	// race with a controller).
	Transient map[int]int64
}

// TransientTotal is the number of forwarded transient answers.
func (c Counts) TransientTotal() int64 {
	var n int64
	for _, v := range c.Transient {
		n += v
	}
	return n
}

// Total is the number of injected faults of every kind.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c.Injected {
		n += v
	}
	return n
}

// Proxy is a running fault-injecting proxy. Stop it with Close.
type Proxy struct {
	opts     Options
	seed     uint64
	url      string
	srv      *http.Server
	ln       net.Listener
	rp       *httputil.ReverseProxy
	mu       sync.Mutex
	rng      *rand.Rand
	rate     float64
	requests atomic.Int64
	injected map[Fault]*atomic.Int64
	// transient counts forwarded transient answers (Counts.Transient);
	// guarded by mu.
	transient map[int]int64
	recMu     sync.Mutex
	records   []*Request
	done      chan struct{}
}

// Start listens on 127.0.0.1 (a free port) and serves until ctx ends or
// Close is called. Errors: no upstream, a rate outside [0, 1], an unknown
// fault kind, or an upstream config client-go cannot build a transport for.
func Start(ctx context.Context, o Options) (*Proxy, error) {
	if o.Upstream == nil {
		return nil, errors.New("faultproxy: no upstream config")
	}
	if o.Rate < 0 || o.Rate > 1 {
		return nil, fmt.Errorf("faultproxy: rate %v outside [0, 1]", o.Rate)
	}
	if len(o.Faults) == 0 {
		o.Faults = AllFaults
	}
	for _, f := range o.Faults {
		switch f {
		case Fault500, Fault429, Fault409, FaultDrop:
		default:
			return nil, fmt.Errorf("faultproxy: unknown fault %q (want one of %v)", f, AllFaults)
		}
	}
	if o.WatchCutWithin <= 0 {
		o.WatchCutWithin = 2 * time.Second
	}
	if o.RetryAfterSeconds <= 0 {
		o.RetryAfterSeconds = 1
	}
	target, err := url.Parse(o.Upstream.Host)
	if err != nil || target.Host == "" {
		// rest.Config.Host may be host:port without a scheme.
		target, err = url.Parse("https://" + o.Upstream.Host)
		if err != nil {
			return nil, fmt.Errorf("faultproxy: upstream host %q: %w", o.Upstream.Host, err)
		}
	}
	rt, err := rest.TransportFor(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream transport: %w", err)
	}
	seed := o.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	p := &Proxy{
		opts: o, seed: seed, rate: o.Rate,
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		injected: map[Fault]*atomic.Int64{}, transient: map[int]int64{},
		done: make(chan struct{}),
	}
	for _, f := range append(AllFaults, FaultWatchCut) {
		p.injected[f] = &atomic.Int64{}
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			// Let the upstream transport negotiate (and undo) compression,
			// so recorded answers are plain JSON.
			pr.Out.Header.Del("Accept-Encoding")
		},
		Transport:      rt,
		FlushInterval:  -1, // watch events go out as they come
		ErrorLog:       log.New(io.Discard, "", 0),
		ModifyResponse: p.modifyResponse,
	}
	p.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p.url = "http://" + p.ln.Addr().String()
	p.srv = &http.Server{Handler: p, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(p.ln)
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = p.Close()
		case <-p.done:
		}
	}()
	return p, nil
}

// URL is the proxy's base URL, http://127.0.0.1:PORT.
func (p *Proxy) URL() string { return p.url }

// Seed is the seed of the fault choices (Options.Seed or the one picked).
func (p *Proxy) Seed() uint64 { return p.seed }

// SetRate changes the fault rate from now on (0 to 1; other values are
// clamped).
func (p *Proxy) SetRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rate = min(max(rate, 0), 1)
}

// RESTConfig returns a config for clients of the proxy: plain HTTP, no
// credentials.
func (p *Proxy) RESTConfig() *rest.Config {
	return &rest.Config{Host: p.url, QPS: -1}
}

// WriteKubeconfig writes a kubeconfig file whose only context points at
// the proxy.
func (p *Proxy) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["faultproxy"] = &clientcmdapi.Cluster{Server: p.url}
	cfg.AuthInfos["faultproxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["faultproxy"] = &clientcmdapi.Context{Cluster: "faultproxy", AuthInfo: "faultproxy"}
	cfg.CurrentContext = "faultproxy"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("faultproxy: write kubeconfig %s: %w", path, err)
	}
	return nil
}

// Counts returns what the proxy saw and injected so far.
func (p *Proxy) Counts() Counts {
	c := Counts{Requests: p.requests.Load(), Injected: map[Fault]int64{}, Transient: map[int]int64{}}
	for f, n := range p.injected {
		if v := n.Load(); v > 0 {
			c.Injected[f] = v
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for code, n := range p.transient {
		c.Transient[code] = n
	}
	return c
}

// Requests returns a copy of the records so far (with Options.Record), in
// the order the requests arrived. Requests still in flight have a zero End.
func (p *Proxy) Requests() []Request {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	out := make([]Request, len(p.records))
	for i, r := range p.records {
		out[i] = *r
		out[i].Events = append([]WatchEvent(nil), r.Events...)
	}
	return out
}

// Close stops listening, cuts open connections (watch streams included)
// and waits until the server stopped.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	<-p.done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

func isWriteMethod(m string) bool {
	switch m {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// choose picks the fault for r ("" for none) and, for a watch, whether and
// when to cut its stream.
func (p *Proxy) choose(r *http.Request) (Fault, time.Duration) {
	if p.opts.Match != nil && !p.opts.Match(r) {
		return "", 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rate <= 0 {
		return "", 0
	}
	if p.rng.Float64() < p.rate {
		var kinds []Fault
		for _, f := range p.opts.Faults {
			if f != Fault409 || isWriteMethod(r.Method) {
				kinds = append(kinds, f)
			}
		}
		if len(kinds) > 0 {
			return kinds[p.rng.IntN(len(kinds))], 0
		}
	}
	if isWatch(r) && p.rng.Float64() < p.rate {
		return FaultWatchCut, time.Duration(p.rng.Int64N(int64(p.opts.WatchCutWithin)))
	}
	return "", 0
}

type recordKey struct{}

// ServeHTTP injects a fault or forwards r.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	fault, cutAfter := p.choose(r)
	var rec *Request
	if p.opts.Record {
		rec = &Request{
			Start: time.Now(), UserAgent: r.UserAgent(), Method: r.Method,
			Path: r.URL.Path, Query: r.URL.RawQuery, Accept: r.Header.Get("Accept"), Watch: isWatch(r), Fault: fault,
		}
		p.recMu.Lock()
		p.records = append(p.records, rec)
		p.recMu.Unlock()
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if rec != nil {
			p.recMu.Lock()
			rec.End, rec.Status = time.Now(), sw.status
			p.recMu.Unlock()
		}
	}()
	if fault != "" {
		p.injected[fault].Add(1)
	}
	switch fault {
	case Fault500:
		writeStatus(sw, http.StatusInternalServerError, metav1.StatusReasonInternalError,
			"Internal error occurred: injected by faultproxy", 0)
		return
	case Fault429:
		sw.Header().Set("Retry-After", strconv.Itoa(p.opts.RetryAfterSeconds))
		writeStatus(sw, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			"Too many requests, please try again later (injected by faultproxy)", p.opts.RetryAfterSeconds)
		return
	case Fault409:
		writeStatus(sw, http.StatusConflict, metav1.StatusReasonConflict,
			"Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again (injected by faultproxy)", 0)
		return
	case FaultDrop:
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	ctx := context.WithValue(r.Context(), recordKey{}, rec)
	if fault == FaultWatchCut {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		t := time.AfterFunc(cutAfter, cancel)
		defer t.Stop()
		defer cancel()
	}
	p.rp.ServeHTTP(sw, r.WithContext(ctx))
	switch sw.status {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		p.mu.Lock()
		p.transient[sw.status]++
		p.mu.Unlock()
	}
}

// modifyResponse records what a write returned and wraps recorded watch
// streams so that their events are noted as they pass.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	rec, _ := resp.Request.Context().Value(recordKey{}).(*Request)
	if rec == nil {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	isJSON, proto := strings.HasPrefix(ct, "application/json"), strings.HasPrefix(ct, protobufType)
	switch {
	case rec.Watch:
		if isJSON && p.opts.RecordWatchEvents != nil && p.opts.RecordWatchEvents(resp.Request) && resp.StatusCode == http.StatusOK {
			resp.Body = &eventScanner{rc: resp.Body, rec: rec, mu: &p.recMu}
		}
	case (isJSON || proto) && isWriteMethod(rec.Method) && resp.StatusCode/100 == 2:
		// A client of built-in kinds may ask for protobuf (the real
		// authorino-operator's Service updates do): its writes must be
		// seen as well, or a later no-op write seems to change the object.
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return nil
		}
		parse := parseJSONWrite
		if proto {
			parse = parseProtobufRef
		}
		if ref, ok := parse(body); ok {
			p.recMu.Lock()
			rec.Object = &ref
			p.recMu.Unlock()
		}
	}
	return nil
}

// parseJSONWrite is parseRef for the object a write answered with in
// JSON, with its Content.
func parseJSONWrite(body []byte) (ObjectRef, bool) {
	ref, ok := parseRef(body)
	if !ok {
		return ref, false
	}
	var m map[string]any
	if json.Unmarshal(body, &m) == nil {
		ref.Managers = managersDigest(m)
		ref.Content = contentDigest(m)
	}
	return ref, true
}

// protobufType is the media type of Kubernetes' protobuf encoding
// (k8s.io/apimachinery runtime/serializer/protobuf), which only built-in
// kinds speak.
const protobufType = "application/vnd.kubernetes.protobuf"

// protobufCodec decodes the built-in kinds of client-go's scheme from their
// protobuf encoding.
var protobufCodec = protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme)

// parseProtobufRef is parseRef for a protobuf-encoded object of a built-in
// kind; ok is false for anything it cannot decode (a kind not in
// client-go's scheme, a Status).
func parseProtobufRef(body []byte) (ObjectRef, bool) {
	obj, gvk, err := protobufCodec.Decode(body, nil, nil)
	if err != nil || gvk == nil {
		return ObjectRef{}, false
	}
	m, err := meta.Accessor(obj)
	if err != nil || m.GetName() == "" {
		return ObjectRef{}, false
	}
	ref := ObjectRef{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Namespace: m.GetNamespace(),
		Name: m.GetName(), ResourceVersion: m.GetResourceVersion(), Generation: m.GetGeneration()}
	if u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err == nil {
		ref.Managers = managersDigest(u)
		ref.Content = contentDigest(u)
	}
	return ref, true
}

// managersDigest is ObjectRef.Managers of obj (a decoded object).
func managersDigest(obj map[string]any) map[string]string {
	md, _ := obj["metadata"].(map[string]any)
	entries, _ := md["managedFields"].([]any)
	by := map[string][]any{}
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok {
			name, _ := m["manager"].(string)
			by[name] = append(by[name], m)
		}
	}
	out := map[string]string{}
	for name, es := range by {
		b, err := json.Marshal(es)
		if err != nil {
			continue
		}
		sum := sha256.Sum256(b)
		out[name] = hex.EncodeToString(sum[:])
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// contentDigest is ObjectRef.Content of obj (a decoded object; its
// metadata.resourceVersion and status are dropped from it).
func contentDigest(obj map[string]any) string {
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "resourceVersion")
	}
	delete(obj, "status")
	b, err := json.Marshal(obj) // map keys sorted: the same content, the same bytes
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

type wireObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace"`
		ResourceVersion string `json:"resourceVersion"`
		Generation      int64  `json:"generation"`
	} `json:"metadata"`
}

func (w wireObject) ref() ObjectRef {
	return ObjectRef{APIVersion: w.APIVersion, Kind: w.Kind, Namespace: w.Metadata.Namespace,
		Name: w.Metadata.Name, ResourceVersion: w.Metadata.ResourceVersion, Generation: w.Metadata.Generation}
}

func parseRef(body []byte) (ObjectRef, bool) {
	var w wireObject
	if json.Unmarshal(body, &w) != nil || w.Kind == "" || w.Kind == "Status" {
		return ObjectRef{}, false
	}
	return w.ref(), true
}

// eventScanner passes a JSON watch stream through unchanged and records
// each complete event (the kube-apiserver ends every JSON event with a
// newline).
type eventScanner struct {
	rc  io.ReadCloser
	rec *Request
	mu  *sync.Mutex
	buf []byte
}

func (s *eventScanner) Read(b []byte) (int, error) {
	n, err := s.rc.Read(b)
	if n > 0 {
		s.buf = append(s.buf, b[:n]...)
		for {
			i := bytes.IndexByte(s.buf, '\n')
			if i < 0 {
				break
			}
			line := s.buf[:i]
			var ev struct {
				Type   string     `json:"type"`
				Object wireObject `json:"object"`
			}
			if json.Unmarshal(line, &ev) == nil && ev.Type != "" {
				s.mu.Lock()
				s.rec.Events = append(s.rec.Events, WatchEvent{Time: time.Now(), Type: ev.Type, Object: ev.Object.ref()})
				s.mu.Unlock()
			}
			s.buf = s.buf[i+1:]
		}
	}
	return n, err
}

func (s *eventScanner) Close() error { return s.rc.Close() }

// statusWriter remembers the status sent; Unwrap lets
// http.ResponseController reach the connection's Flush and Hijack.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush is needed by ReverseProxy's immediate flushing of watch streams.
func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack lets FaultDrop close the connection.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string, retryAfter int) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	}
	if retryAfter > 0 {
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(retryAfter)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&st)
}
