package registry

import "time"

// The waiters of circuits: who waits on which, indexed by key and counted
// per tenant (CircuitOptions.HostsPerTenant), and when their waits end.

// Waiter is who waits on a circuit: Key identifies it (a later wait with
// the same key replaces the earlier one), Tenant is whose bound
// (CircuitOptions.HostsPerTenant) it counts against; "" is no tenant's,
// and unbounded: the operator's own objects.
type Waiter struct{ Tenant, Key string }

// WaitOutcome says what Wait did.
type WaitOutcome int

const (
	// NotFailing: no circuit covers the place; the caller's own retry is
	// the only one.
	NotFailing WaitOutcome = iota
	// Waiting: wake will be called once, when the circuit closes.
	Waiting
	// TenantLimit: the place fails, but its tenant already waits on
	// CircuitOptions.HostsPerTenant other registries; nothing registered.
	TenantLimit
)

// wait is where a waiter waits, for its index.
type wait struct {
	tenant, host string
	cb           *circuit
}

// Wait arranges for wake to be called once, when the circuit of the place
// (host, repository) — or, failing that, of the registry — closes, and
// says whether it did (see WaitOutcome). Whatever w waited on before is
// forgotten.
func (c *Circuits) Wait(host, repository string, w Waiter, wake func()) WaitOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(w.Key)
	hc := c.hosts[host]
	if hc == nil || (hc.open[repository] == nil && hc.open[""] == nil) {
		return NotFailing
	}
	hosts := c.tenantHosts[w.Tenant]
	if w.Tenant != "" && hosts[host] == 0 && len(hosts) >= c.rules.opts.HostsPerTenant {
		return TenantLimit
	}
	if hosts == nil {
		hosts = map[string]int{}
		c.tenantHosts[w.Tenant] = hosts
	}
	hosts[host]++
	cb := hc.addWaiter(repository, w.Key, wake, time.Now())
	c.waits[w.Key] = wait{tenant: w.Tenant, host: host, cb: cb}
	c.startProber(hc)
	return Waiting
}

// HostsPerTenant is the bound on the registries a tenant waits on.
func (c *Circuits) HostsPerTenant() int { return c.rules.opts.HostsPerTenant }

// unindex drops key's wait from the index and its tenant's count; c.mu
// must be held. The circuit's own waiters are the caller's to change.
func (c *Circuits) unindex(key string) (wait, bool) {
	w, ok := c.waits[key]
	if !ok {
		return wait{}, false
	}
	delete(c.waits, key)
	hosts := c.tenantHosts[w.tenant]
	if hosts[w.host]--; hosts[w.host] <= 0 {
		delete(hosts, w.host)
		if len(hosts) == 0 {
			delete(c.tenantHosts, w.tenant)
		}
	}
	return w, true
}

// Forget drops the callbacks registered under key (the object succeeded by
// other means, or was deleted).
func (c *Circuits) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(key)
}

func (c *Circuits) forgetLocked(key string) {
	if w, ok := c.unindex(key); ok {
		w.cb.removeWaiter(key, time.Now())
	}
}
