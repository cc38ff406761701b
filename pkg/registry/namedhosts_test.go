package registry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestNamedHostsBounded: the registries counted by name (Stats, and so the
// metrics' host label) are at most NamedHosts, given to hosts as they first
// answer; made-up hosts that never answer, and the registries beyond the
// bound, are counted as OtherHosts — a tenant naming thousands of hosts in
// its tags adds no entries and no series.
func TestNamedHostsBounded(t *testing.T) {
	c := newTestClient(t, Options{NamedHosts: 2})
	ctx := context.Background()
	// Made-up hosts first, refusing every connection. Not a closed port of
	// 127.0.0.1: the registries below listen there and may be given the same
	// port, whose circuit the refusal opened.
	var refusing []string
	for i := range 5 {
		addr := fmt.Sprintf("127.0.0.%d:1", i+2)
		refusing = append(refusing, addr)
		ref, err := name.ParseReference(addr + "/team/app:1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.As(nil).Resolve(ctx, ref); err == nil {
			t.Fatalf("%s answered", addr)
		}
		// Waited on, so its circuit is probed (and its probes counted).
		if c.Circuits().Wait(addr, "team/app", Waiter{Key: "ns/" + addr}, func() {}) != Waiting {
			t.Fatalf("no circuit for %s", addr)
		}
	}
	var answering []string
	for range 3 {
		f := registrytest.New(t)
		f.Push("team/app:1")
		answering = append(answering, f.Addr)
		if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); err != nil {
			t.Fatal(err)
		}
	}
	hosts := map[string]bool{}
	for k := range c.Stats().Requests {
		hosts[k.Host] = true
	}
	want := map[string]bool{answering[0]: true, answering[1]: true, OtherHosts: true}
	if fmt.Sprint(hosts) != fmt.Sprint(want) {
		t.Errorf("hosts counted %v, want the first two that answered and %q", hosts, OtherHosts)
	}
	for _, host := range append(refusing, answering[2]) {
		if got := c.HostLabel(host); got != OtherHosts {
			t.Errorf("HostLabel(%s) = %q, want %q", host, got, OtherHosts)
		}
	}
	if got := c.HostLabel(answering[0]); got != answering[0] {
		t.Errorf("HostLabel(%s) = %q", answering[0], got)
	}
	// The refusing hosts' probes are counted under OtherHosts too.
	deadline := time.Now().Add(5 * time.Second)
	for len(c.Circuits().ProbeResults()) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	results := c.Circuits().ProbeResults()
	if len(results) == 0 {
		t.Fatal("no probe sent to the refusing hosts")
	}
	for k := range results {
		if k.Host != OtherHosts {
			t.Errorf("probes counted under %q, want %q", k.Host, OtherHosts)
		}
	}
}

// TestHostsPerTenantBounded: a tenant waits on at most HostsPerTenant
// failing registries (each costs a prober); beyond, Wait registers nothing
// and says TenantLimit, while other tenants, and more objects of the same
// tenant on registries it already waits on, wait as ever. Forgetting a wait
// frees its place.
func TestHostsPerTenantBounded(t *testing.T) {
	c := newTestClient(t, Options{Circuits: CircuitOptions{HostsPerTenant: 2}})
	var hosts []string
	for i := range 3 {
		host := fmt.Sprintf("127.0.0.%d:1", i+2) // refuses every connection
		hosts = append(hosts, host)
		ref, err := name.ParseReference(host + "/team/app:1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.As(nil).Resolve(context.Background(), ref); err == nil {
			t.Fatalf("%s answered", host)
		}
	}
	wait := func(host, tenant, key string) WaitOutcome {
		return c.Circuits().Wait(host, "team/app", Waiter{Tenant: tenant, Key: key}, func() {})
	}
	for _, w := range []struct {
		host, tenant, key string
		want              WaitOutcome
	}{
		{hosts[0], "a", "a/1", Waiting},
		{hosts[1], "a", "a/2", Waiting},
		{hosts[2], "a", "a/3", TenantLimit},
		{hosts[0], "a", "a/4", Waiting}, // a registry a already waits on
		{hosts[2], "b", "b/1", Waiting}, // another tenant
	} {
		if got := wait(w.host, w.tenant, w.key); got != w.want {
			t.Errorf("%s waiting on %s: %v, want %v", w.key, w.host, got, w.want)
		}
	}
	c.Circuits().Forget("a/2")
	if got := wait(hosts[2], "a", "a/3"); got != Waiting {
		t.Errorf("after a/2 forgotten, a/3 waiting on %s: %v, want %v", hosts[2], got, Waiting)
	}
	// a/1 moves to another failing registry: its old one no longer counts
	// once a/4 is gone too.
	c.Circuits().Forget("a/4")
	if got := wait(hosts[1], "a", "a/1"); got != Waiting {
		t.Errorf("a/1 moving to %s: %v, want %v", hosts[1], got, Waiting)
	}
	if got := wait(hosts[0], "a", "a/5"); got != TenantLimit {
		t.Errorf("a/5 waiting on %s (a waits on 2 others): %v, want %v", hosts[0], got, TenantLimit)
	}
}

// TestTenantWaitsEnd: a tenant's waits stop counting against its bound
// when their circuit closes (the waiters woken), and when nobody renews
// them for WaitExpiry (an object deleted, or handed to another replica,
// while it waited); and a registry that answered again is forgotten once
// its closure has expired. In a synctest bubble: the probes, the expiry and
// the forgetting are the circuits' timers, not the test's waits.
func TestTenantWaitsEnd(t *testing.T) {
	inBubble(t, func(t *testing.T, network *registrytest.Network) {
		first, second, third := registrytest.NewOn(t, network), registrytest.NewOn(t, network), registrytest.NewOn(t, network)
		opts := CircuitOptions{HostsPerTenant: 1, WaitExpiry: 2 * time.Second}
		c := newBubbleClient(t, network, Options{Circuits: opts})
		ctx := context.Background()
		fail := func(f *registrytest.Registry) {
			t.Helper()
			f.Down()
			if _, err := c.As(nil).Resolve(ctx, f.Ref("team/app:1")); err == nil {
				t.Fatalf("%s answered while down", f.Addr)
			}
		}
		for _, f := range []*registrytest.Registry{first, second, third} {
			fail(f)
		}
		woken := make(chan struct{}, 1)
		if got := c.Circuits().Wait(first.Addr, "team/app", Waiter{Tenant: "a", Key: "a/1"}, func() { woken <- struct{}{} }); got != Waiting {
			t.Fatalf("a/1 on %s: %v", first.Addr, got)
		}
		if got := c.Circuits().Wait(second.Addr, "team/app", Waiter{Tenant: "a", Key: "a/2"}, func() {}); got != TenantLimit {
			t.Fatalf("a/2 on %s with a/1 waiting: %v, want %v", second.Addr, got, TenantLimit)
		}
		checkWaitIndex(t, c.Circuits())

		first.Up()
		advance(2 * time.Second) // its probe, every second at most, finds it answering
		select {
		case <-woken:
		default:
			t.Fatal("a/1 not woken when its registry answered")
		}
		fail(second) // its circuit open still, or again (nobody waited on it)
		if got := c.Circuits().Wait(second.Addr, "team/app", Waiter{Tenant: "a", Key: "a/2"}, func() {}); got != Waiting {
			t.Errorf("a/2 on %s after a/1's circuit closed: %v, want %v", second.Addr, got, Waiting)
		}
		checkWaitIndex(t, c.Circuits())

		// a/2 is never renewed: after WaitExpiry it no longer counts, and
		// another object of the tenant may wait elsewhere; before, it does.
		if !c.Circuits().remembers(first.Addr) {
			t.Errorf("%s forgotten right after it answered", first.Addr)
		}
		advance(opts.WaitExpiry / 2)
		fail(third)
		if got := c.Circuits().Wait(third.Addr, "team/app", Waiter{Tenant: "a", Key: "a/3"}, func() {}); got != TenantLimit {
			t.Errorf("a/3 on %s while a/2 waits: %v, want %v", third.Addr, got, TenantLimit)
		}
		advance(opts.WaitExpiry/2 + 2*time.Second)
		fail(third) // its circuit open still, or again
		if got := c.Circuits().Wait(third.Addr, "team/app", Waiter{Tenant: "a", Key: "a/3"}, func() {}); got != Waiting {
			t.Errorf("a/3 on %s: %v; a/2's wait, never renewed for %v, still counts", third.Addr, got, opts.WaitExpiry+2*time.Second)
		}
		checkWaitIndex(t, c.Circuits())

		// The registry that answered is forgotten once its closure expired
		// (a probe interval, and the flap window).
		advance(flapWindow + 2*time.Second)
		if c.Circuits().remembers(first.Addr) {
			t.Errorf("%s still remembered %v after it answered", first.Addr, flapWindow+2*time.Second)
		}
	})
}

// checkWaitIndex: the index of waits, the tenants' counts and the open
// circuits' waiters agree.
func checkWaitIndex(t *testing.T, c *Circuits) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	counted := 0
	for _, hosts := range c.tenantHosts {
		for _, n := range hosts {
			counted += n
		}
	}
	waiting := 0
	for _, hc := range c.hosts {
		for _, cb := range hc.open {
			waiting += len(cb.waiters)
		}
	}
	if counted != len(c.waits) || waiting != len(c.waits) {
		t.Errorf("%d waits indexed, %d counted for tenants, %d waiting on open circuits", len(c.waits), counted, waiting)
	}
}

// remembers reports whether c keeps anything of host.
func (c *Circuits) remembers(host string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hosts[host] != nil
}

// TestClusterWaitersUnbounded: waiters of no tenant (the cluster kinds)
// wait on any number of failing registries.
func TestClusterWaitersUnbounded(t *testing.T) {
	c := newTestClient(t, Options{Circuits: CircuitOptions{HostsPerTenant: 1}})
	for i := range 3 {
		host := fmt.Sprintf("127.0.0.%d:1", i+2) // refuses every connection
		ref, err := name.ParseReference(host + "/team/app:1")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.As(nil).Resolve(context.Background(), ref); err == nil {
			t.Fatalf("%s answered", host)
		}
		if got := c.Circuits().Wait(host, "team/app", Waiter{Key: fmt.Sprintf("store-%d", i)}, func() {}); got != Waiting {
			t.Errorf("cluster object %d on %s: %v, want %v", i, host, got, Waiting)
		}
	}
	checkWaitIndex(t, c.Circuits())
}

// TestMetricHostsListed: with the registries to name listed by the
// operator, only those are counted under their own name, whichever answer
// first; every other registry is OtherHosts.
func TestMetricHostsListed(t *testing.T) {
	var registries []*registrytest.Registry
	for range 3 {
		f := registrytest.New(t)
		f.Push("team/app:1")
		registries = append(registries, f)
	}
	listed := registries[2].Addr
	c := newTestClient(t, Options{MetricHosts: []string{listed}})
	for _, f := range registries {
		if _, err := c.As(nil).Resolve(context.Background(), f.Ref("team/app:1")); err != nil {
			t.Fatal(err)
		}
	}
	hosts := map[string]bool{}
	for k := range c.Stats().Requests {
		hosts[k.Host] = true
	}
	if want := map[string]bool{listed: true, OtherHosts: true}; fmt.Sprint(hosts) != fmt.Sprint(want) {
		t.Errorf("hosts counted %v, want the listed one and %q", hosts, OtherHosts)
	}
	if got := c.HostLabel(registries[0].Addr); got != OtherHosts {
		t.Errorf("the first registry to answer, not listed, is counted as %q", got)
	}
}
