package dataplane

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The token counters of the simulated Limitador. Upstream: the MaaS
// controller turns each MaaSSubscription modelRef's tokenRateLimits into a
// Kuadrant TokenRateLimitPolicy limit counted per user
// (counters: auth.identity.userid); Kuadrant checks the counter before the
// request and adds usage.total_tokens of the OpenAI response afterwards
// (Kuadrant docs, "TokenRateLimitPolicy": token usage is read from the
// response body), so the request that crosses the limit still succeeds and
// the next one gets 429. Limitador windows are fixed windows that start at
// the first hit.

type limit struct {
	Tokens int64
	Window time.Duration
}

type counter struct {
	start time.Time
	used  int64
}

type limiter struct {
	mu sync.Mutex
	c  map[string]*counter
}

func newLimiter() *limiter { return &limiter{c: map[string]*counter{}} }

func counterKey(scope string, l limit) string {
	return scope + "|" + strconv.FormatInt(l.Tokens, 10) + "/" + l.Window.String()
}

// exceeded reports the first limit whose counter in scope is used up at now.
func (lm *limiter) exceeded(scope string, limits []limit, now time.Time) (limit, bool) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	for _, l := range limits {
		c := lm.c[counterKey(scope, l)]
		if c == nil || !now.Before(c.start.Add(l.Window)) {
			continue
		}
		if c.used >= l.Tokens {
			return l, true
		}
	}
	return limit{}, false
}

// add counts tokens against every limit in scope.
func (lm *limiter) add(scope string, limits []limit, tokens int64, now time.Time) {
	lm.mu.Lock()
	defer lm.mu.Unlock()
	for _, l := range limits {
		k := counterKey(scope, l)
		c := lm.c[k]
		if c == nil || !now.Before(c.start.Add(l.Window)) {
			c = &counter{start: now}
			lm.c[k] = c
		}
		c.used += tokens
	}
}

// parseWindow reads a MaaSSubscription window: 1–9999 followed by s, m or
// h (CRD pattern ^[1-9]\d{0,3}(s|m|h)$).
func parseWindow(w string) (time.Duration, error) {
	if len(w) < 2 {
		return 0, fmt.Errorf("window %q", w)
	}
	n, err := strconv.Atoi(w[:len(w)-1])
	if err != nil || n < 1 {
		return 0, fmt.Errorf("window %q", w)
	}
	switch w[len(w)-1] {
	case 's':
		return time.Duration(n) * time.Second, nil
	case 'm':
		return time.Duration(n) * time.Minute, nil
	case 'h':
		return time.Duration(n) * time.Hour, nil
	}
	return 0, fmt.Errorf("window %q", w)
}
