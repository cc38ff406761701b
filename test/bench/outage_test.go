package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/registrytest"
)

type outageResult struct {
	n               int
	outage          time.Duration
	duringOutage    int64 // requests the controller made (its own count: refused connections included)
	refused         int64 // of which no answer came
	recovered       time.Duration
	ready           bool
	afterRecovery   cost // registry side, from Up to all Ready
	peakRSS         int64
	controllerTotal int64
}

// outageRun: store and stack Ready; the registry goes down; n builders are
// created; after outage it comes back: time until all are Ready.
func outageRun(t *testing.T, n int, outage time.Duration) outageResult {
	f := registrytest.New(t)
	seed(t, f.Addr)
	p, _ := startController(t)
	w := newWorld(t, f.Addr)
	w.waitStoreStackReady(t, 30*time.Second)
	// Builders need the lifecycle, which a first builder resolves: let one
	// builder exist before the outage, as in a running installation.
	w.createBuilders(t, n, n+1, w.order())
	if _, ok := w.waitBuildersReady(t, 1, 30*time.Second); !ok {
		t.Fatal("the builder before the outage is not Ready")
	}
	r := outageResult{n: n, outage: outage}
	before, err := registryRequests(p, f.Addr)
	if err != nil {
		t.Fatal(err)
	}
	f.Down()
	down := time.Now()
	w.createBuilders(t, 0, n, w.order())
	time.Sleep(outage - time.Since(down))
	after, err := registryRequests(p, f.Addr)
	if err != nil {
		t.Fatal(err)
	}
	r.duringOutage = sumValues(after) - sumValues(before)
	r.refused = after["error"] - before["error"]
	f.Traffic().Reset()
	f.Up()
	r.recovered, r.ready = w.waitBuildersReady(t, n+1, 60*time.Second)
	r.afterRecovery = w.cost(f.Traffic().Requests())
	r.peakRSS = p.PeakRSS()
	return r
}

// TestOutage is scenario 3.
func TestOutage(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	ns := envInts("BENCH_OUTAGE_N", []int{200})
	outage := envDuration("BENCH_OUTAGE", 2*time.Minute)
	runs := envInt("BENCH_OUTAGE_RUNS", 3)
	var rs []outageResult
	for _, n := range ns {
		for i := range runs {
			t.Run(fmt.Sprintf("N=%d/run%d", n, i+1), func(t *testing.T) { rs = append(rs, outageRun(t, n, outage)) })
		}
	}
	s := &section{title: fmt.Sprintf("3. Outage: %v Builders created while the registry is down for %s", ns, outage),
		what: "Store, stack and one builder Ready first; then the registry stops listening (connections refused), the builders " +
			"are created, and after the outage it listens again. Requests during the outage are the controller's own count " +
			"(its Prometheus metric buildsmith_registry_requests_total: a refused connection never reaches the registry); " +
			"recovery is from the moment the registry listens again until every builder is Ready.",
		header: []string{"N, run", "requests during outage", "of which refused", "per builder", "Ready after recovery", "requests to recover", "peak RSS"}}
	okTime, okReqs := true, true
	var recovered []time.Duration
	for i, r := range rs {
		recovered = append(recovered, r.recovered)
		s.rows = append(s.rows, []string{fmt.Sprintf("%d, %d", r.n, i%runs+1), fmt.Sprint(r.duringOutage), fmt.Sprint(r.refused),
			fmt.Sprintf("%.2f", float64(r.duringOutage)/float64(r.n)), r.recovered.Round(10 * time.Millisecond).String(),
			fmt.Sprintf("%d (%s)", r.afterRecovery.requests, kinds(r.afterRecovery.byKind)), mib(r.peakRSS)})
		okTime = okTime && r.ready && r.recovered <= 5*time.Second
		okReqs = okReqs && r.duringOutage <= proberBudget(outage)
	}
	s.targets = []target{
		{"all Ready after recovery", "≤ 5 s in every run", seconds(recovered), okTime},
		{"requests during the outage", fmt.Sprintf("O(registries), independent of N: within one prober's budget, ≤ %d", proberBudget(outage)),
			rowsCol(s.rows, 1), okReqs},
	}
	addSection(s)
}

// proberBudget is what one registry's health prober may cost in an outage:
// a probe a second (after 100, 200, 400, 800 ms), each dialling http and
// https for a loopback registry, plus the first failures. None of it
// depends on the number of objects.
func proberBudget(outage time.Duration) int64 {
	return 2*int64(outage/time.Second+4) + firstFailures
}

// firstFailures is the slack for the operations that fail before the
// prober's first failed probe (100 ms after the first failure): a few per
// controller worker, each dialling http and https.
const firstFailures = 40
