package registry

import (
	"context"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestDownRegistryIsNotAskedWhileProbed: once a registry is known down,
// someone waits on it and its prober failed to reach it within the last
// MaxProbeInterval, further operations on it fail at once as
// RegistryUnavailable without a request (the prober alone dials it); when
// it answers again, the waiters are woken and operations go through.
func TestDownRegistryIsNotAskedWhileProbed(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	c := newTestClient(t, Options{})
	ctx := context.Background()

	f.Down()
	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); Reason(err) != ReasonRegistryUnavailable {
		t.Fatalf("Resolve on a down registry: %v", err)
	}
	// Nobody waits yet: no prober, so requests still go out.
	before := c.Stats()
	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); Reason(err) != ReasonRegistryUnavailable {
		t.Fatalf("second Resolve: %v", err)
	}
	if c.Stats().Sub(before).Total() == 0 {
		t.Error("with nobody waiting on the registry, a Resolve did not try it")
	}

	woken := make(chan struct{})
	if !c.Health().NotifyWhenHealthy(f.Addr, "ns/a", func() { close(woken) }) {
		t.Fatal("NotifyWhenHealthy did not register")
	}
	// Let the prober fail once (its first probe is after 100ms).
	time.Sleep(300 * time.Millisecond)
	before = c.Stats()
	for range 50 {
		_, err := c.Resolve(ctx, f.Ref("team/app:1"), nil)
		if Reason(err) != ReasonRegistryUnavailable || Host(err) != f.Addr {
			t.Fatalf("Resolve while probed: reason %q host %q: %v", Reason(err), Host(err), err)
		}
	}
	if _, err := c.ReadImage(ctx, f.Ref("team/app:1"), nil, nil); Reason(err) != ReasonRegistryUnavailable {
		t.Fatalf("ReadImage while probed: %v", err)
	}
	// Only the prober's requests (a few a second at most).
	if n := c.Stats().Sub(before).Total(); n > 4 {
		t.Errorf("%d requests for 51 operations on a probed down registry, want only the prober's", n)
	}

	f.Up()
	select {
	case <-woken:
	case <-time.After(3 * time.Second):
		t.Fatal("not woken within 3s of the registry answering")
	}
	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); err != nil {
		t.Fatalf("Resolve after recovery: %v", err)
	}
}
