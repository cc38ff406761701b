package registry

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The state of one Client operation (a call), carried in the context of
// the requests it makes: the transports below ggcr note on it what the
// call's requests met, for the error the call returns.

// call is the state of one Client operation, carried in the context of the
// requests it makes.
type call struct {
	// target is the place the call is about (its reference's registry and
	// repository).
	target     Place
	retryAfter atomic.Int64 // the longest Retry-After seen, in ns
	callOutage
	// admitted: the registries whose widespread failure let this call
	// through (recorded by Circuits.covering).
	admitted sync.Map // host → true
}

func (c *call) admit(host string)           { c.admitted.Store(host, true) }
func (c *call) admittedTo(host string) bool { _, ok := c.admitted.Load(host); return ok }

func (c *call) noteRetryAfter(d time.Duration) {
	for {
		old := c.retryAfter.Load()
		if int64(d) <= old || c.retryAfter.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

func (c *call) RetryAfter() time.Duration { return time.Duration(c.retryAfter.Load()) }

type callKey struct{}

func withCall(ctx context.Context, target Place) (context.Context, *call) {
	c := &call{target: target}
	return context.WithValue(ctx, callKey{}, c), c
}

func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

// outage is the last failed request of a call that failed on an outage.
type outage struct {
	place Place
	probe *http.Request
}

// callOutage is the part of a call's state about outages.
type callOutage struct {
	mu   sync.Mutex
	last *outage
}

func (c *callOutage) noteOutage(place Place, probe *http.Request) {
	c.mu.Lock()
	c.last = &outage{place: place, probe: probe}
	c.mu.Unlock()
}

func (c *callOutage) answered(place Place) {
	c.mu.Lock()
	if c.last != nil && c.last.place == place {
		c.last = nil
	}
	c.mu.Unlock()
}

func (c *callOutage) outage() *outage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}
