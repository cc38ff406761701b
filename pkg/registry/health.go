package registry

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// HealthOptions tunes the probing of registries that are down.
type HealthOptions struct {
	// ProbeInterval is the wait before the first probe; it doubles after
	// each failed probe up to MaxProbeInterval. Default 100ms.
	ProbeInterval time.Duration
	// MaxProbeInterval caps the wait between probes, and so how long a
	// recovery goes unnoticed. Default 1s: one small GET a second per
	// registry that is down is nothing, and waiters wake within a second.
	MaxProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default 2s.
	ProbeTimeout time.Duration
}

func (o HealthOptions) withDefaults() HealthOptions {
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = 100 * time.Millisecond
	}
	if o.MaxProbeInterval <= 0 {
		o.MaxProbeInterval = time.Second
	}
	if o.MaxProbeInterval < o.ProbeInterval {
		o.MaxProbeInterval = o.ProbeInterval
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 2 * time.Second
	}
	return o
}

// Health tracks which registries are down and wakes those waiting on them.
//
// A host is marked down when connecting to it fails (refused, DNS, network
// unreachable, dial timeout), and up when a request to it succeeds or a
// probe connects. Failures after connecting (5xx, 429, hangs) do not mark it
// down: the host's /v2/ may well answer while the failing request does not,
// and waking everyone on that answer would retry in a loop; those failures
// are left to each object's backoff. Callers whose work failed on a down registry register a
// callback under a key; while anyone waits on a registry, one prober per
// registry sends GET /v2/ with backoff, and when the registry answers every
// callback fires once. So an outage costs O(registries) requests rather than
// O(objects), and recovery is noticed within MaxProbeInterval rather than at
// the end of each object's backoff. Registries nobody waits on cost nothing.
type Health struct {
	opts     HealthOptions
	lifetime context.Context
	probe    func(ctx context.Context, host string) bool

	mu    sync.Mutex
	hosts map[string]*hostHealth
}

type hostHealth struct {
	down    bool
	probing bool
	lastErr error // the failure to connect that marked it down
	// probeFailed is when a probe last failed to connect.
	probeFailed time.Time
	waiters     map[string]func()
}

func newHealth(lifetime context.Context, opts HealthOptions, probe func(context.Context, string) bool) *Health {
	return &Health{opts: opts.withDefaults(), lifetime: lifetime, probe: probe, hosts: map[string]*hostHealth{}}
}

// Healthy reports whether host is believed up (true until a request to it
// fails as unreachable).
func (h *Health) Healthy(host string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	hh := h.hosts[host]
	return hh == nil || !hh.down
}

// NotifyWhenHealthy arranges for wake to be called once host, which is down,
// is up again, and reports whether it did: when host is not down (it
// answered, or recovered since the failure) nothing is registered, and the
// caller's backoff is the only retry. A later call with the same key
// replaces the earlier callback.
func (h *Health) NotifyWhenHealthy(host, key string, wake func()) bool {
	h.mu.Lock()
	hh := h.host(host)
	if !hh.down {
		h.mu.Unlock()
		return false
	}
	hh.waiters[key] = wake
	startProber := !hh.probing
	hh.probing = true
	h.mu.Unlock()
	if startProber {
		go h.runProber(host)
	}
	return true
}

// Forget drops the callbacks registered under key, for instance when the
// object succeeded by other means or was deleted.
func (h *Health) Forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, hh := range h.hosts {
		delete(hh.waiters, key)
	}
}

// Down returns the hosts currently believed down.
func (h *Health) Down() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var down []string
	for host, hh := range h.hosts {
		if hh.down {
			down = append(down, host)
		}
	}
	return down
}

// Waiting returns how many keys wait on host.
func (h *Health) Waiting(host string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hh := h.hosts[host]; hh != nil {
		return len(hh.waiters)
	}
	return 0
}

// host returns host's entry, creating it; h.mu must be held.
func (h *Health) host(host string) *hostHealth {
	hh := h.hosts[host]
	if hh == nil {
		hh = &hostHealth{waiters: map[string]func(){}}
		h.hosts[host] = hh
	}
	return hh
}

func (h *Health) markUnhealthy(host string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hh := h.host(host)
	hh.down, hh.lastErr = true, err
}

// unreachable returns the failure that marked host down while its prober
// watches it (someone waits on its recovery) and its last probe, less than
// MaxProbeInterval ago, failed too; nil otherwise. Requests to such a host
// fail at once with that error instead of dialling: the prober alone talks
// to the host, and wakes the waiters within MaxProbeInterval of it
// answering, so an outage costs the prober's requests whatever the number
// of objects retrying on their backoff. With no waiter there is no prober,
// and with no recent failed probe nothing is known: requests go out as
// usual (and a success wakes the waiters at once).
func (h *Health) unreachable(host string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	hh := h.hosts[host]
	if hh == nil || !hh.down || !hh.probing || time.Since(hh.probeFailed) >= h.opts.MaxProbeInterval {
		return nil
	}
	return hh.lastErr
}

// markHealthy records that host answered, and wakes everyone waiting on it.
func (h *Health) markHealthy(host string) {
	h.mu.Lock()
	hh := h.hosts[host]
	if hh == nil || (!hh.down && len(hh.waiters) == 0) {
		h.mu.Unlock()
		return
	}
	hh.down = false
	waiters := hh.waiters
	hh.waiters = map[string]func(){}
	h.mu.Unlock()
	for _, wake := range waiters {
		wake()
	}
}

// runProber probes host until it answers, nobody waits on it any more, or
// the lifetime ends. At most one runs per host: hostHealth.probing.
func (h *Health) runProber(host string) {
	interval := h.opts.ProbeInterval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-h.lifetime.Done():
			h.stopProbing(host)
			return
		case <-timer.C:
		}
		h.mu.Lock()
		hh := h.hosts[host]
		if !hh.down || len(hh.waiters) == 0 {
			// Up again by another request's success, or nobody cares.
			hh.probing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()

		ctx, cancel := context.WithTimeout(h.lifetime, h.opts.ProbeTimeout)
		up := h.probe(ctx, host)
		cancel()
		if up {
			h.stopProbing(host)
			h.markHealthy(host)
			return
		}
		h.mu.Lock()
		hh.probeFailed = time.Now()
		h.mu.Unlock()
		interval = min(2*interval, h.opts.MaxProbeInterval)
		timer.Reset(interval)
	}
}

func (h *Health) stopProbing(host string) {
	h.mu.Lock()
	h.hosts[host].probing = false
	h.mu.Unlock()
}

// probe asks host's /v2/ endpoint whether it can be reached: any HTTP
// answer counts, since "could not connect" is what marked it down (and the
// host may be a token server, whose /v2/ is a 404). For hosts ggcr talks to
// over plain HTTP (localhost, private addresses) it tries https as well, as
// ggcr does.
func (c *Client) probe(ctx context.Context, host string) bool {
	reg, err := name.NewRegistry(host)
	if err != nil {
		return false
	}
	schemes := []string{reg.Scheme()}
	if schemes[0] == "http" {
		schemes = append(schemes, "https")
	}
	for _, scheme := range schemes {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+host+"/v2/", nil)
		if err != nil {
			return false
		}
		req.Header.Set("User-Agent", c.opts.UserAgent)
		resp, err := c.transport.RoundTrip(req)
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		return true
	}
	return false
}
