package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// coldResult is one run of scenario 1 (and 2 after it).
type coldResult struct {
	n       int
	took    time.Duration // first create → all Ready
	cost    cost
	peakRSS int64
	ready   bool

	steadyTook     time.Duration // annotate → last request
	steady         cost
	steadyComplete bool // every builder's tag was asked about
}

// coldRun: a fresh registry, controller and world; store, stack and n
// builders created at once; until all are Ready. Then, with steady, a
// resync of every builder the way a user forces one.
func coldRun(t *testing.T, n int, steady bool) coldResult {
	f := registrytest.New(t)
	seed(t, f.Addr)
	f.Traffic().Reset()
	p, profiling := startController(t)
	r := coldResult{n: n}
	start := time.Now()
	w := newWorld(t, f.Addr)
	if dir := os.Getenv("BENCH_PROFILE"); dir != "" {
		// A CPU profile of the controller while it builds the builders.
		go saveProfile(t, profiling, filepath.Join(dir, fmt.Sprintf("cold-%d.pprof", n)), 5*time.Second)
	}
	w.createBuilders(t, 0, n, w.order())
	r.took, r.ready = w.waitBuildersReady(t, n, max(60*time.Second, time.Duration(n)*300*time.Millisecond))
	r.took = time.Since(start)
	// Let requeues and late status writes settle, then count.
	time.Sleep(time.Second)
	r.cost = w.cost(f.Traffic().Requests())
	r.peakRSS = p.PeakRSS()
	if !steady || !r.ready {
		return r
	}

	// Steady state: every builder reconciled again with nothing changed.
	// An annotation change is what a user does to ask for a reconcile now
	// (the controller reconciles on label and annotation changes), the
	// way `flux reconcile` does; the periodic --resync-interval does the
	// same work spread over time.
	f.Traffic().Reset()
	stamp := time.Now().Format(time.RFC3339Nano)
	begin := time.Now()
	out, err := env.Kubectl("annotate", "builders", "--all", "-n", w.ns, "--overwrite", "bench.buildsmith.dev/resync="+stamp).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl annotate: %v\n%s", err, out)
	}
	// Done when every builder's tag was asked about and the registry has
	// been quiet for 2 s (or after a minute).
	if took, ok := waitAsked(f, begin, time.Minute, 200*time.Millisecond, n, builderRepoAsked); ok {
		r.steadyComplete, r.steadyTook = true, took
	}
	r.steady = w.cost(f.Traffic().Requests())
	return r
}

// TestColdScaleSmoke is the small version of scenario 1 that `make test`
// runs: 5 builders over one store and stack, in two steps (1, then 4 more)
// so that the reads of the shared images can be seen not to grow with the
// number of builders.
func TestColdScaleSmoke(t *testing.T) {
	if full {
		t.Skip("BENCH=1 runs the full scenarios")
	}
	f := registrytest.New(t)
	seed(t, f.Addr)
	f.Traffic().Reset()
	startController(t)
	w := newWorld(t, f.Addr)
	w.createBuilders(t, 0, 1, w.order())
	if _, ok := w.waitBuildersReady(t, 1, 45*time.Second); !ok {
		t.Fatal("the first builder is not Ready")
	}
	first := w.cost(f.Traffic().Requests())
	mark := len(f.Traffic().Requests())
	w.createBuilders(t, 1, 5, w.order())
	if _, ok := w.waitBuildersReady(t, 5, 30*time.Second); !ok {
		t.Fatal("not all 5 builders are Ready")
	}
	time.Sleep(500 * time.Millisecond)
	all := f.Traffic().Requests()
	more := w.cost(all[mark:])
	total := w.cost(all)
	t.Logf("first builder (with store and stack): %d requests (%s), %d shared reads; 4 more builders: %d requests (%s), %d shared reads",
		first.requests, kinds(first.byKind), first.sharedReads, more.requests, kinds(more.byKind), more.sharedReads)

	if total.manifestPuts != 5 {
		t.Errorf("%d manifest PUTs for 5 builders, want one each", total.manifestPuts)
	}
	if total.duplicateBlob != 0 {
		t.Errorf("%d blobs uploaded more than once", total.duplicateBlob)
	}
	// The store, stack and lifecycle images are read for the first
	// builder (by the store and stack reconcilers, and once by the
	// builders' shared caches); further builders read them no more.
	if more.sharedReads > 0 {
		var shared []string
		for _, q := range all[mark:] {
			if w.sharedRepos[q.Repo] && (q.Method == http.MethodGet || q.Method == http.MethodHead) {
				shared = append(shared, q.String())
			}
		}
		t.Errorf("4 more builders read the store, stack or lifecycle images %d times: %s", more.sharedReads, strings.Join(shared, "; "))
	}
}

// TestColdScale is scenarios 1 and 2.
func TestColdScale(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	ns := envInts("BENCH_N", []int{50, 200})
	runs := envInt("BENCH_RUNS", 3)
	var results [][]coldResult
	for _, n := range ns {
		var rs []coldResult
		for i := range runs {
			t.Run(fmt.Sprintf("N=%d/run%d", n, i+1), func(t *testing.T) {
				rs = append(rs, coldRun(t, n, true))
			})
		}
		results = append(results, rs)
	}

	cold := &section{title: "1. Cold scale: 1 ClusterStore (10 buildpackages), 1 ClusterStack, N Builders",
		what: fmt.Sprintf("A fresh controller (default flags, --disable-ha) and registry (ggcr in-memory, counted at the registry) per run; "+
			"the store, the stack and N builders (distinct tags, all 10 buildpacks in one group) created at once; time from the first "+
			"create until all N are Ready. Counts are from the first run of each N (they are deterministic up to retries); "+
			"%d runs per N.", runs),
		header: []string{"N", "all Ready", "requests", "requests/builder", "store+stack+lifecycle reads", "manifest PUTs", "blob uploads", "re-uploads to the same repo", "same blob uploaded by concurrent builders", "bytes up", "bytes up/builder", "bytes down", "peak RSS (median)"}}
	steady := &section{title: "2. Steady state: a resync of every builder after (1)",
		what: "`kubectl annotate builders --all bench.buildsmith.dev/resync=<now>` (the controller reconciles on annotation changes; " +
			"the periodic --resync-interval does the same work spread over time); counted until every builder's tag was asked " +
			"about and the registry was quiet for 2 s.",
		header: []string{"N", "requests", "requests/builder", "by kind", "bytes up", "bytes down", "last request after"}}
	var readsAt []int
	allReady, putsOK, dupOK, steadyOK, bytesUpOK := true, true, true, true, true
	for _, rs := range results {
		if len(rs) == 0 {
			continue
		}
		c := rs[0].cost
		n := rs[0].n
		var took, steadyTook []time.Duration
		var rss []int64
		ready := 0
		for _, r := range rs {
			took = append(took, r.took)
			rss = append(rss, r.peakRSS)
			if r.ready {
				ready++
			}
			if r.steadyComplete {
				steadyTook = append(steadyTook, r.steadyTook)
			}
			allReady = allReady && r.ready
			putsOK = putsOK && r.cost.manifestPuts == n
			dupOK = dupOK && r.cost.duplicateBlob == 0
		}
		readsAt = append(readsAt, c.sharedReads)
		cold.rows = append(cold.rows, []string{fmt.Sprint(n), fmt.Sprintf("%d/%d runs, %s", ready, len(rs), seconds(took)),
			fmt.Sprint(c.requests), fmt.Sprintf("%.1f", float64(c.requests)/float64(n)), fmt.Sprint(c.sharedReads),
			fmt.Sprint(c.manifestPuts), fmt.Sprint(c.blobUploads), fmt.Sprint(c.duplicateBlob), fmt.Sprint(c.sharedBlob),
			mib(c.bytesIn), mib(c.bytesIn / int64(n)), mib(c.bytesOut), mib(medianInt(rss))})
		s := rs[0].steady
		steady.rows = append(steady.rows, []string{fmt.Sprint(n), fmt.Sprint(s.requests), fmt.Sprintf("%.2f", float64(s.requests)/float64(n)),
			kinds(s.byKind), mib(s.bytesIn), mib(s.bytesOut), seconds(steadyTook)})
		steadyOK = steadyOK && rs[0].steadyComplete && s.requests <= n
		bytesUpOK = bytesUpOK && s.bytesIn == 0
		cold.notes = append(cold.notes, fmt.Sprintf("N=%d requests by kind: %s", n, kinds(c.byKind)))
	}
	if len(results) >= 2 && len(results[0]) > 0 && len(results[len(results)-1]) > 0 {
		a, b := results[0][0], results[len(results)-1][0]
		grow := float64(b.n) / float64(a.n)
		cold.notes = append(cold.notes, fmt.Sprintf("N ×%.0f (%d → %d): requests ×%.2f, manifest PUTs ×%.2f, bytes up ×%.2f, shared-image reads ×%.2f, peak RSS ×%.2f",
			grow, a.n, b.n, ratio(b.cost.requests, a.cost.requests), ratio(b.cost.manifestPuts, a.cost.manifestPuts),
			ratio64(b.cost.bytesIn, a.cost.bytesIn), ratio(b.cost.sharedReads, a.cost.sharedReads), ratio64(b.peakRSS, a.peakRSS)))
	}
	readsO1 := len(readsAt) > 0 && readsAt[len(readsAt)-1] <= readsAt[0]+2
	cold.targets = []target{
		{"every builder Ready", "all runs", fmt.Sprint(allReady), allReady},
		{"manifest writes", "1 PUT per builder", fmt.Sprint(putsOK), putsOK},
		{"no blob uploaded twice (to a repository)", "0 re-uploads", fmt.Sprint(dupOK), dupOK},
		{"store/stack/lifecycle reads", "O(1): same at every N", fmt.Sprint(readsAt), readsO1},
	}
	steady.targets = []target{
		{"requests per builder", "≤ 1", rowsCol(steady.rows, 2), steadyOK},
		{"bytes up", "0", rowsCol(steady.rows, 4), bytesUpOK},
	}
	addSection(cold)
	addSection(steady)
}

func medianInt(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]int64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ratio64(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func rowsCol(rows [][]string, col int) string {
	var out []string
	for _, r := range rows {
		out = append(out, r[col])
	}
	return strings.Join(out, ", ")
}

// saveProfile writes a CPU profile of the controller (--profiling-port) of
// the next d to path.
func saveProfile(t testing.TB, port int, path string, d time.Duration) {
	var resp *http.Response
	// The controller opens the port once it has started.
	if _, err := localhost.Poll(context.Background(), 5*time.Second, 50*time.Millisecond, "the profiling port", func() (bool, string) {
		var err error
		if resp, err = http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", port, int(d.Seconds()))); err != nil {
			return false, err.Error()
		}
		return true, ""
	}); err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	out, err := os.Create(path)
	if err != nil {
		t.Logf("profile: %v", err)
		return
	}
	defer out.Close()
	_, _ = io.Copy(out, resp.Body)
}
