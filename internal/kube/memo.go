package kube

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// ReadMemo remembers the API server's answers to read requests while
// maasctl only reads: the checks of a converged re-run read the objects
// the run's snapshot has just read, and several checks read the same
// Subscription, CSV or Secret (issue 16: a no-op re-run made 147 reads,
// 46 of them repeats). A request uses the memo only when its context is
// marked with [Memoized]; every other request (an Apply, a wait's
// list-watch) goes to the server as before.
//
// What it keeps: the status, headers and body of GET requests that
// answered 200 or 404 (an object that does not exist is a common answer
// of a snapshot), keyed by Accept header, URL path and query. Watches are
// never kept.
//
// Any write through the same Clients (a request that is not GET, HEAD or
// OPTIONS and not a dry run), from any context, clears it, except a write
// to a Lease (maasctl's run lock, which no check reads); a read in flight
// across a write is not kept. So the memo holds only while maasctl has
// not written since the answers were read: on a converged re-run that is
// the whole run; once a step applies, later checks read afresh what its
// writes (and the controllers answering them) changed. Changes by
// controllers alone since an answer are not seen, exactly as if the two
// reads had been made in the other order.
//
// Written here rather than taken from client-go: its caches are informers
// (a LIST and a WATCH per kind), which cost more than the repeats they
// would save on a re-run that reads one or two objects of most kinds.
type ReadMemo struct {
	mu      sync.Mutex
	answers map[string]*memoAnswer
	// gen counts writes seen; a read keeps its answer only when no write
	// happened while it was in flight.
	gen  uint64
	hits atomic.Int64
}

type memoAnswer struct {
	status int
	header http.Header
	body   []byte
}

// NewReadMemo returns an empty memo.
func NewReadMemo() *ReadMemo { return &ReadMemo{answers: map[string]*memoAnswer{}} }

// Hits is how many reads the memo answered without a request.
func (m *ReadMemo) Hits() int64 { return m.hits.Load() }

// Clear forgets every answer.
func (m *ReadMemo) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.answers = map[string]*memoAnswer{}
	m.gen++
}

// isLeasePath reports whether an API path names a coordination.k8s.io
// Lease.
func isLeasePath(path string) bool {
	return strings.HasPrefix(path, "/apis/coordination.k8s.io/") && strings.Contains(path, "/leases")
}

type memoKey struct{}

// Memoized returns ctx marked so that read requests made with it through
// Clients whose memo is set (Clients.SetMemo) are answered from the memo
// when it holds the answer, and their answers are kept.
func Memoized(ctx context.Context) context.Context {
	return context.WithValue(ctx, memoKey{}, true)
}

func isMemoized(ctx context.Context) bool {
	v, _ := ctx.Value(memoKey{}).(bool)
	return v
}

// Memo returns the memo SetMemo set, nil for none.
func (c *Clients) Memo() *ReadMemo {
	if c.memo == nil {
		return nil
	}
	return c.memo.Load()
}

// SetMemo makes m the memo of c's requests (nil: none): Install sets one
// for the whole command, a Runner without one sets one for its run.
func (c *Clients) SetMemo(m *ReadMemo) {
	if c.memo != nil { // nil: Clients not made by New (unit tests)
		c.memo.Store(m)
	}
}

// memoTransport answers marked reads from the current memo and clears it
// on every write. It is the outermost layer: a memo hit is no request and
// is not counted.
type memoTransport struct {
	next http.RoundTripper
	memo *atomic.Pointer[ReadMemo]
}

func (t *memoTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	m := t.memo.Load()
	if m == nil {
		return t.next.RoundTrip(req)
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if req.URL.Query().Get("dryRun") == "" && !isLeasePath(req.URL.Path) {
			m.Clear()
		}
		return t.next.RoundTrip(req)
	}
	q := req.URL.Query()
	if req.Method != http.MethodGet || q.Get("watch") == "true" || q.Get("watch") == "1" || !isMemoized(req.Context()) {
		return t.next.RoundTrip(req)
	}
	// The Accept header is part of the key: typed clients ask for
	// protobuf, dynamic ones for JSON, at the same URL.
	key := req.Header.Get("Accept") + " " + req.URL.Path + "?" + req.URL.RawQuery
	m.mu.Lock()
	a, gen := m.answers[key], m.gen
	m.mu.Unlock()
	if a != nil {
		m.hits.Add(1)
		return a.response(req), nil
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || (resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound) {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	a = &memoAnswer{status: resp.StatusCode, header: resp.Header.Clone(), body: body}
	m.mu.Lock()
	if m.gen == gen {
		m.answers[key] = a
	}
	m.mu.Unlock()
	return a.response(req), nil
}

// response is a fresh http.Response of the kept answer (its own body
// reader), for req.
func (a *memoAnswer) response(req *http.Request) *http.Response {
	return &http.Response{
		Status:        http.StatusText(a.status),
		StatusCode:    a.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        a.header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(a.body)),
		ContentLength: int64(len(a.body)),
		Request:       req,
	}
}
