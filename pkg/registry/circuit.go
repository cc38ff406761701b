package registry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/worker"
)

// Place is where requests fail: a registry host, or one repository of it.
type Place struct {
	Host string
	// Repository is "" when the failure is about the registry as a whole
	// (it cannot be reached, or its /v2/ endpoint fails too).
	Repository string
}

func (p Place) String() string {
	if p.Repository == "" {
		return p.Host
	}
	return p.Host + "/" + p.Repository
}

func (p Place) hostPlace() Place { return Place{Host: p.Host} }

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

// sweepParallel is how many probes run at once while a registry that just
// answered one is swept.
const sweepParallel = 8

// widespreadAfter is how many of a registry's repositories may fail in a
// row, none of its places answering in between, before the registry is
// taken to fail as a whole though its /v2/ answers (its storage or its
// rate limit fails, not its front door). Its own circuit then opens,
// widespread: calls to its repositories that have no circuit of their own
// are let through one per probe interval, each finding out for the others,
// instead of every new repository costing a request of its own — the
// repository of each of a thousand new builders would.
const widespreadAfter = 8

// A circuit that opens again within flapWindow of closing waits twice as
// long for its first probe as the last time, up to maxFlapDelay: a place
// whose probe answers while its waiters' work still fails there (a
// registry in read-only maintenance answers the read that probes a failed
// push) would otherwise wake its waiters into the same failure every few
// hundred milliseconds.
const (
	flapWindow   = 10 * time.Second
	maxFlapDelay = time.Minute
)

// Circuits keeps one circuit per place that failed, and wakes the callers
// waiting on a place when it answers again.
//
// A call that fails on an outage (the registry cannot be reached, resets
// the connection, does not answer in time, or answers 408, 429 or 5xx)
// after its in-call retries opens the circuit of the place its last failed
// request was about: the repository, or the registry when the request was
// about none or the connection itself failed. Answers that are not outages
// (401, 403, 404, other 4xx) never open one. While a circuit is open no
// request of any call goes to its place; callers fail at once with the
// error that opened it and wait on the place (Wait) instead of backing off.
//
// One prober per registry with open circuits re-sends each place's failing
// read (a failed push is probed with a read of its repository; the registry
// with GET /v2/), after its Retry-After, about once a second per place and
// at most ProbesPerSecond per registry, in turn. An answer that is not an
// outage closes the circuit and wakes its waiters; since a registry that
// answers one place has likely recovered as a whole, its other open places
// are then probed at once (a sweep, stopped once sweepParallel of its
// probes have failed).
// A repository's failure also checks the registry's /v2/ once: when that
// fails too, the registry's own circuit opens, and new calls to any of its
// repositories fail at once rather than discovering the outage one by one
// (a hang costs a worker seconds per discovery). /v2/ answering closes only
// the registry's circuit: a repository's stays open until its own read
// answers. When many of its repositories fail in a row while /v2/ answers,
// the registry's circuit opens widespread (see widespreadAfter): calls to
// its other repositories are let through one at a time. A circuit nobody
// waits on is dropped without a probe.
//
// So an outage costs O(failing places) requests per second, capped per
// registry, whatever the number of objects; and recovery is noticed within
// about a second of the registry answering, not at the end of backoffs.
type Circuits struct {
	opts     CircuitOptions
	lifetime context.Context
	// send sends one request on the wire, counted, noting its Retry-After;
	// it bypasses the circuits, the ping cache and the holds.
	send   func(*http.Request) (*http.Response, error)
	holds  *retryAfterHolds
	names  *hostNames // what ProbeResults counts hosts under
	now    func() time.Time
	jitter func() float64 // in [0, 1)

	mu     sync.Mutex
	hosts  map[string]*hostCircuits
	probes map[ProbeResult]int64
	// waits indexes the waiters by key; tenantHosts counts, per tenant
	// and host, the tenant's waiters on the host's circuits.
	waits       map[string]wait
	tenantHosts map[string]map[string]int
}

// hostCircuits are the open circuits of one registry and its prober's state.
type hostCircuits struct {
	host    string
	open    map[string]*circuit // by repository; "" is the registry's own
	probing bool                // a prober runs
	nudge   chan struct{}       // wakes the prober early (new circuit, sweep)
	// nextProbe spaces probes to ProbesPerSecond.
	nextProbe time.Time
	// checked is when a repository's failure last checked /v2/.
	checked time.Time
	// answered is when one of its repositories last answered while a
	// circuit was open; admitted is when a call was last let through a
	// widespread failure, and offered when a waiter was last woken to be.
	answered, admitted, offered time.Time
	// sweeping: a place answered, so the others are probed at once; it
	// stops after sweepParallel probes sent since sweepStarted fail (the
	// registry has not recovered as a whole), not at the first: a probe
	// sent before the recovery, or one place still broken, must not leave
	// hundreds of places to be probed one a second.
	sweeping      bool
	sweepStarted  time.Time
	sweepFailures int
	inFlight      int
	// closed remembers recently closed circuits, by repository, to damp
	// flapping ones.
	closed map[string]closure
}

// closure is when a circuit closed, and how many times in a row it had
// opened again soon after closing.
type closure struct {
	at     time.Time
	streak int
}

type circuit struct {
	place Place
	err   *failure.Error // what calls fail with while it is open
	probe *http.Request  // the read that failed, to send again
	// due is when it may be probed next; idleSince when its last waiter
	// left (or it opened).
	due, idleSince time.Time
	// probes are in flight (half-open), the last sent at probeSent. A
	// probe into a hang waits out its timeout; another goes a probe
	// interval after it, so that a place that answers again is noticed
	// within about a second, not when the hung probe gives up.
	probes       int
	probeSent    time.Time
	waiters      map[string]func()
	streak       int // quick reopenings in a row (see flapWindow)
	failedProbes int
	// check: the registry's circuit opened by a repository's failure,
	// until its first probe says whether the registry fails as a whole;
	// checked is closed then.
	check   bool
	checked chan struct{}
	// widespread: the registry's circuit opened because its repositories
	// fail one after another (see widespreadAfter); it closes when any of
	// its places answers.
	widespread bool
	opened     time.Time
}

// endCheck ends a registry check: calls waiting for it look again.
func (cb *circuit) endCheck() {
	if cb.check {
		cb.check = false
		close(cb.checked)
	}
}

// maxProbesInFlight bounds the probes of one place in flight at once: one
// a probe interval while they hang, for as long as a probe waits (its 5 s
// timeout), and one more.
const maxProbesInFlight = 6

// probesBeforeRepositoryRead is how many probes re-send a repository's
// failing read before its tag list is read instead.
const probesBeforeRepositoryRead = 5

// ProbeResult keys the probe counters.
type ProbeResult struct {
	Host     string
	Answered bool
}

func newCircuits(lifetime context.Context, opts CircuitOptions, holds *retryAfterHolds,
	send func(*http.Request) (*http.Response, error), names *hostNames) *Circuits {
	return &Circuits{opts: opts.withDefaults(), lifetime: lifetime, send: send, holds: holds, names: names,
		now: time.Now, jitter: rand.Float64, hosts: map[string]*hostCircuits{}, probes: map[ProbeResult]int64{},
		waits: map[string]wait{}, tenantHosts: map[string]map[string]int{}}
}

// refuse returns the error of an open circuit covering place (the
// registry's, or the repository's), nil when requests may go there. While
// the registry is being checked, it waits for the answer (or ctx): a
// repository that answers must not be failed because another one did not.
func (c *Circuits) refuse(ctx context.Context, place Place) *failure.Error {
	for {
		open, checked := c.covering(place, callFrom(ctx))
		if open == nil {
			return nil
		}
		if checked == nil {
			left, _ := c.holds.left(open.place.Host, open.place.Repository)
			return &failure.Error{Class: failure.Transient, Reason: open.err.Reason, Host: open.place.Host, Repository: open.place.Repository,
				RetryAfter: left, Untried: open.widespread && open.place.Repository != place.Repository,
				Err: &circuitOpenError{place: open.place, cause: open.err, widespread: open.widespread}}
		}
		waited := worker.Wait(ctx)
		select {
		case <-checked:
			waited()
		case <-ctx.Done():
			waited()
			return &failure.Error{Class: failure.Transient, Reason: open.err.Reason, Host: open.place.Host, Repository: open.place.Repository,
				Err: fmt.Errorf("gave up waiting for %s to answer whether it answers at all: %w", open.place, ctx.Err())}
		}
	}
}

// isOpen reports whether a circuit covering place is open (or checking).
func (c *Circuits) isOpen(place Place) bool {
	open, _ := c.covering(place, nil)
	return open != nil
}

// covering returns the open circuit covering place, if any, and while it
// is a registry check in flight, a channel closed when that is answered.
// A call (nil: none) to a repository without a circuit of its own may be
// let through a widespread failure of its registry: see admit.
func (c *Circuits) covering(place Place, call *call) (*circuit, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc := c.hosts[place.Host]
	if hc == nil {
		return nil, nil
	}
	open := hc.open[""]
	if open != nil && open.widespread {
		own := hc.open[place.Repository]
		switch {
		case place.Repository != "" && own != nil:
			open = own // its own failure, and its own probe
		case call != nil && call.admittedTo(place.Host):
			// Let through, or begun before the failure was widespread:
			// its pings and token requests (about no repository) too.
			return nil, nil
		case place.Repository != "" && c.admit(hc, call):
			return nil, nil
		}
	}
	if open == nil && place.Repository != "" {
		open = hc.open[place.Repository]
	}
	if open == nil {
		return nil, nil
	}
	if c.lapsed(hc, open) {
		// Nobody waits on it: the next call finds out afresh.
		delete(hc.open, open.place.Repository)
		return nil, nil
	}
	if open.check {
		return open, open.checked
	}
	return open, nil
}

// admit reports whether call may go through its registry's widespread
// failure: one call per probe interval is let through (a probe of a place
// nobody has tried), and once let through, all of its requests to the
// registry are. c.mu must be held.
func (c *Circuits) admit(hc *hostCircuits, call *call) bool {
	now := c.now()
	if call == nil || now.Sub(hc.admitted) < c.opts.ProbeInterval {
		return false
	}
	hc.admitted = now
	call.admit(hc.host)
	return true
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

// open opens place's circuit (or refreshes an open one) with the failure
// err and the read to probe it with.
func (c *Circuits) open(place Place, err *failure.Error, probe *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc := c.host(place.Host)
	now := c.now()
	if own := hc.open[""]; own != nil && own.widespread && err.RetryAfter > 0 {
		// A call let through was asked to wait: so are the next.
		hc.admitted = later(hc.admitted, now.Add(err.RetryAfter))
	}
	if cb := hc.open[place.Repository]; cb != nil {
		if cb.err.Reason != err.Reason {
			cb.err = err
		}
		if cb.widespread && place.Repository == "" {
			// A call let through failed about no repository (the
			// connection, /v2/): the registry fails as a whole after
			// all. Only its /v2/ is probed from now on.
			cb.widespread, cb.probe, cb.due = false, probe, now.Add(c.jittered(c.opts.FirstProbe))
		}
		return
	}
	streak := 0
	if last, ok := hc.closed[place.Repository]; ok && now.Sub(last.at) < flapWindow {
		streak = last.streak + 1
	}
	delete(hc.closed, place.Repository)
	first := min(c.opts.FirstProbe<<min(streak, 20), maxFlapDelay)
	hc.open[place.Repository] = &circuit{place: place, err: err, probe: probe, streak: streak,
		due: now.Add(c.jittered(first)), idleSince: now, opened: now, waiters: map[string]func(){}}
	switch {
	case place.Repository == "" || hc.open[""] != nil:
	case failingInARow(hc) >= widespreadAfter:
		hc.open[""] = &circuit{place: place.hostPlace(), err: err, probe: registryProbe(probe), widespread: true,
			due: now, idleSince: now, opened: now, waiters: map[string]func(){}}
		hc.admitted = now.Add(err.RetryAfter) // never before a Retry-After
	case now.Sub(hc.checked) >= c.opts.ProbeInterval && err.RetryAfter == 0 && c.holdLeft(place) == 0:
		// A failure with a Retry-After is the registry answering (and
		// saying when to come back): nothing to check, and asking /v2/
		// now would be a request before it.
		c.checkRegistry(hc, place, err, probe)
	}
	c.startProber(place.Host, hc)
}

// failingInARow counts hc's repository circuits opened since any of its
// repositories last answered; c.mu must be held.
func failingInARow(hc *hostCircuits) int {
	n := 0
	for repo, cb := range hc.open {
		if repo != "" && cb.opened.After(hc.answered) {
			n++
		}
	}
	return n
}

// checkRegistry asks the registry's /v2/ whether it answers at all, after
// its repository failed at failed: the registry's circuit opens at once,
// half-open, with that question as its probe. While it is asked, calls to
// the registry's other repositories wait on it rather than discovering the
// outage one by one (a hang costs each of them the answer timeout); an
// answer closes it again within milliseconds, without a sweep; no answer
// keeps it open. c.mu must be held.
func (c *Circuits) checkRegistry(hc *hostCircuits, failed Place, err *failure.Error, probe *http.Request) {
	now := c.now()
	hc.checked = now
	registry := &circuit{place: failed.hostPlace(), err: err, probe: registryProbe(probe), check: true,
		checked: make(chan struct{}), due: now, idleSince: now, waiters: map[string]func(){}}
	hc.open[""] = registry
	c.startProbe(hc, registry)
}

// answered records that place answered a request with something other than
// an outage: its circuit closes, and a repository's answer closes the
// registry's too. Waiters are woken.
func (c *Circuits) answered(place Place) {
	c.mu.Lock()
	hc := c.hosts[place.Host]
	if hc == nil || len(hc.open) == 0 {
		c.mu.Unlock()
		return
	}
	if place.Repository != "" { // /v2/ answering says nothing of the storage
		hc.answered = c.now()
	}
	var wake []func()
	wake = append(wake, c.closeLocked(hc, place.Repository, true)...)
	if place.Repository != "" {
		wake = append(wake, c.closeLocked(hc, "", true)...)
	}
	c.mu.Unlock()
	for _, w := range wake {
		w()
	}
}

// closeLocked closes hc's circuit of repo, returning its waiters' wake-ups.
func (c *Circuits) closeLocked(hc *hostCircuits, repo string, sweep bool) []func() {
	cb := hc.open[repo]
	if cb == nil {
		return nil
	}
	delete(hc.open, repo)
	if !cb.check { // a check that answered is no flap
		hc.closed[repo] = closure{at: c.now(), streak: cb.streak}
	}
	cb.endCheck()
	wake := make([]func(), 0, len(cb.waiters))
	for key, w := range cb.waiters {
		wake = append(wake, w)
		c.unindex(key) // its wait is over
	}
	// The registry answers: its other places may well answer too.
	if sweep && len(hc.open) > 0 {
		hc.sweeping, hc.sweepStarted, hc.sweepFailures = true, c.now(), 0
	}
	c.nudge(hc)
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
	out := make(map[ProbeResult]int64, len(c.probes))
	for k, v := range c.probes {
		out[k] = v
	}
	return out
}

// host returns host's entry, creating it; c.mu must be held.
func (c *Circuits) host(host string) *hostCircuits {
	hc := c.hosts[host]
	if hc == nil {
		hc = &hostCircuits{host: host, open: map[string]*circuit{}, closed: map[string]closure{}, nudge: make(chan struct{}, 1)}
		c.hosts[host] = hc
	}
	return hc
}

func (c *Circuits) nudge(hc *hostCircuits) {
	select {
	case hc.nudge <- struct{}{}:
	default:
	}
}

func (c *Circuits) jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*c.jitter()))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// failing reports whether host has an open circuit.
func (c *Circuits) failing(host string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	hc := c.hosts[host]
	return hc != nil && len(hc.open) > 0
}
