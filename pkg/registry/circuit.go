package registry

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
)

// CircuitOptions tunes the circuits. The zero value of a field means its
// default.
type CircuitOptions struct {
	// FirstProbe is the wait before a newly opened circuit is first probed:
	// short, since most blips are over by then. Default 200ms.
	FirstProbe time.Duration
	// ProbeInterval is how often one place is probed at most (±20 %), and
	// so about how long a recovery goes unnoticed. Default 1s.
	ProbeInterval time.Duration
	// ProbesPerSecond caps the probes sent to one registry: when more of
	// its places are open than that, they are probed in turn (and the
	// first that answers sweeps the rest). Default 1.
	ProbesPerSecond float64
	// ProbeTimeout bounds one probe. Default 5s.
	ProbeTimeout time.Duration
	// CheckTimeout bounds the /v2/ check a repository's failure starts.
	// /v2/ is the cheapest answer a registry gives (no storage, no token
	// service): after a read went unanswered for the answer timeout, a
	// registry that does not answer even that within CheckTimeout is
	// hanging, and calls waiting on the check hold their workers
	// meanwhile. Default 2s.
	CheckTimeout time.Duration
	// HostsPerTenant bounds the registries one tenant (a namespace) waits
	// on at once. Each registry waited on costs a prober and its probes,
	// and tenants choose hosts (a builder's tag): without a bound, 5,000
	// builders naming 5,000 unreachable hosts would keep 5,000 probers
	// sending. Beyond it, that tenant's objects retry on their own backoff
	// (TenantLimit). Default 16.
	HostsPerTenant int
	// WaitExpiry drops a wait not renewed for this long. A waiter's own
	// requeue (its safety net) waits again while the place fails; one that
	// never comes back (its object deleted or handed to another replica
	// meanwhile) must not keep the place probed, and its tenant counted
	// against HostsPerTenant, forever. Keep it above the safety net's
	// delay. Default 15m.
	WaitExpiry time.Duration
}

func (o CircuitOptions) withDefaults() CircuitOptions {
	if o.FirstProbe <= 0 {
		o.FirstProbe = 200 * time.Millisecond
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = time.Second
	}
	if o.ProbesPerSecond <= 0 {
		o.ProbesPerSecond = 1
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.CheckTimeout <= 0 {
		o.CheckTimeout = min(2*time.Second, o.ProbeTimeout)
	}
	if o.HostsPerTenant <= 0 {
		o.HostsPerTenant = 16
	}
	if o.WaitExpiry <= 0 {
		o.WaitExpiry = 15 * time.Minute
	}
	return o
}

// Circuits keeps a circuit per failing place (a registry, or one of its
// repositories): while it is open, calls to the place fail at once and
// wait on it (Wait) instead of backing off, and one prober per registry
// re-sends the failing read until it answers, then wakes the waiters. An
// outage so costs O(failing places) requests per second, capped per
// registry, and its end is noticed within about a second. The states and
// their reasons are in docs/design.md § Registry client decisions; the
// transitions are hostCircuits' (circuitstate.go), the probers' goroutines
// prober.go's.
type Circuits struct {
	rules    circuitRules
	lifetime context.Context
	// send sends one request on the wire, counted, noting its Retry-After;
	// it bypasses the circuits, the ping cache and the holds.
	send  func(*http.Request) (*http.Response, error)
	names *hostNames // what ProbeResults counts hosts under

	mu      sync.Mutex
	hosts   map[string]*hostCircuits
	probers map[string]chan struct{} // each running prober's nudge, by registry
	probes  map[ProbeResult]int64
	// waits indexes the waiters by key; tenantHosts counts, per tenant
	// and host, the tenant's waiters on the host's circuits.
	waits       map[string]wait
	tenantHosts map[string]map[string]int
}

// ProbeResult keys the probe counters.
type ProbeResult struct {
	Host     string
	Answered bool
}

func newCircuits(lifetime context.Context, opts CircuitOptions, holds *retryAfterHolds,
	send func(*http.Request) (*http.Response, error), names *hostNames) *Circuits {
	holdLeft := func(p Place) time.Duration {
		left, _ := holds.left(p.Host, p.Repository)
		return left
	}
	return &Circuits{rules: circuitRules{opts: opts.withDefaults(), jitter: rand.Float64, holdLeft: holdLeft},
		lifetime: lifetime, send: send, names: names,
		hosts: map[string]*hostCircuits{}, probers: map[string]chan struct{}{}, probes: map[ProbeResult]int64{},
		waits: map[string]wait{}, tenantHosts: map[string]map[string]int{}}
}

// refuse returns the error of an open circuit covering place (the
// registry's, or the repository's), nil when requests may go there. While
// the registry is being checked, it waits for the answer (or ctx): a
// repository that answers must not be failed because another one did not.
func (c *Circuits) refuse(ctx context.Context, place Place) *failure.Error {
	for {
		refusal, checkEnded := c.covering(place, callFrom(ctx))
		if checkEnded == nil {
			return refusal
		}
		waited := worker.Wait(ctx)
		select {
		case <-checkEnded:
			waited()
		case <-ctx.Done():
			waited()
			registry := place.hostPlace() // only a registry is checked
			return placed(registry, failure.Transient, refusal.Reason, 0,
				fmt.Errorf("gave up waiting for %s to answer whether it answers at all: %w", registry, ctx.Err()))
		}
	}
}

// isOpen reports whether a circuit covering place is open (or checking).
func (c *Circuits) isOpen(place Place) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc := c.hosts[place.Host]
	if hc == nil {
		return false
	}
	open, _ := hc.covering(place, nil, time.Now())
	return open != nil
}

// covering returns the error of the open circuit covering place, if any,
// for call (nil: none), and while that circuit is a registry check, a
// channel closed when the check ends; see hostCircuits.covering.
func (c *Circuits) covering(place Place, call *call) (*failure.Error, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc := c.hosts[place.Host]
	if hc == nil {
		return nil, nil
	}
	open, letThrough := hc.covering(place, call, time.Now())
	if letThrough {
		call.admit(hc.host)
	}
	if open == nil {
		return nil, nil
	}
	widespread := open.state == circuitWidespread
	refusal := &failure.Error{Class: failure.Transient, Reason: open.err.Reason, RetryAfter: c.rules.holdLeft(open.place),
		Err: &PlaceError{Place: open.place, Untried: widespread && open.place.Repository != place.Repository,
			Err: &circuitOpenError{place: open.place, cause: open.err, widespread: widespread}}}
	if open.state != circuitChecking {
		return refusal, nil
	}
	ended := make(chan struct{})
	open.checkWaiters = append(open.checkWaiters, func() { close(ended) })
	return refusal, ended
}

// circuitOpenError is what a call refused by an open circuit fails with.
type circuitOpenError struct {
	place      Place
	cause      *failure.Error
	widespread bool
}

func (e *circuitOpenError) Error() string {
	if e.widespread {
		return fmt.Sprintf("%s answers, but its repositories fail one after another, so calls to the others are let through "+
			"one a second until one of them answers: %v", e.place, e.cause)
	}
	return fmt.Sprintf("%s is failing, so nothing is sent there until a probe gets an answer: %v", e.place, e.cause)
}

// Unwrap is deliberately absent: the cause's class is the circuit's, and
// nothing below should be mistaken for this call's own network error.

// trip opens place's circuit (or refreshes an open one) with the failure
// err and the read to probe it with.
func (c *Circuits) trip(place Place, err *failure.Error, probe *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc := c.hosts[place.Host]
	if hc == nil {
		hc = newHostCircuits(place.Host, &c.rules)
		c.hosts[place.Host] = hc
	}
	if check := hc.openAt(place, err, probe, time.Now()); check != nil {
		c.sendProbe(hc, *check)
	}
	c.startProber(hc)
}

// answered records that place answered a request with something other than
// an outage, and wakes the waiters of the circuits that closes.
func (c *Circuits) answered(place Place) {
	c.mu.Lock()
	hc := c.hosts[place.Host]
	if hc == nil {
		c.mu.Unlock()
		return
	}
	wake := c.takeWaiters(hc, hc.answered(place, time.Now()))
	c.mu.Unlock()
	for _, w := range wake {
		w()
	}
}

// takeWaiters unindexes the waiters hc took off its circuits, nudges its
// prober when anything closed, and returns the wake-ups to call once c.mu
// is released; c.mu must be held.
func (c *Circuits) takeWaiters(hc *hostCircuits, taken []woken) []func() {
	c.nudge(hc.host)
	return c.unindexTaken(taken)
}

// unindexTaken unindexes the waiters taken off circuits and returns the
// wake-ups of those to wake; c.mu must be held.
func (c *Circuits) unindexTaken(taken []woken) []func() {
	var wake []func()
	for _, w := range taken {
		if !w.check {
			c.unindex(w.key)
		}
		if w.wake != nil {
			wake = append(wake, w.wake)
		}
	}
	return wake
}

// OpenCircuit describes an open circuit, for metrics and tests.
type OpenCircuit struct {
	Place   Place
	Reason  string
	Waiters int
}

// Open lists the open circuits.
func (c *Circuits) Open() []OpenCircuit {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []OpenCircuit
	for _, hc := range c.hosts {
		for _, cb := range hc.open {
			out = append(out, OpenCircuit{Place: cb.place, Reason: cb.err.Reason, Waiters: len(cb.waiters)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Place.String() < out[j].Place.String() })
	return out
}

// ProbeResults returns how many probes each registry answered and failed,
// by the name it is counted under (see Options.NamedHosts).
func (c *Circuits) ProbeResults() map[ProbeResult]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.probes)
}

// failing reports whether host has an open circuit.
func (c *Circuits) failing(host string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc := c.hosts[host]
	return hc != nil && len(hc.open) > 0
}
