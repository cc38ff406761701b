package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestNoisyTenant is scenario 11: healthy namespaces' builders beside a
// namespace whose registry hangs. Healthy: BENCH_TENANTS (default 10)
// namespaces of BENCH_TENANT_N (20) builders each, pushing to a healthy
// registry; noisy: BENCH_NOISY_N (500) builders in one namespace, pushing to
// a registry that accepts connections and never answers. Each run has its
// own controller and registries; in the second, the noisy builders are
// created first, ahead of the healthy ones in the queue.
func TestNoisyTenant(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	tenants, perTenant, noisyN := envInt("BENCH_TENANTS", 10), envInt("BENCH_TENANT_N", 20), envInt("BENCH_NOISY_N", 500)
	runs := envInt("BENCH_RUNS", 3)
	var alone, beside []time.Duration
	okAll := true
	for run := range runs {
		for _, noisy := range []bool{false, true} {
			id := fmt.Sprintf("r%d-%v", run, noisy)
			// A subtest each: its builders, registries and controller are
			// gone before the next run starts.
			t.Run(id, func(t *testing.T) {
				took, ok := noisyTenantRun(t, id, tenants, perTenant, noisyN, noisy)
				okAll = okAll && ok
				if noisy {
					beside = append(beside, took)
				} else {
					alone = append(alone, took)
				}
			})
		}
	}
	ratio := median(beside).Seconds() / median(alone).Seconds()
	s := &section{title: fmt.Sprintf("11. A noisy tenant: %d builders whose registry hangs beside %d namespaces × %d", noisyN, tenants, perTenant),
		what: fmt.Sprintf("Time until the %d healthy builders (%d namespaces, one healthy registry) are all Ready: alone, and created right "+
			"after %d builders of another namespace whose registry accepts connections and never answers (ahead of them in the "+
			"queue). Fresh controller and registries per run, one builder of a third namespace Ready first (the shared images read); "+
			"default flags (%d workers).", tenants*perTenant, tenants, noisyN, 4),
		header: []string{"healthy builders", "all Ready (median [min–max])"},
		rows:   [][]string{{"alone", seconds(alone)}, {"beside the hanging namespace", seconds(beside)}}}
	s.targets = []target{{"healthy namespaces Ready beside the hanging one vs alone", "≤ ×1.2",
		fmt.Sprintf("×%.2f", ratio), okAll && ratio <= 1.2}}
	addSection(s)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// noisyTenantRun creates the healthy tenants' builders (after the noisy
// one's, when noisy) and returns how long until all of them were Ready.
func noisyTenantRun(t *testing.T, id string, tenants, perTenant, noisyN int, noisy bool) (time.Duration, bool) {
	f := registrytest.New(t)
	seed(t, f.Addr)
	p, _ := startController(t)
	defer p.Kill()
	w := newWorld(t, f.Addr)
	w.waitStoreStackReady(t, 30*time.Second)
	// One builder first, so that both runs start with the controller's
	// reads of the store, stack and lifecycle images done (otherwise the
	// noisy builders, which read them too, warm them for the healthy ones).
	warm := w.inNamespace(t, "warm-"+id, f.Addr)
	warm.createBuilders(t, 10000, 10001, w.order())
	if _, ok := warm.waitBuildersReady(t, 1, 30*time.Second); !ok {
		t.Fatal("the warm-up builder is not Ready")
	}

	if noisy {
		h := registrytest.New(t)
		h.Inject("", "", -1, h.Hang)
		w.inNamespace(t, "noisy-"+id, h.Addr).createBuilders(t, 0, noisyN, w.order())
	}
	var healthy []*world
	start := time.Now()
	for k := range tenants {
		tw := w.inNamespace(t, fmt.Sprintf("healthy-%s-%d", id, k), f.Addr)
		tw.createBuilders(t, k*perTenant, (k+1)*perTenant, w.order())
		healthy = append(healthy, tw)
	}
	// Timed, and given 5 min, from before the builders were created.
	if _, err := localhost.Poll(context.Background(), 5*time.Minute-time.Since(start), 100*time.Millisecond, "healthy builders Ready", func() (bool, string) {
		ready := 0
		for _, tw := range healthy {
			n, _, _ := tw.readyCount(t)
			ready += n
		}
		return ready >= tenants*perTenant, fmt.Sprintf("%d/%d Ready", ready, tenants*perTenant)
	}); err != nil {
		t.Logf("%s: healthy builders not all Ready in 5 min: %v", id, err)
		return time.Since(start), false
	}
	return time.Since(start), true
}
