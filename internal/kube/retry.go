package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// RetryPolicy bounds the retries of one API request after a transient
// failure: a dropped or refused connection, 429 Too Many Requests, 500, 502,
// 503 or 504, or 409 with reason Conflict. The kube-apiserver documents 429
// and 5xx with Retry-After as "try again later"
// (https://kubernetes.io/docs/reference/using-api/api-concepts/#retrying-requests);
// server-side apply and Update with a resourceVersion are safe to send again,
// and a real conflict just repeats until the bound.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first (default
	// 6). After the last one the response or error is returned as is,
	// except that Retry-After is removed and a transport error is wrapped
	// in a RetryExhaustedError, so that client-go's own retry logic does not
	// multiply the bound.
	MaxAttempts int
	// BaseDelay is the wait before the first retry; it doubles each retry,
	// with ±20 % jitter (default 50 ms).
	BaseDelay time.Duration
	// MaxDelay caps one wait, a server's Retry-After included (default 2 s).
	MaxDelay time.Duration
}

// DefaultRetryPolicy is the policy of New: at most 6 attempts, waits of
// 50 ms, 100 ms, 200 ms, 400 ms, 800 ms (≈1.6 s in all) unless the server
// asks for longer with Retry-After, capped at 2 s per wait.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 6, BaseDelay: 50 * time.Millisecond, MaxDelay: 2 * time.Second}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultRetryPolicy.MaxAttempts
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultRetryPolicy.BaseDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultRetryPolicy.MaxDelay
	}
	return p
}

// delay is the wait before retry number n (1-based); retryAfter, when
// positive, is what the server asked for.
func (p RetryPolicy) delay(n int, retryAfter time.Duration) time.Duration {
	d := retryAfter
	if d <= 0 {
		d = p.BaseDelay << (n - 1)
		if d <= 0 || d > p.MaxDelay { // overflow or cap
			d = p.MaxDelay
		}
		d = time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
	}
	return min(d, p.MaxDelay)
}

// RetryExhaustedError is returned when every attempt of a request failed at
// the transport level (the connection dropped, was reset or refused).
type RetryExhaustedError struct {
	Method, Path string
	Attempts     int
	// Last is the last attempt's error text. The error itself is not
	// wrapped: client-go retries GETs whose error looks like a dropped
	// connection, which would multiply the bound.
	Last string
}

func (e *RetryExhaustedError) Error() string {
	return fmt.Sprintf("%s %s: gave up after %d attempts: %s", e.Method, e.Path, e.Attempts, e.Last)
}

type retryTransport struct {
	next    http.RoundTripper
	policy  RetryPolicy
	log     *zap.Logger
	counter *RequestCounter
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	canResend := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	for attempt := 1; ; attempt++ {
		r := req
		if attempt > 1 {
			r = req.Clone(ctx)
			if req.GetBody != nil {
				body, err := req.GetBody()
				if err != nil {
					return nil, fmt.Errorf("%s %s: rewind request body: %w", req.Method, req.URL.Path, err)
				}
				r.Body = body
			}
		}
		resp, err := t.next.RoundTrip(r)
		reason, retryAfter, retryable := classify(resp, err)
		if !retryable || !canResend || ctx.Err() != nil {
			return resp, err
		}
		if attempt >= t.policy.MaxAttempts {
			t.log.Debug("API request failed; retries exhausted",
				zap.String("method", req.Method), zap.String("path", req.URL.Path),
				zap.String("reason", reason), zap.Int("attempts", attempt))
			if err != nil {
				return nil, &RetryExhaustedError{Method: req.Method, Path: req.URL.Path, Attempts: attempt, Last: reason}
			}
			resp.Header.Del("Retry-After")
			return resp, nil
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
		}
		wait := t.policy.delay(attempt, retryAfter)
		t.counter.retries.Add(1)
		t.log.Debug("retrying API request",
			zap.String("method", req.Method), zap.String("path", req.URL.Path),
			zap.String("reason", reason), zap.Int("attempt", attempt),
			zap.Int("maxAttempts", t.policy.MaxAttempts), zap.Duration("wait", wait))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// classify decides whether a response or transport error is transient. For
// a 409 it reads the body (and puts it back) to tell reason Conflict, which
// is retried, from AlreadyExists, which is not.
func classify(resp *http.Response, err error) (reason string, retryAfter time.Duration, retryable bool) {
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return "", 0, false
		}
		if utilnet.IsConnectionRefused(err) {
			return err.Error(), 0, true // "dial tcp ...: connection refused"
		}
		if utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) ||
			utilnet.IsHTTP2ConnectionLost(err) || errors.Is(err, syscall.EPIPE) {
			return "connection lost: " + err.Error(), 0, true
		}
		return "", 0, false
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			retryAfter = time.Duration(s) * time.Second
		}
		return fmt.Sprintf("HTTP %d", resp.StatusCode), retryAfter, true
	case http.StatusConflict:
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if rerr != nil {
			return "", 0, false
		}
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Reason == metav1.StatusReasonConflict {
			return "HTTP 409 Conflict", 0, true
		}
	}
	return "", 0, false
}
