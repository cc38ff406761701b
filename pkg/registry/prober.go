package registry

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Each registry with open circuits has a prober: a goroutine that ticks
// its state machine (hostCircuits.tick) when it asks to, or when nudged,
// sends the probes the tick returns, and wakes the waiters it lets
// through. It ends, and the registry is forgotten, once nothing of it is
// left to remember.

// startProber starts hc's prober unless it runs, else nudges it; c.mu must
// be held.
func (c *Circuits) startProber(hc *hostCircuits) {
	if _, running := c.probers[hc.host]; running {
		c.nudge(hc.host)
		return
	}
	nudge := make(chan struct{}, 1)
	c.probers[hc.host] = nudge
	go c.runProber(hc, nudge)
}

// nudge makes host's prober tick now (a circuit opened or closed); c.mu
// must be held.
func (c *Circuits) nudge(host string) {
	select {
	case c.probers[host] <- struct{}{}: // a nil channel (none running): never
	default:
	}
}

// runProber ticks hc until it is idle or the lifetime ends.
func (c *Circuits) runProber(hc *hostCircuits, nudge <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wake, ok := c.tick(hc, timer)
		for _, w := range wake {
			w()
		}
		if !ok {
			return // forgotten under the lock: nothing nudges it any more
		}
		select {
		case <-c.lifetime.Done():
			c.mu.Lock()
			delete(c.probers, hc.host)
			c.mu.Unlock()
			return
		case <-timer.C:
		case <-nudge:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	}
}

// tick runs hc's tick under the lock, sends its probes and sets timer for
// the next. It returns the waiters to wake; false when the registry was
// forgotten.
func (c *Circuits) tick(hc *hostCircuits, timer *time.Timer) ([]func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	probes, taken, next, idle := hc.tick(now)
	if idle {
		delete(c.probers, hc.host)
		delete(c.hosts, hc.host)
		return nil, false
	}
	wake := c.unindexTaken(taken)
	for _, job := range probes {
		c.sendProbe(hc, job)
	}
	next = later(next, now.Add(time.Millisecond))
	timer.Reset(next.Sub(now))
	return wake, true
}

// sendProbe sends job in the background and records its outcome; c.mu
// must be held.
func (c *Circuits) sendProbe(hc *hostCircuits, job probeJob) {
	go func() {
		ctx, cancel := context.WithTimeout(c.lifetime, job.timeout)
		fail := c.probe(ctx, job.req)
		cancel()

		c.mu.Lock()
		c.probes[ProbeResult{Host: c.names.of(hc.host, fail == nil), Answered: fail == nil}]++
		wake := c.takeWaiters(hc, hc.probed(job, fail, time.Now()))
		c.mu.Unlock()
		for _, w := range wake {
			w()
		}
	}()
}

// probe sends req once and returns nil when the answer is not an outage,
// else the failure.
func (c *Circuits) probe(ctx context.Context, req *http.Request) *failure.Error {
	resp, err := c.send(req.Clone(ctx))
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}
	if c.lifetime.Err() != nil {
		// Shutting down: an answer cut short says nothing; wake nobody.
		return placed(Place{Host: req.URL.Host}, failure.Transient, ReasonRegistryUnavailable, 0, c.lifetime.Err())
	}
	// Judged against the lifetime, not ctx: the probe's own timeout
	// passing is the place not answering (a hang), not a caller who gave up.
	if !isOutage(c.lifetime, resp, err) {
		return nil
	}
	return outageError(req, resp, err)
}

// repositoryProbe is a read of repo's tag list with req's credentials.
func repositoryProbe(req *http.Request, repo string) *http.Request {
	u := url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host, Path: "/v2/" + repo + "/tags/list"}
	return newProbe(req, http.MethodGet, &u)
}

// probeFor returns the read that tells whether place answers again after
// req failed there: req itself when it is a read (GET and HEAD, bodiless),
// the repository's tag list for a failed write, /v2/ for the registry.
func probeFor(req *http.Request, place Place) *http.Request {
	req = addressed(req)
	if place.Repository == "" {
		return registryProbe(req)
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return repositoryProbe(req, place.Repository)
	}
	u := *req.URL
	return newProbe(req, req.Method, &u)
}

// registryProbe is GET /v2/ on req's registry: does it answer at all.
func registryProbe(req *http.Request) *http.Request {
	u := url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host, Path: "/v2/"}
	return newProbe(req, http.MethodGet, &u)
}

// newProbe is a bodiless request with req's credentials and manners.
func newProbe(req *http.Request, method string, u *url.URL) *http.Request {
	probe := (&http.Request{Method: method, URL: u, Header: http.Header{}, Host: u.Host}).WithContext(context.Background())
	for _, h := range []string{"Authorization", "Accept", "User-Agent"} {
		if v := req.Header.Values(h); len(v) > 0 {
			probe.Header[h] = v
		}
	}
	return probe
}
