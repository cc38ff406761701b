package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

// sharedClusterResult is one N of scenario 12.
type sharedClusterResult struct {
	n, namespaces int
	created       time.Duration // creating the builders (the API server's share)
	took          time.Duration // first create → all Ready
	ready         bool
	cold          cost
	peakRSS       int64

	steadyTook time.Duration
	steady     cost
	steadyDone bool

	patchTook time.Duration // stack patched → every builder pushed again and Ready
	patch     cost
	patchDone bool
	peakAfter int64
}

// TestSharedCluster is scenario 12: N builders spread over namespaces, as
// in a cluster shared by teams, cold, then resynced, then rebuilt after a
// stack patch. BENCH_SHARED_N (default 200,1000,10000) builders over
// BENCH_SHARED_NAMESPACES (100) namespaces (fewer when N is small: at
// least 2 builders each).
func TestSharedCluster(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	var results []sharedClusterResult
	for _, n := range envInts("BENCH_SHARED_N", []int{200, 1000, 10000}) {
		namespaces := min(envInt("BENCH_SHARED_NAMESPACES", 100), max(n/2, 1))
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			results = append(results, sharedClusterRun(t, n, namespaces))
		})
	}
	s := &section{title: "12. A shared cluster: N Builders over 100 namespaces, 1 store, 1 stack — cold, resync, stack patch",
		what: "A fresh controller (default flags: 4 workers, --disable-ha) and registry (ggcr in-memory, counted at the registry) per N; " +
			"the store and stack Ready first, then N builders created 8 at a time, namespace after namespace (100 namespaces, or N/2 " +
			"when fewer). Cold: from the first create until all N are Ready. Resync: every builder annotated (`kubectl annotate " +
			"builders -A --all`), counted until each builder's tag was asked about and the registry was quiet for 2 s. Stack patch: " +
			"new build and run images pushed to the stack's tags and the ClusterStack annotated; until every builder was pushed " +
			"again (a new latestImage) and Ready. One run per N.",
		header: []string{"N", "namespaces", "cold: all Ready (creating took)", "requests/builder", "bytes up/builder",
			"resync: requests/builder", "bytes up", "took", "patch: all rebuilt", "requests/rebuilt builder", "bytes up/builder",
			"peak RSS"}}
	coldOK, steadyOK, upOK, rssOK := true, true, true, true
	for _, r := range results {
		perBuilder := func(c cost) string { return fmt.Sprintf("%.1f", float64(c.requests)/float64(r.n)) }
		status := func(ok bool, d time.Duration) string {
			if !ok {
				return fmt.Sprintf("not all in %s", d.Round(time.Second))
			}
			return d.Round(100 * time.Millisecond).String()
		}
		s.rows = append(s.rows, []string{fmt.Sprint(r.n), fmt.Sprint(r.namespaces),
			fmt.Sprintf("%s (%s)", status(r.ready, r.took), r.created.Round(100*time.Millisecond)),
			perBuilder(r.cold), mib(r.cold.bytesIn / int64(r.n)),
			fmt.Sprintf("%.2f", float64(r.steady.requests)/float64(r.n)), mib(r.steady.bytesIn), status(r.steadyDone, r.steadyTook),
			status(r.patchDone, r.patchTook), perBuilder(r.patch), mib(r.patch.bytesIn / int64(r.n)),
			fmt.Sprintf("%s (%s after the patch)", mib(r.peakRSS), mib(r.peakAfter))})
		s.notes = append(s.notes, fmt.Sprintf("N=%d: cold requests by kind: %s; resync: %s; patch: %s", r.n,
			kinds(r.cold.byKind), kinds(r.steady.byKind), kinds(r.patch.byKind)))
		coldOK = coldOK && r.ready && float64(r.cold.requests)/float64(r.n) <= 18.2
		steadyOK = steadyOK && r.steadyDone && r.steady.requests <= r.n
		upOK = upOK && r.steady.bytesIn == 0
		rssOK = rssOK && r.peakRSS <= 300<<20 // the target is the cold one; after the patch is reported
	}
	largest := "none"
	if len(results) > 0 {
		largest = fmt.Sprint(results[len(results)-1].n)
	}
	s.targets = []target{
		{fmt.Sprintf("cold, all Ready (largest N: %s)", largest), "requests per builder ≤ 18.2", rowsCol(s.rows, 3), coldOK},
		{"cold peak RSS", "≤ 300 MiB", rowsCol(s.rows, 11), rssOK},
		{"steady resync", "1 request per builder", rowsCol(s.rows, 5), steadyOK},
		{"steady resync", "0 bytes up", rowsCol(s.rows, 6), upOK},
	}
	addSection(s)
}

func sharedClusterRun(t *testing.T, n, namespaces int) sharedClusterResult {
	r := sharedClusterResult{n: n, namespaces: namespaces}
	f := registrytest.New(t)
	seed(t, f.Addr)
	p, _ := startController(t)
	w := newWorld(t, f.Addr)
	w.waitStoreStackReady(t, 60*time.Second)
	f.Traffic().Reset()

	// Cold.
	start := time.Now()
	per := (n + namespaces - 1) / namespaces
	var worlds []*world
	for k := range namespaces {
		from, to := k*per, min((k+1)*per, n)
		if from >= to {
			break
		}
		tw := w.inNamespace(t, fmt.Sprintf("%s-t%03d", w.name, k), f.Addr)
		tw.createBuilders(t, from, to, w.order())
		worlds = append(worlds, tw)
	}
	r.created = time.Since(start)
	timeout := max(2*time.Minute, time.Duration(n)*100*time.Millisecond)
	r.took, r.ready = waitAllBuilders(t, n, timeout, func(latest map[string]string) bool { return true })
	r.took = time.Since(start)
	time.Sleep(time.Second) // late requeues and status writes
	r.cold = w.cost(f.Traffic().Requests())
	r.peakRSS = p.PeakRSS()
	if !r.ready {
		return r
	}
	before := builderImages(t)

	// Resync: every builder asked to reconcile, nothing changed.
	f.Traffic().Reset()
	begin := time.Now()
	if out, err := env.Kubectl("annotate", "builders", "--all", "-A", "--overwrite",
		"bench.buildsmith.dev/resync="+begin.Format(time.RFC3339Nano)).CombinedOutput(); err != nil {
		t.Fatalf("kubectl annotate: %v\n%s", err, out)
	}
	if took, ok := waitAsked(f, begin, timeout, 500*time.Millisecond, n, builderRepoAsked); ok {
		r.steadyDone, r.steadyTook = true, took
	}
	r.steady = w.cost(f.Traffic().Requests())

	// A stack patch: new build and run images at the stack's tags, the
	// ClusterStack told to look again (as its resync would).
	f.Traffic().Reset()
	patchStack(t, f.Addr, 1, "2")
	f.Traffic().Reset() // the patch's own pushes are not the controller's
	begin = time.Now()
	if out, err := env.Kubectl("annotate", "clusterstack", w.name, "--overwrite",
		"bench.buildsmith.dev/resync="+begin.Format(time.RFC3339Nano)).CombinedOutput(); err != nil {
		t.Fatalf("kubectl annotate: %v\n%s", err, out)
	}
	r.patchTook, r.patchDone = waitAllBuilders(t, n, timeout, func(latest map[string]string) bool {
		for key, image := range latest {
			if image == before[key] {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second)
	r.patch = w.cost(f.Traffic().Requests())
	r.peakAfter = p.PeakRSS()
	for _, tw := range worlds {
		_ = client.BuildsmithV1alpha1().Builders(tw.ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	}
	return r
}

// patchStack pushes new build and run images to the stack's tags
// (stack/build:1, stack/run:1): the stack's images with k more layers, the
// first holding etc/patch-level and the others etc/patch-level-<j>, each
// file's content level.
func patchStack(t testing.TB, addr string, k int, level string) {
	t.Helper()
	for _, repo := range []string{"stack/build:1", "stack/run:1"} {
		uid := cnbUID
		if strings.HasPrefix(repo, "stack/run") {
			uid = 0
		}
		img, err := sampleimages.StackImage(stackID, uid)
		if err != nil {
			t.Fatal(err)
		}
		for j := range k {
			path := "etc/patch-level"
			if j > 0 {
				path = fmt.Sprintf("etc/patch-level-%d", j)
			}
			patch, err := sampleimages.Layer(sampleimages.File{Path: path, Content: []byte(level)})
			if err != nil {
				t.Fatal(err)
			}
			if img, err = mutate.AppendLayers(img, patch); err != nil {
				t.Fatal(err)
			}
		}
		push(t, addr, repo, img, nil)
	}
}

// builderImages returns every builder's latestImage, by namespace/name.
func builderImages(t *testing.T) map[string]string {
	t.Helper()
	list, err := client.BuildsmithV1alpha1().Builders("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for _, b := range list.Items {
		images[b.Namespace+"/"+b.Name] = b.Status.LatestImage
	}
	return images
}

// waitAllBuilders waits until n builders in the cluster are Ready at their
// generation and done says their latest images are what is waited for;
// every 2 s, as listing 10,000 builders is work for the API server too.
func waitAllBuilders(t *testing.T, n int, timeout time.Duration, done func(latest map[string]string) bool) (time.Duration, bool) {
	t.Helper()
	took, err := localhost.Poll(context.Background(), timeout, 2*time.Second, fmt.Sprintf("%d builders Ready", n), func() (bool, string) {
		list, err := client.BuildsmithV1alpha1().Builders("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		latest := map[string]string{}
		for _, b := range list.Items {
			if b.Status.IsReady() && b.Status.ObservedGeneration == b.Generation {
				ready++
				latest[b.Namespace+"/"+b.Name] = b.Status.LatestImage
			}
		}
		return ready >= n && done(latest), fmt.Sprintf("%d/%d Ready", ready, n)
	})
	if err != nil {
		t.Log(err)
		return took, false
	}
	return took, true
}
