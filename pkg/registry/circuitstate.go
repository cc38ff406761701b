package registry

import (
	"net/http"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// The state machine of one registry's circuits. It is pure: no lock, no
// goroutine, no clock; every transition takes the time and returns what is
// to be done (probes to send, waiters to wake), so that it is tested with
// tables. Circuits guards it with its mutex and does what it returns. What
// the states mean, and why, is in docs/design.md § Registry client decisions.

// circuitState is what an open circuit is doing; a place without a circuit
// is closed.
type circuitState int

const (
	// circuitOpen: the place fails; only its probes are sent there.
	circuitOpen circuitState = iota
	// circuitChecking: the registry's own circuit while its /v2/ is asked
	// whether it answers at all, after one of its repositories failed;
	// calls to its other repositories wait for the answer.
	circuitChecking
	// circuitWidespread: the registry's own circuit while its /v2/
	// answers but its repositories fail one after another; calls to the
	// others are let through one per probe interval.
	circuitWidespread
)

func (s circuitState) String() string {
	return [...]string{"open", "checking", "widespread"}[s]
}

// sweepParallel is how many probes run at once while a registry that just
// answered one is swept.
const sweepParallel = 8

// widespreadAfter is how many of a registry's repositories may fail in a
// row, none of its places answering in between, before the registry is
// taken to fail as a whole though its /v2/ answers (its storage or its
// rate limit fails, not its front door).
const widespreadAfter = 8

// A circuit that opens again within flapWindow of closing waits twice as
// long for its first probe as the last time, up to maxFlapDelay: a place
// whose probe answers while its waiters' work still fails there would
// otherwise wake them into the same failure every few hundred milliseconds.
const (
	flapWindow   = 10 * time.Second
	maxFlapDelay = time.Minute
)

// maxProbesInFlight bounds the probes of one place in flight at once: one
// a probe interval while they hang, for as long as a probe waits, and one
// more.
const maxProbesInFlight = 6

// probesBeforeRepositoryRead is how many probes re-send a repository's
// failing read before its tag list is read instead: one resource that
// keeps failing (a corrupt blob) must not hold the whole repository.
const probesBeforeRepositoryRead = 5

// circuitRules is what the state machine needs besides the time.
type circuitRules struct {
	opts   CircuitOptions
	jitter func() float64 // in [0, 1)
	// holdLeft is how long a Retry-After keeps requests from a place:
	// nothing, probes included, goes there before it ends.
	holdLeft func(Place) time.Duration
}

// jittered is d ± 20 %.
func (r *circuitRules) jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*r.jitter()))
}

// circuit is one failing place.
type circuit struct {
	place Place
	state circuitState
	err   *failure.Error // what calls fail with while it is open
	probe *http.Request  // the read that failed, to send again
	// opened is when it opened; due when it may be probed next; idleSince
	// when its last waiter left (or it opened).
	opened, due, idleSince time.Time
	// inFlight probes, the last sent at lastProbe. A probe into a hang
	// waits out its timeout; another goes a probe interval after it, so
	// that an answer is noticed within about a second.
	inFlight     int
	lastProbe    time.Time
	failedProbes int
	streak       int // quick reopenings in a row (see flapWindow)
	waiters      map[string]waiter
	// checkWaiters are the calls waiting for a check to end
	// (circuitChecking only): woken when it does, whatever its outcome.
	checkWaiters []func()
}

// waiter is an object waiting on a circuit: woken once when it closes,
// dropped when it has not renewed its wait for WaitExpiry.
type waiter struct {
	wake  func()
	since time.Time
}

// woken is a waiter taken off a circuit, by key, or a call that waited
// for a check (no key: not in the waiters' index).
type woken struct {
	key   string
	wake  func() // nil: dropped, not to be woken
	check bool
}

// closure is when a circuit closed, and how many times in a row it had
// opened again soon after closing.
type closure struct {
	at     time.Time
	streak int
}

// probeJob is a probe to send: the circuit it is for, the request, how
// long it may wait for an answer, and when it was started.
type probeJob struct {
	cb      *circuit
	req     *http.Request
	timeout time.Duration
	sent    time.Time
}

// hostCircuits are the open circuits of one registry, by repository ("" is
// the registry's own), and what its probes and admissions remember.
type hostCircuits struct {
	host   string
	rules  *circuitRules
	open   map[string]*circuit
	closed map[string]closure // recently closed, to damp flapping
	// nextProbe spaces probes to ProbesPerSecond; inFlight counts them.
	nextProbe time.Time
	inFlight  int
	// lastCheck is when a repository's failure last checked /v2/;
	// lastRepositoryAnswer when one of its repositories last answered.
	lastCheck, lastRepositoryAnswer time.Time
	// lastAdmitted is when a call was last let through a widespread
	// failure, lastOffered when a waiter was last woken to be.
	lastAdmitted, lastOffered time.Time
	sweep                     sweep
}

// sweep: a place answered, so the registry's other places are probed at
// once. It stops after sweepParallel probes sent since it started fail
// (the registry has not recovered as a whole), not at the first: a probe
// sent before the recovery, or one place still broken, must not leave
// hundreds of places to be probed one a second.
type sweep struct {
	on       bool
	started  time.Time
	failures int
}

func newHostCircuits(host string, rules *circuitRules) *hostCircuits {
	return &hostCircuits{host: host, rules: rules, open: map[string]*circuit{}, closed: map[string]closure{}}
}

func (hc *hostCircuits) newCircuit(place Place, state circuitState, err *failure.Error, probe *http.Request, due, now time.Time) *circuit {
	return &circuit{place: place, state: state, err: err, probe: probe, opened: now, due: due, idleSince: now,
		waiters: map[string]waiter{}}
}

// covering returns the open circuit covering place, if any. A call (nil:
// none) to a repository without a circuit of its own may be let through a
// widespread failure of its registry: letThrough says this one is now,
// and the caller is to remember it on the call (see admit). A circuit
// nobody waits on is dropped.
func (hc *hostCircuits) covering(place Place, call *call, now time.Time) (open *circuit, letThrough bool) {
	open = hc.open[""]
	if open != nil && open.state == circuitWidespread {
		own := hc.open[place.Repository]
		switch {
		case place.Repository != "" && own != nil:
			open = own // its own failure, and its own probe
		case call != nil && call.admittedTo(hc.host):
			// Let through, or begun before the failure was widespread:
			// its pings and token requests (about no repository) too.
			return nil, false
		case place.Repository != "" && call != nil && hc.admit(now):
			return nil, true
		}
	}
	if open == nil && place.Repository != "" {
		open = hc.open[place.Repository]
	}
	if open == nil {
		return nil, false
	}
	if hc.lapsed(open, now) {
		delete(hc.open, open.place.Repository) // the next call finds out afresh
		return nil, false
	}
	return open, false
}

// admit reports whether a call may go through the registry's widespread
// failure now: one call per probe interval is (a probe of a place nobody
// has tried), and once let through, all its requests to the registry are.
func (hc *hostCircuits) admit(now time.Time) bool {
	if now.Sub(hc.lastAdmitted) < hc.rules.opts.ProbeInterval {
		return false
	}
	hc.lastAdmitted = now
	return true
}

// openAt opens place's circuit (or refreshes an open one) with the failure
// err and the read to probe it with. It returns the registry check to send
// at once, if the failure starts one.
func (hc *hostCircuits) openAt(place Place, err *failure.Error, probe *http.Request, now time.Time) *probeJob {
	opts := hc.rules.opts
	if own := hc.open[""]; own != nil && own.state == circuitWidespread && err.RetryAfter > 0 {
		// A call let through was asked to wait: so are the next.
		hc.lastAdmitted = later(hc.lastAdmitted, now.Add(err.RetryAfter))
	}
	if cb := hc.open[place.Repository]; cb != nil {
		if cb.err.Reason != err.Reason {
			cb.err = err
		}
		if cb.state == circuitWidespread && place.Repository == "" {
			// A call let through failed about no repository (the
			// connection, /v2/): the registry fails as a whole after
			// all. Only its /v2/ is probed from now on.
			cb.state, cb.probe, cb.due = circuitOpen, probe, now.Add(hc.rules.jittered(opts.FirstProbe))
		}
		return nil
	}
	streak := 0
	if last, ok := hc.closed[place.Repository]; ok && now.Sub(last.at) < flapWindow {
		streak = last.streak + 1
	}
	delete(hc.closed, place.Repository)
	first := min(opts.FirstProbe<<min(streak, 20), maxFlapDelay)
	cb := hc.newCircuit(place, circuitOpen, err, probe, now.Add(hc.rules.jittered(first)), now)
	cb.streak = streak
	hc.open[place.Repository] = cb
	switch {
	case place.Repository == "" || hc.open[""] != nil:
	case hc.failingInARow() >= widespreadAfter:
		hc.open[""] = hc.newCircuit(place.hostPlace(), circuitWidespread, err, registryProbe(probe), now, now)
		hc.lastAdmitted = now.Add(err.RetryAfter) // never before a Retry-After
	case now.Sub(hc.lastCheck) >= opts.ProbeInterval && err.RetryAfter == 0 && hc.rules.holdLeft(place) == 0:
		// A failure with a Retry-After is the registry answering (and
		// saying when to come back): nothing to check, and asking /v2/
		// now would be a request before it.
		return hc.check(place, err, probe, now)
	}
	return nil
}

// failingInARow counts the repository circuits opened since any of the
// registry's repositories last answered.
func (hc *hostCircuits) failingInARow() int {
	n := 0
	for repo, cb := range hc.open {
		if repo != "" && cb.opened.After(hc.lastRepositoryAnswer) {
			n++
		}
	}
	return n
}

// check opens the registry's circuit half-open, asking its /v2/ whether it
// answers at all after its repository failed: calls to its other
// repositories wait for that answer rather than each discovering a hang.
// An answer closes it within milliseconds, without a sweep; none keeps it
// open.
func (hc *hostCircuits) check(failed Place, err *failure.Error, probe *http.Request, now time.Time) *probeJob {
	hc.lastCheck = now
	registry := hc.newCircuit(failed.hostPlace(), circuitChecking, err, registryProbe(probe), now, now)
	hc.open[""] = registry
	job := hc.startProbe(registry, now)
	return &job
}

// answered records that place answered with something other than an
// outage: its circuit closes, and a repository's answer closes the
// registry's too. It returns the waiters to wake.
func (hc *hostCircuits) answered(place Place, now time.Time) []woken {
	if len(hc.open) == 0 {
		return nil
	}
	if place.Repository != "" { // /v2/ answering says nothing of the storage
		hc.lastRepositoryAnswer = now
	}
	wake := hc.closeCircuit(place.Repository, true, now)
	if place.Repository != "" {
		wake = append(wake, hc.closeCircuit("", true, now)...)
	}
	return wake
}

// closeCircuit closes repo's circuit, returning its waiters; sweep starts
// a sweep of the registry's other places.
func (hc *hostCircuits) closeCircuit(repo string, sweep bool, now time.Time) []woken {
	cb := hc.open[repo]
	if cb == nil {
		return nil
	}
	delete(hc.open, repo)
	if cb.state != circuitChecking { // a check that answered is no flap
		hc.closed[repo] = closure{at: now, streak: cb.streak}
	}
	wake := cb.endCheck()
	for key, w := range cb.waiters {
		wake = append(wake, woken{key: key, wake: w.wake})
	}
	if sweep && len(hc.open) > 0 {
		hc.sweep = sweepFrom(now)
	}
	return wake
}

func sweepFrom(now time.Time) sweep { return sweep{on: true, started: now} }

// endCheck ends a registry check: its circuit stays open, and the calls
// waiting for the check, returned to be woken, look again.
func (cb *circuit) endCheck() []woken {
	if cb.state != circuitChecking {
		return nil
	}
	cb.state = circuitOpen
	wake := make([]woken, 0, len(cb.checkWaiters))
	for _, w := range cb.checkWaiters {
		wake = append(wake, woken{wake: w, check: true})
	}
	cb.checkWaiters = nil
	return wake
}

// addWaiter makes key wait on the circuit covering repository (or the
// registry's), returning it; nil when none is open.
func (hc *hostCircuits) addWaiter(repository, key string, wake func(), now time.Time) *circuit {
	cb := hc.open[repository]
	if cb == nil {
		cb = hc.open[""]
	}
	if cb != nil {
		cb.waiters[key] = waiter{wake: wake, since: now}
	}
	return cb
}

// removeWaiter takes key off cb.
func (cb *circuit) removeWaiter(key string, now time.Time) {
	if _, ok := cb.waiters[key]; ok {
		delete(cb.waiters, key)
		if len(cb.waiters) == 0 {
			cb.idleSince = now
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
