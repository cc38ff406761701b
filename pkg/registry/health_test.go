package registry

import (
	"context"
	"fmt"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"sync"
	"testing"
	"time"
)

// TestHealthWakesWaitersOnRecovery: while a registry refuses connections,
// 100 waiting keys cost one prober's requests; when it comes back, every key
// is woken once, within a second.
func TestHealthWakesWaitersOnRecovery(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	c := newTestClient(t, Options{})
	ctx := context.Background()

	f.Down()
	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); Reason(err) != ReasonRegistryUnavailable {
		t.Fatalf("Resolve on a down registry: %v", err)
	}
	before := c.Stats()

	const keys = 100
	var (
		mu    sync.Mutex
		woken = map[string]int{}
		all   = make(chan time.Time, 1)
	)
	for i := range keys {
		key := fmt.Sprintf("ns/builder-%d", i)
		c.Health().NotifyWhenHealthy(f.Addr, key, func() {
			mu.Lock()
			defer mu.Unlock()
			woken[key]++
			if len(woken) == keys {
				select { // never block: a duplicate wake-up must fail, not hang
				case all <- time.Now():
				default:
				}
			}
		})
	}
	if n := c.Health().Waiting(f.Addr); n != keys {
		t.Fatalf("%d keys waiting, want %d", n, keys)
	}

	const outage = 2 * time.Second
	time.Sleep(outage)
	probes := c.Stats().Sub(before)
	// One prober: probes after 100, 200, 400, 800ms, then every 1s, each
	// dialling http and https: at most 2×4 requests in 2s. A prober per key
	// would have made hundreds.
	if n := probes.Total(); n < 2 || n > 8 {
		t.Errorf("%d probe requests during a %v outage with %d waiters, want 2..8: %v", n, outage, keys, probes.Requests)
	}
	if n := probes.Total("GET"); n != probes.Total() {
		t.Errorf("probes are not all GETs: %v", probes.Requests)
	}
	mu.Lock()
	if len(woken) != 0 {
		t.Errorf("%d keys woken while the registry is down", len(woken))
	}
	mu.Unlock()

	f.Up()
	recovered := time.Now()
	select {
	case at := <-all:
		if d := at.Sub(recovered); d > time.Second {
			t.Errorf("all keys woken %v after recovery, want ≤ 1s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("keys not woken 5s after recovery: %d of %d", len(woken), keys)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	for key, n := range woken {
		if n != 1 {
			t.Errorf("%s woken %d times", key, n)
		}
	}
	mu.Unlock()
	if !c.Health().Healthy(f.Addr) || c.Health().Waiting(f.Addr) != 0 {
		t.Errorf("after recovery: healthy %v, %d waiting", c.Health().Healthy(f.Addr), c.Health().Waiting(f.Addr))
	}
}

// TestHealthIdleCostsNothing: a down registry nobody waits on is not probed,
// and probing stops when the last waiter is forgotten.
func TestHealthIdleCostsNothing(t *testing.T) {
	f := registrytest.New(t)
	c := newTestClient(t, Options{})
	f.Down()
	_, _ = c.Resolve(context.Background(), f.Ref("team/app:1"), nil)

	before := c.Stats()
	time.Sleep(500 * time.Millisecond)
	if n := c.Stats().Sub(before).Total(); n != 0 {
		t.Errorf("%d requests to a down registry nobody waits on", n)
	}

	c.Health().NotifyWhenHealthy(f.Addr, "ns/a", func() { t.Error("woken while down") })
	time.Sleep(300 * time.Millisecond)
	c.Health().Forget("ns/a")
	time.Sleep(1200 * time.Millisecond) // let a sleeping prober notice
	before = c.Stats()
	time.Sleep(1200 * time.Millisecond)
	if n := c.Stats().Sub(before).Total(); n != 0 {
		t.Errorf("%d probe requests after the last waiter was forgotten", n)
	}
}

// TestHealthSuccessWakesWaiters: a successful request by anyone marks the
// registry up and wakes those waiting on it, without waiting for a probe;
// and nothing is registered for a registry that is up.
func TestHealthSuccessWakesWaiters(t *testing.T) {
	f := registrytest.New(t)
	f.Push("team/app:1")
	c := newTestClient(t, Options{Health: HealthOptions{ProbeInterval: time.Hour}})
	ctx := context.Background()

	f.Down()
	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); Reason(err) != ReasonRegistryUnavailable {
		t.Fatalf("Resolve: %v", err)
	}
	woken := make(chan struct{})
	if !c.Health().NotifyWhenHealthy(f.Addr, "ns/a", func() { close(woken) }) {
		t.Fatal("a waiter on a down registry was not registered")
	}
	f.Up()
	if _, err := c.Resolve(ctx, f.Ref("team/app:1"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(time.Second):
		t.Fatal("a successful request did not wake the waiter")
	}
	if c.Health().NotifyWhenHealthy(f.Addr, "ns/b", func() { t.Error("woken on a healthy registry") }) {
		t.Error("a waiter on a healthy registry was registered")
	}
}

// TestAnswersDoNotMarkDown: a registry that answers — 429 (busy), 503 (its
// /v2/ may answer while the failing request does not) — is not marked down;
// those errors are left to the backoff, and the health probe never wakes
// anyone into the same failure.
func TestAnswersDoNotMarkDown(t *testing.T) {
	for _, code := range []int{429, 500, 503} {
		f := registrytest.New(t)
		f.Push("team/app:1")
		f.Inject("", "/manifests/", -1, registrytest.Answer(code, map[string]string{"Retry-After": "5"}, ""))
		c := newTestClient(t, Options{MaxRetryAfterWait: -1}) // fail at once: this is about health
		_, err := c.Resolve(context.Background(), f.Ref("team/app:1"), nil)
		if Classify(err) != Transient {
			t.Fatalf("%d: %v", code, err)
		}
		if !c.Health().Healthy(f.Addr) {
			t.Errorf("a registry answering %d was marked down", code)
		}
	}
}
