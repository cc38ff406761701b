package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// registryFault is a way for the registry to fail in scenario 6.
type registryFault struct {
	name string
	// inject starts the fault; retryAfter is the Retry-After it asks for.
	inject     func(f *registrytest.Registry, answered func())
	retryAfter time.Duration
}

var registryFaults = []registryFault{
	{name: "503", inject: func(f *registrytest.Registry, answered func()) {
		f.Inject("", "/v2/", -1, counted(answered, registrytest.Answer(503, nil, registrytest.OCIError("UNAVAILABLE", "down"))))
	}},
	{name: "hang", inject: func(f *registrytest.Registry, answered func()) { f.Inject("", "", -1, f.Hang) }},
	{name: "503 on the builders' repositories only", inject: func(f *registrytest.Registry, answered func()) {
		f.Inject("", "/v2/builders/", -1, counted(answered, registrytest.Answer(503, nil, registrytest.OCIError("UNAVAILABLE", "down"))))
	}},
	{name: "429, Retry-After: 30", retryAfter: 30 * time.Second, inject: func(f *registrytest.Registry, answered func()) {
		f.Inject("", "/v2/", -1, counted(answered, registrytest.Answer(429, map[string]string{"Retry-After": "30"},
			registrytest.OCIError("TOOMANYREQUESTS", "slow down"))))
	}},
}

func counted(answered func(), act http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		act(w, r)
		answered()
	}
}

type faultResult struct {
	fault    string
	run      int
	n        int
	outage   time.Duration
	requests int // reaching the registry during the fault
	// firstCalls are the requests that were the first to their
	// repository in the fault: what discovers a place is failing, one per
	// place whatever the circuits do.
	firstCalls int
	reported   time.Duration // until every builder created in the fault showed Ready=False with a reason
	recovered  time.Duration // from when the registry may be called again until all Ready
	ready      bool
	maxPushes  int // manifest PUTs of one builder
}

// faultRun: store, stack and one builder Ready; the registry fails; n
// builders are created; after outage the fault ends.
func faultRun(t *testing.T, fault registryFault, n int, outage time.Duration) faultResult {
	f := registrytest.New(t)
	seed(t, f.Addr)
	startController(t)
	w := newWorld(t, f.Addr)
	w.waitStoreStackReady(t, 30*time.Second)
	w.createBuilders(t, n, n+1, w.order())
	if _, ok := w.waitBuildersReady(t, 1, 30*time.Second); !ok {
		t.Fatal("the builder before the fault is not Ready")
	}
	r := faultResult{fault: fault.name, n: n, outage: outage}
	var mu sync.Mutex
	var lastAnswer time.Time
	f.ForgetRequests()
	fault.inject(f, func() { mu.Lock(); lastAnswer = time.Now(); mu.Unlock() })
	start := time.Now()
	w.createBuilders(t, 0, n, w.order())
	r.reported = w.waitAllReporting(t, n, outage-time.Since(start))
	time.Sleep(outage - time.Since(start))
	during := f.Requests()
	r.requests = len(during)
	r.firstCalls = firstCalls(during)
	// BENCH_FAULT_TRACE=DIR keeps the requests of each run's fault there,
	// to see what the circuits let through.
	if dir := os.Getenv("BENCH_FAULT_TRACE"); dir != "" {
		name := strings.NewReplacer(" ", "_", "'", "", ",", "", ":", "").Replace(t.Name())
		_ = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".requests.txt"), []byte(strings.Join(during, "\n")+"\n"), 0o644)
	}
	f.ClearFaults()
	end := time.Now()
	mu.Lock()
	mayCall := end
	if held := lastAnswer.Add(fault.retryAfter); held.After(end) {
		mayCall = held
	}
	mu.Unlock()
	var took time.Duration
	took, r.ready = w.waitBuildersReady(t, n+1, 2*time.Minute)
	r.recovered = end.Add(took).Sub(mayCall)
	for i := range n {
		r.maxPushes = max(r.maxPushes, f.Count("PUT", "/"+builderRepo(i)+"/manifests/latest"))
	}
	return r
}

// firstCalls counts the requests ("METHOD /v2/<repository>/...") that were
// the first to their repository.
func firstCalls(requests []string) int {
	seen := map[string]bool{}
	for _, q := range requests {
		_, path, _ := strings.Cut(q, " /v2/")
		repo, _, ok := strings.Cut(path, "/manifests/")
		if !ok {
			repo, _, ok = strings.Cut(path, "/blobs/")
		}
		if ok && !seen[repo] {
			seen[repo] = true
		}
	}
	return len(seen)
}

// waitAllReporting waits until the first n builders all show Ready=False
// with a reason, and returns how long that took (timeout when they do not).
func (w *world) waitAllReporting(t *testing.T, n int, timeout time.Duration) time.Duration {
	ctx := context.Background()
	took, err := localhost.Poll(ctx, timeout, 250*time.Millisecond, "builders reporting", func() (bool, string) {
		list, err := client.BuildsmithV1alpha1().Builders(w.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		reporting := 0
		for _, b := range list.Items {
			if c := b.Status.GetCondition(v1alpha1.ConditionReady); c != nil && c.Reason != "" && b.Name < fmt.Sprintf("b-%04d", n) {
				reporting++
			}
		}
		return reporting >= n, fmt.Sprintf("%d/%d reporting", reporting, n)
	})
	if err != nil {
		return timeout
	}
	return took
}

// TestFaults is scenario 6: every fault for BENCH_FAULT_OUTAGE (90 s).
func TestFaults(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	faultScenario(t, "6", "", envDuration("BENCH_FAULT_OUTAGE", 90*time.Second), envInt("BENCH_FAULT_RUNS", 3), registryFaults)
}

// TestLongFaults is scenarios 7 and 8: the faults of the whole registry
// (7: 503, hang) and the partial or throttling ones (8: a repository-only
// 503, 429) for BENCH_FAULT_LONG_OUTAGE (e.g. 10m; not run without it:
// 4 faults × 3 runs × 10 min do not fit make bench's hour). Sections of
// their own, so that each can run apart from the others (-run
// TestLongFaults/whole and …/partial as two processes at once, say: each
// starts its own API server, registry and controller) and be kept beside them.
func TestLongFaults(t *testing.T) {
	long := envDuration("BENCH_FAULT_LONG_OUTAGE", 0)
	if !full || long == 0 {
		t.Skip("BENCH=1 BENCH_FAULT_LONG_OUTAGE=10m")
	}
	runs := envInt("BENCH_FAULT_LONG_RUNS", 3)
	t.Run("whole", func(t *testing.T) {
		faultScenario(t, "7", ", long outages of the whole registry", long, runs, registryFaults[:2])
	})
	t.Run("partial", func(t *testing.T) {
		faultScenario(t, "8", ", long partial or throttling outages", long, runs, registryFaults[2:])
	})
}

// faultScenario runs every registry fault runs times for outage, and adds
// the section number.
func faultScenario(t *testing.T, number, kind string, outage time.Duration, runs int, faults []registryFault) {
	n := envInt("BENCH_FAULT_N", 200)
	var rs []faultResult
	for _, fault := range faults {
		for i := range runs {
			t.Run(fmt.Sprintf("%s/%v/run%d", fault.name, outage, i+1), func(t *testing.T) {
				r := faultRun(t, fault, n, outage)
				r.run = i + 1
				rs = append(rs, r)
			})
		}
	}
	s := &section{title: fmt.Sprintf("%s. Faults%s: %d Builders created while the registry fails", number, kind, n),
		what: "Store, stack and one builder Ready first; then the registry (in-process, behind the fault injector) fails in one " +
			"way and the builders are created; the fault ends after the outage. Requests are those reaching the registry during " +
			"the fault; the first to each repository is what finds that repository failing (each new builder pushes to a " +
			"repository of its own, so a fault on those costs one request per builder, whatever the circuits do), the rest " +
			"are the circuits' probes and checks. \"Reporting\": until every new builder shows Ready=False with a reason. Recovery: from when the registry " +
			"may be called again (the fault's end, or the last Retry-After's) until every builder is Ready. Pushes: manifest PUTs " +
			"of the builder pushed most. Controller flags: defaults (backoff up to 5 min).",
		header: []string{"fault", "outage, run", "requests/s during", "of them, first to a repository", "beyond those, /s", "reporting after", "Ready after recovery", "pushes"}}
	okRecovery, okHang, okReport, okLoad, okPushes := true, true, true, true, true
	var recovered, hangRecovered, reported []time.Duration
	for _, r := range rs {
		perSecond := float64(r.requests) / r.outage.Seconds()
		ready := r.recovered.Round(100 * time.Millisecond).String()
		if !r.ready {
			ready = "not Ready in 2 min"
		}
		s.rows = append(s.rows, []string{r.fault, fmt.Sprintf("%v, %d", r.outage, r.run), fmt.Sprintf("%.2f", perSecond),
			fmt.Sprint(r.firstCalls), fmt.Sprintf("%.2f", float64(r.requests-r.firstCalls)/r.outage.Seconds()),
			r.reported.Round(100 * time.Millisecond).String(), ready, fmt.Sprint(r.maxPushes)})
		if r.fault == "hang" {
			hangRecovered = append(hangRecovered, r.recovered)
			okHang = okHang && r.ready && r.recovered <= 15*time.Second
			reported = append(reported, r.reported)
			okReport = okReport && r.reported <= 15*time.Second
		} else {
			recovered = append(recovered, r.recovered)
			okRecovery = okRecovery && r.ready && r.recovered <= 5*time.Second
		}
		okLoad = okLoad && perSecond <= 3
		okPushes = okPushes && r.maxPushes == 1
	}
	if len(recovered) > 0 {
		s.targets = append(s.targets, target{"all Ready after the registry recovers (503, 429 after Retry-After, repository-only 503)", "≤ 5 s", seconds(recovered), okRecovery})
	}
	if len(hangRecovered) > 0 {
		s.targets = append(s.targets,
			target{"all Ready after a hang ends", "≤ 15 s", seconds(hangRecovered), okHang},
			target{"builders created during a hang show Ready=False with a reason", "≤ 15 s", seconds(reported), okReport})
	}
	s.targets = append(s.targets,
		target{"registry requests per second during the fault", "≤ 3/s", rowsCol(s.rows, 2), okLoad},
		target{"pushes of each builder", "exactly 1", rowsCol(s.rows, 7), okPushes})
	addSection(s)
}
