package registry

import (
	"maps"
	"sort"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// The prober's half of the circuits' state machine (see circuitstate.go):
// which probes are due, what their outcomes change, and which waits end.

// startProbe records a probe of cb sent now and returns it.
func (hc *hostCircuits) startProbe(cb *circuit, now time.Time) probeJob {
	cb.inFlight++
	cb.lastProbe = now
	hc.inFlight++
	timeout := hc.rules.opts.ProbeTimeout
	if cb.state == circuitChecking {
		timeout = hc.rules.opts.CheckTimeout
	}
	return probeJob{cb: cb, req: cb.probe, timeout: timeout, sent: now}
}

// probed records the outcome of job: fail is nil when the place answered.
// It returns the waiters to wake.
func (hc *hostCircuits) probed(job probeJob, fail *failure.Error, now time.Time) []woken {
	cb := job.cb
	cb.inFlight--
	hc.inFlight--
	if fail == nil {
		if cb.place.Repository != "" {
			hc.lastRepositoryAnswer = now
		}
		var wake []woken
		if hc.open[cb.place.Repository] == cb {
			// A registry check that answers says only that the failure
			// was its repository's: nothing to sweep.
			wake = hc.closeCircuit(cb.place.Repository, cb.state != circuitChecking, now)
		}
		if own := hc.open[""]; own != nil && own.state == circuitWidespread && cb.place.Repository != "" {
			wake = append(wake, hc.closeCircuit("", true, now)...)
		}
		return wake
	}
	wake := cb.endCheck()
	cb.due = now.Add(hc.rules.jittered(hc.rules.opts.ProbeInterval))
	if fail.Reason != cb.err.Reason {
		cb.err = fail
	}
	if cb.failedProbes++; cb.failedProbes == probesBeforeRepositoryRead && cb.place.Repository != "" {
		cb.probe = repositoryProbe(cb.probe, cb.place.Repository)
	}
	if hc.sweep.on && !job.sent.Before(hc.sweep.started) {
		if hc.sweep.failures++; hc.sweep.failures >= sweepParallel {
			hc.sweep.on = false // the registry has not recovered as a whole
		}
	}
	return wake
}

// tick is the prober's turn: it drops the waits nobody renewed and the
// circuits nobody waits on, starts the probes that are due (spaced per
// registry, swept after a recovery, never before a Retry-After), and lets
// one waiter through a widespread failure when its turn comes. It returns
// the probes to send, the waiters taken off (the one let through with its
// wake-up), and when to tick again; idle when nothing of the registry is
// left to remember.
func (hc *hostCircuits) tick(now time.Time) (probes []probeJob, taken []woken, next time.Time, idle bool) {
	taken = hc.expireWaits(now)
	for repo, cb := range hc.open {
		if hc.lapsed(cb, now) {
			delete(hc.open, repo)
		}
	}
	for repo, cl := range hc.closed {
		if now.Sub(cl.at) >= flapWindow {
			delete(hc.closed, repo)
		}
	}
	if len(hc.open) == 0 {
		hc.sweep.on = false
		// Closures (to damp flapping) and the last check are remembered
		// until they expire; then the registry is forgotten.
		forget := hc.lastCheck.Add(hc.rules.opts.ProbeInterval)
		for _, cl := range hc.closed {
			forget = later(forget, cl.at.Add(flapWindow))
		}
		return nil, taken, forget, !now.Before(forget)
	}
	offered, offerAt := hc.offerAdmission(now)
	if offered != nil {
		taken = append(taken, *offered)
	}
	probes, next = hc.dueProbes(now)
	if !offerAt.IsZero() && offerAt.Before(next) {
		next = offerAt
	}
	return probes, taken, next, false
}

// dueProbes starts the probes due now and returns them, and when to look
// again.
func (hc *hostCircuits) dueProbes(now time.Time) ([]probeJob, time.Time) {
	due, next := hc.dueCircuits(now)
	var probes []probeJob
	if hc.sweep.on {
		if len(due) == 0 && hc.inFlight == 0 {
			hc.sweep.on = false
		}
		for _, cb := range due {
			if hc.inFlight >= sweepParallel {
				break
			}
			probes = append(probes, hc.startProbe(cb, now))
		}
		return probes, next
	}
	if len(due) == 0 {
		return nil, next
	}
	if now.Before(hc.nextProbe) {
		return nil, hc.nextProbe
	}
	probes = append(probes, hc.startProbe(due[0], now))
	hc.nextProbe = now.Add(hc.rules.jittered(time.Duration(float64(time.Second) / hc.rules.opts.ProbesPerSecond)))
	if len(due) > 1 && hc.nextProbe.Before(next) {
		next = hc.nextProbe
	}
	return probes, next
}

// offerAdmission takes, when the registry fails widespread and its
// admission is free, one object off its wait, to be woken and let through
// (see admit): the repositories of waiting objects are tried one per probe
// interval, so a repository that answers ends every object's wait, and
// none waits for its safety net because nobody new came to be let
// through. Else it returns when to look again (zero: not widespread).
func (hc *hostCircuits) offerAdmission(now time.Time) (*woken, time.Time) {
	own := hc.open[""]
	if own == nil || own.state != circuitWidespread || len(own.waiters) == 0 {
		return nil, time.Time{}
	}
	if at := later(hc.lastAdmitted, hc.lastOffered).Add(hc.rules.opts.ProbeInterval); now.Before(at) {
		return nil, at
	}
	for key, w := range own.waiters { // any one: map order
		own.removeWaiter(key, now)
		hc.lastOffered = now
		return &woken{key: key, wake: w.wake}, now.Add(hc.rules.opts.ProbeInterval)
	}
	return nil, time.Time{}
}

// dueCircuits returns the circuits whose probe is due, oldest first, and
// when the next one will be (at most a probe interval away).
func (hc *hostCircuits) dueCircuits(now time.Time) ([]*circuit, time.Time) {
	// Until the registry answers at all, its repositories cannot be told
	// apart: probe only its own circuit. A widespread failure is probed
	// through its repositories (its /v2/ answers), and with /v2/ only
	// when none is left open.
	candidates := hc.open
	if own := hc.open[""]; own != nil && (own.state != circuitWidespread || len(hc.open) == 1) {
		candidates = map[string]*circuit{"": own}
	} else if own != nil {
		candidates = maps.Clone(hc.open)
		delete(candidates, "")
	}
	next := now.Add(hc.rules.opts.ProbeInterval)
	var due []*circuit
	for _, cb := range candidates {
		if cb.inFlight >= maxProbesInFlight || !hc.waitedOn(cb) {
			continue
		}
		at := cb.due
		if cb.inFlight > 0 {
			at = later(at, cb.lastProbe.Add(hc.rules.opts.ProbeInterval))
		}
		if hc.sweep.on {
			at = now
		}
		if left := hc.rules.holdLeft(cb.place); left > 0 {
			at = later(at, now.Add(left)) // never before a Retry-After
		}
		if at.After(now) {
			if at.Before(next) {
				next = at
			}
			continue
		}
		due = append(due, cb)
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].due.Equal(due[j].due) {
			return due[i].due.Before(due[j].due)
		}
		return due[i].place.Repository < due[j].place.Repository
	})
	return due, next
}

// expireWaits takes off the waits nobody renewed for WaitExpiry: their
// objects were deleted or handed to another replica, and must not keep
// the place probed forever.
func (hc *hostCircuits) expireWaits(now time.Time) []woken {
	var dropped []woken
	for _, cb := range hc.open {
		for key, w := range cb.waiters {
			if now.Sub(w.since) >= hc.rules.opts.WaitExpiry {
				cb.removeWaiter(key, now)
				dropped = append(dropped, woken{key: key})
			}
		}
	}
	return dropped
}

// lapsed reports whether nobody has waited on cb for a probe interval.
// Whoever waits on one of a registry's repositories waits on the
// registry's own circuit too: while that is open, theirs are not probed.
func (hc *hostCircuits) lapsed(cb *circuit, now time.Time) bool {
	return cb.inFlight == 0 && !hc.waitedOn(cb) && now.Sub(cb.idleSince) >= hc.rules.opts.ProbeInterval
}

// waitedOn reports whether anyone waits on cb: on it, or, for the
// registry's own circuit, on any of its repositories.
func (hc *hostCircuits) waitedOn(cb *circuit) bool {
	if len(cb.waiters) > 0 || cb.place.Repository != "" {
		return len(cb.waiters) > 0
	}
	for _, other := range hc.open {
		if len(other.waiters) > 0 {
			return true
		}
	}
	return false
}
