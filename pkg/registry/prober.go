package registry

import (
	"context"
	"io"
	"maps"
	"net/http"
	"sort"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Each registry with open circuits has a prober: it drops the circuits
// nobody waits on, sends the probes that are due (spaced per registry,
// swept after a recovery, never before a Retry-After), lets waiters
// through a widespread failure one at a time, and forgets the registry
// once nothing of it is left to remember.

// startProber starts host's prober unless it runs; c.mu must be held.
func (c *Circuits) startProber(host string, hc *hostCircuits) {
	if hc.probing {
		c.nudge(hc)
		return
	}
	hc.probing = true
	go c.runProber(host, hc)
}

// runProber probes host's open circuits until none is left or the lifetime
// ends.
func (c *Circuits) runProber(host string, hc *hostCircuits) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next, wake, ok := c.probeDue(host, hc)
		if wake != nil {
			wake()
		}
		if !ok {
			return
		}
		timer.Reset(max(next.Sub(c.now()), time.Millisecond))
		select {
		case <-c.lifetime.Done():
			c.mu.Lock()
			hc.probing = false
			c.mu.Unlock()
			return
		case <-timer.C:
		case <-hc.nudge:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	}
}

// probeDue drops the circuits nobody waits on, starts the probes that are
// due, and returns when to look again, and a waiter to wake (see
// admitWaiter); false when no circuit is left.
func (c *Circuits) probeDue(host string, hc *hostCircuits) (time.Time, func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.expireWaits(hc, now)
	for repo, cb := range hc.open {
		if c.lapsed(hc, cb) {
			delete(hc.open, repo) // nobody cares; the next call finds out afresh
		}
	}
	for repo, cl := range hc.closed {
		if now.Sub(cl.at) >= flapWindow {
			delete(hc.closed, repo)
		}
	}
	if len(hc.open) == 0 {
		hc.sweeping = false
		// What is left to remember (closures, to damp flapping; the last
		// check) is forgotten by this prober when it expires, and then
		// the host: nothing of it outlives its use.
		forget := hc.checked.Add(c.opts.ProbeInterval)
		for _, cl := range hc.closed {
			forget = later(forget, cl.at.Add(flapWindow))
		}
		if now.Before(forget) {
			return forget, nil, true
		}
		hc.probing = false
		delete(c.hosts, host)
		return time.Time{}, nil, false
	}
	wake, admitAt := c.admitWaiter(hc, now)
	due, next := c.dueCircuits(hc, now)
	if hc.sweeping {
		if len(due) == 0 && hc.inFlight == 0 {
			hc.sweeping = false
		}
		for _, cb := range due {
			if hc.inFlight >= sweepParallel {
				break
			}
			c.startProbe(hc, cb)
		}
		return next, wake, true
	}
	if len(due) > 0 {
		if now.Before(hc.nextProbe) {
			return later(now, hc.nextProbe), wake, true
		}
		c.startProbe(hc, due[0])
		hc.nextProbe = now.Add(c.jittered(time.Duration(float64(time.Second) / c.opts.ProbesPerSecond)))
		if len(due) > 1 && hc.nextProbe.Before(next) {
			next = hc.nextProbe
		}
	}
	if !admitAt.IsZero() && admitAt.Before(next) {
		next = admitAt
	}
	return next, wake, true
}

// admitWaiter returns, when hc's registry fails widespread and its
// admission is free, the wake-up of one object waiting on it, whose call
// will be let through (see admit): the repositories of waiting objects are
// tried one per probe interval as the failing ones are probed, so a
// repository that answers ends the wait of every object, and none waits
// for its safety net because nobody new came to be let through. Else it
// returns when to look again (zero: not widespread). c.mu must be held.
func (c *Circuits) admitWaiter(hc *hostCircuits, now time.Time) (func(), time.Time) {
	own := hc.open[""]
	if own == nil || !own.widespread || len(own.waiters) == 0 {
		return nil, time.Time{}
	}
	if at := later(hc.admitted, hc.offered).Add(c.opts.ProbeInterval); now.Before(at) {
		return nil, at
	}
	for key, wake := range own.waiters { // any one: map order
		delete(own.waiters, key)
		c.unindex(key)
		if len(own.waiters) == 0 {
			own.idleSince = now
		}
		hc.offered = now
		return wake, now.Add(c.opts.ProbeInterval)
	}
	return nil, time.Time{}
}

// dueCircuits returns hc's circuits whose probe is due, oldest first, and
// when the next one will be (at most a probe interval away); c.mu must be
// held.
func (c *Circuits) dueCircuits(hc *hostCircuits, now time.Time) ([]*circuit, time.Time) {
	// Until the registry answers at all, its repositories cannot be told
	// apart: probe only its own circuit. A widespread failure is probed
	// through its repositories (its /v2/ answers), and with /v2/ only
	// when none is left open.
	candidates := hc.open
	if own := hc.open[""]; own != nil && (!own.widespread || len(hc.open) == 1) {
		candidates = map[string]*circuit{"": own}
	} else if own != nil {
		candidates = maps.Clone(hc.open)
		delete(candidates, "")
	}
	next := now.Add(c.opts.ProbeInterval)
	var due []*circuit
	for _, cb := range candidates {
		if cb.probes >= maxProbesInFlight || !waitedOn(hc, cb) {
			continue
		}
		at := cb.due
		if cb.probes > 0 {
			at = later(at, cb.probeSent.Add(c.opts.ProbeInterval))
		}
		if hc.sweeping {
			at = now
		}
		if left := c.holdLeft(cb.place); left > 0 {
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
	sort.Slice(due, func(i, j int) bool { return due[i].due.Before(due[j].due) })
	return due, next
}

// lapsed reports whether nobody has waited on cb for a probe interval;
// c.mu must be held. Whoever waits on one of a registry's repositories
// waits on the registry's own circuit too: while that is open, theirs are
// not probed.
func (c *Circuits) lapsed(hc *hostCircuits, cb *circuit) bool {
	return cb.probes == 0 && !waitedOn(hc, cb) && c.now().Sub(cb.idleSince) >= c.opts.ProbeInterval
}

// waitedOn reports whether anyone waits on cb: on it, or, for a registry's
// own circuit, on any of its repositories.
func waitedOn(hc *hostCircuits, cb *circuit) bool {
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

func (c *Circuits) holdLeft(p Place) time.Duration {
	left, _ := c.holds.left(p.Host, p.Repository)
	return left
}

// startProbe sends cb's probe in the background; c.mu must be held.
func (c *Circuits) startProbe(hc *hostCircuits, cb *circuit) {
	sent := c.now()
	cb.probes++
	cb.probeSent = sent
	hc.inFlight++
	timeout := c.opts.ProbeTimeout
	if cb.check {
		timeout = c.opts.CheckTimeout
	}
	// Read under the lock: a probe of the same circuit still in flight
	// may replace cb.probe when it fails (see repositoryProbe below).
	probe := cb.probe
	go func() {
		ctx, cancel := context.WithTimeout(c.lifetime, timeout)
		fail := c.sendProbe(ctx, probe)
		cancel()

		c.mu.Lock()
		cb.probes--
		hc.inFlight--
		c.probes[ProbeResult{Host: c.names.of(cb.place.Host, fail == nil), Answered: fail == nil}]++
		var wake []func()
		if fail == nil {
			if cb.place.Repository != "" {
				hc.answered = c.now()
			}
			if hc.open[cb.place.Repository] == cb {
				// A registry check that answers says only that the
				// failure was its repository's: nothing to sweep.
				wake = c.closeLocked(hc, cb.place.Repository, !cb.check)
			}
			if own := hc.open[""]; own != nil && own.widespread && cb.place.Repository != "" {
				wake = append(wake, c.closeLocked(hc, "", true)...)
			}
		} else {
			cb.endCheck()
			cb.due = c.now().Add(c.jittered(c.opts.ProbeInterval))
			if fail.Reason != cb.err.Reason {
				cb.err = fail
			}
			if cb.failedProbes++; cb.failedProbes == probesBeforeRepositoryRead && cb.place.Repository != "" {
				// One resource that keeps failing (a corrupt blob) must
				// not hold the whole repository: ask the repository.
				cb.probe = repositoryProbe(cb.probe, cb.place.Repository)
			}
			if hc.sweeping && !sent.Before(hc.sweepStarted) {
				if hc.sweepFailures++; hc.sweepFailures >= sweepParallel {
					hc.sweeping = false // this registry has not recovered as a whole
				}
			}
		}
		c.nudge(hc)
		c.mu.Unlock()
		for _, w := range wake {
			w()
		}
	}()
}

// sendProbe sends req once and returns nil when the answer is not an
// outage, else the failure.
func (c *Circuits) sendProbe(ctx context.Context, req *http.Request) *failure.Error {
	resp, err := c.send(req.Clone(ctx))
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
	if c.lifetime.Err() != nil {
		// Shutting down: an answer cut short says nothing; wake nobody.
		return &failure.Error{Class: failure.Transient, Reason: ReasonRegistryUnavailable, Host: req.URL.Host, Err: c.lifetime.Err()}
	}
	// Judged against the lifetime, not ctx: the probe's own deadline
	// passing is the place not answering (a hang), not a caller who gave up.
	if !isOutage(c.lifetime, resp, err) {
		return nil
	}
	return outageError(req, resp, err)
}
