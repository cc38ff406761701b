package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/controllertest"
	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
	"github.com/buildsmith/buildsmith/test/sampleimages"
)

const (
	stackID    = "io.buildpacks.stacks.bench"
	cnbUID     = 1000
	buildpacks = 10 // in the store, one buildpackage each
)

// world is a store of 10 buildpackages, a stack and the lifecycle in a
// registry, the ClusterStore, ClusterStack and lifecycle ConfigMap over
// them, and a namespace for builders.
type world struct {
	name string
	addr string // the registry's host:port, as the objects name it
	ns   string
	// repos of the images the store, the stack and the lifecycle are in.
	sharedRepos map[string]bool
	// signing is the spec.signing of the builders it creates.
	signing *v1alpha1.Signing
}

var worlds int

// seed pushes the images of a world to the registry at addr.
func seed(t testing.TB, addr string) {
	t.Helper()
	lifecycle, err := sampleimages.Lifecycle(filepath.Join(env.Root, "bin", "lifecycle"), "0.21.0")
	push(t, addr, "buildsmith/lifecycle:0.21.0", lifecycle, err)
	for i := range buildpacks {
		bp, err := sampleimages.Buildpackage(sampleimages.Buildpack{ID: fmt.Sprintf("bench/bp-%d", i), Version: "1.0.0",
			Detect: "exit 0", Build: "echo built"})
		push(t, addr, fmt.Sprintf("buildpacks/bp-%d:1", i), bp, err)
	}
	build, err := sampleimages.StackImage(stackID, cnbUID)
	push(t, addr, "stack/build:1", build, err)
	run, err := sampleimages.StackImage(stackID, 0)
	push(t, addr, "stack/run:1", run, err)
}

func push(t testing.TB, addr, repo string, img v1.Image, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(addr + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
}

// newWorld creates the objects of a world over the images at addr (seeded
// before), in a namespace of its own; they are deleted when the test ends.
// sources are the store's images; nil means the 10 seeded buildpackages.
func newWorld(t testing.TB, addr string, sources ...string) *world {
	t.Helper()
	ctx := context.Background()
	worlds++
	w := &world{name: fmt.Sprintf("bench-%d", worlds), addr: addr, sharedRepos: map[string]bool{
		"buildsmith/lifecycle": true, "stack/build": true, "stack/run": true}}
	w.ns = w.name
	if sources == nil {
		for i := range buildpacks {
			sources = append(sources, fmt.Sprintf("%s/buildpacks/bp-%d:1", addr, i))
		}
	}
	var images []v1alpha1.ImageSource
	for _, s := range sources {
		images = append(images, v1alpha1.ImageSource{Image: s})
		repo := strings.TrimPrefix(s, addr+"/")
		if i := strings.LastIndex(repo, ":"); i >= 0 {
			repo = repo[:i]
		}
		w.sharedRepos[repo] = true
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(w.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := kube.CoreV1().ConfigMaps(systemNamespace)
	_ = cms.Delete(ctx, "lifecycle-image", metav1.DeleteOptions{})
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lifecycle-image"},
		Data: map[string]string{"image": addr + "/buildsmith/lifecycle:0.21.0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bs := client.BuildsmithV1alpha1()
	if _, err := bs.ClusterStores().Create(ctx, &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: w.name},
		Spec: v1alpha1.ClusterStoreSpec{Sources: images}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.ClusterStacks().Create(ctx, &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: w.name},
		Spec: v1alpha1.ClusterStackSpec{ID: stackID,
			BuildImage: v1alpha1.ImageSource{Image: addr + "/stack/build:1"},
			RunImage:   v1alpha1.RunImageSource{Image: addr + "/stack/run:1"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nothing of this world may outlive the test: the next test's
	// controller would reconcile it against a registry that is gone.
	t.Cleanup(func() {
		_ = bs.Builders(w.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = bs.ClusterStores().Delete(ctx, w.name, metav1.DeleteOptions{})
		_ = bs.ClusterStacks().Delete(ctx, w.name, metav1.DeleteOptions{})
		_ = cms.Delete(ctx, "lifecycle-image", metav1.DeleteOptions{})
	})
	return w
}

// inNamespace returns the world with builders in namespace ns (created,
// with its default ServiceAccount) pushing to the registry at addr; its
// builders are deleted when the test ends.
func (w *world) inNamespace(t testing.TB, ns, addr string) *world {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.BuildsmithV1alpha1().Builders(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	return &world{name: w.name, ns: ns, addr: addr, sharedRepos: w.sharedRepos}
}

// order is all the store's buildpacks, in one group.
func (w *world) order(ids ...string) []v1alpha1.OrderEntry {
	if ids == nil {
		for i := range buildpacks {
			ids = append(ids, fmt.Sprintf("bench/bp-%d", i))
		}
	}
	var group []v1alpha1.BuildpackRef
	for _, id := range ids {
		group = append(group, v1alpha1.BuildpackRef{ID: id})
	}
	return []v1alpha1.OrderEntry{{Group: group}}
}

// builderRepo is the repository builder i is pushed to.
func builderRepo(i int) string { return fmt.Sprintf("builders/b-%04d", i) }

// createBuilders creates builders from..to-1, 8 at a time, each with a tag
// of its own in a repository of its own (builderRepo).
func (w *world) createBuilders(t testing.TB, from, to int, order []v1alpha1.OrderEntry) {
	t.Helper()
	w.createBuildersAt(t, from, to, order, func(i int) string { return builderRepo(i) + ":latest" })
}

// createBuildersAt is createBuilders with builder i pushed to tag(i)
// ("repository:tag", in the world's registry).
func (w *world) createBuildersAt(t testing.TB, from, to int, order []v1alpha1.OrderEntry, tag func(i int) string) {
	t.Helper()
	ctx := context.Background()
	bs := client.BuildsmithV1alpha1().Builders(w.ns)
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := bs.Create(ctx, &v1alpha1.Builder{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b-%04d", i), Namespace: w.ns},
					Spec: v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
						Tag:   w.addr + "/" + tag(i),
						Stack: v1alpha1.StackRef{Name: w.name}, Store: v1alpha1.StoreRef{Name: w.name},
						Order: order, Signing: w.signing}}}, metav1.CreateOptions{})
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// waitAsked waits, after a resync asked for at begin, until n builder tags
// were asked about since the traffic was last reset (tag names the builder
// tag a request is about, "" for none) and the registry has been quiet for
// 2 s, polling every poll; it returns how long after begin the last request
// came, or false after timeout.
func waitAsked(f *registrytest.Registry, begin time.Time, timeout, poll time.Duration, n int, tag func(*registrytest.Request) string) (time.Duration, bool) {
	for time.Since(begin) < timeout {
		asked := map[string]bool{}
		var last time.Time
		for _, q := range f.Traffic().Requests() {
			if k := tag(q); k != "" {
				asked[k] = true
			}
			last = q.At
		}
		if len(asked) == n && time.Since(last) > 2*time.Second {
			return last.Sub(begin), true
		}
		time.Sleep(poll)
	}
	return time.Since(begin), false
}

// builderRepoAsked is waitAsked's tag for builders each in a repository of
// its own: the builders/ repository asked about.
func builderRepoAsked(q *registrytest.Request) string {
	if strings.HasPrefix(q.Repo, "builders/") {
		return q.Repo
	}
	return ""
}

// readyCount counts the Ready builders of the current generation.
func (w *world) readyCount(t testing.TB) (ready, total int, notReady string) {
	t.Helper()
	list, err := client.BuildsmithV1alpha1().Builders(w.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return 0, 0, err.Error()
	}
	for _, b := range list.Items {
		if b.Status.IsReady() && b.Status.ObservedGeneration == b.Generation {
			ready++
		} else if notReady == "" {
			notReady = fmt.Sprintf("%s: %+v", b.Name, b.Status.Conditions)
		}
	}
	return ready, len(list.Items), notReady
}

// waitBuildersReady waits until n builders are Ready and returns how long
// that took; ok is false on timeout.
func (w *world) waitBuildersReady(t testing.TB, n int, timeout time.Duration) (time.Duration, bool) {
	t.Helper()
	took, err := localhost.Poll(context.Background(), timeout, 100*time.Millisecond, fmt.Sprintf("%d builders Ready", n), func() (bool, string) {
		ready, _, notReady := w.readyCount(t)
		return ready >= n, fmt.Sprintf("%d/%d Ready; e.g. %s", ready, n, notReady)
	})
	if err != nil {
		t.Log(err)
		return took, false
	}
	return took, true
}

// waitStoreStackReady waits for the world's store and stack.
func (w *world) waitStoreStackReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	bs := client.BuildsmithV1alpha1()
	if _, err := localhost.Poll(ctx, timeout, 100*time.Millisecond, "store and stack "+w.name+" Ready", func() (bool, string) {
		s, err1 := bs.ClusterStores().Get(ctx, w.name, metav1.GetOptions{})
		k, err2 := bs.ClusterStacks().Get(ctx, w.name, metav1.GetOptions{})
		if err1 != nil || err2 != nil {
			return false, fmt.Sprint(err1, err2)
		}
		return s.Status.IsReady() && k.Status.IsReady(), fmt.Sprintf("store %+v, stack %+v", s.Status.Conditions, k.Status.Conditions)
	}); err != nil {
		t.Fatal(err)
	}
}

// startController starts the controller with profiling and metrics on
// ports of its own.
func startController(t testing.TB, args ...string) (*controllertest.Process, int) {
	t.Helper()
	profiling := controllertest.FreePort(t)
	args = append([]string{"--profiling-port", strconv.Itoa(profiling)}, args...)
	// BENCH_CONTROLLER_ARGS: flags for every controller of the run, e.g.
	// "--kube-api-qps 100 --kube-api-burst 200", to compare settings.
	args = append(args, strings.Fields(os.Getenv("BENCH_CONTROLLER_ARGS"))...)
	p := controllertest.Start(t, controller, controllertest.Options{Kubeconfig: env.Kubeconfig, Namespace: systemNamespace,
		DisableHA: true, Args: args})
	return p, profiling
}

// registryRequests reads the controller's own count of requests to host
// (each in-call retry and each refused connection counted) from its
// Prometheus endpoint, by status class ("2xx", …, "error").
func registryRequests(p *controllertest.Process, host string) (map[string]int64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.MetricsPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "buildsmith_registry_requests_total{") || !strings.Contains(line, `host="`+host+`"`) {
			continue
		}
		status := "?"
		if _, rest, ok := strings.Cut(line, `status="`); ok {
			status, _, _ = strings.Cut(rest, `"`)
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			out[status] += int64(v)
		}
	}
	return out, sc.Err()
}

func sumValues(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// cost is what a set of registry requests cost, split the way the targets
// need it.
type cost struct {
	requests      int
	bytesIn       int64 // uploaded
	bytesOut      int64 // downloaded
	sharedReads   int   // GET/HEAD of the store's, stack's and lifecycle's repositories
	manifestPuts  int   // PUT manifest on builder repositories
	blobUploads   int   // finished uploads (PUT ?digest=)
	duplicateBlob int   // finished uploads of a digest already uploaded to the same repository
	sharedBlob    int   // finished uploads of a digest already uploaded to another repository
	mounts        int
	byKind        map[string]int
	status        map[int]int
}

func (w *world) cost(reqs []*registrytest.Request) cost {
	s := registrytest.Summarize(reqs)
	c := cost{requests: s.Requests, bytesIn: s.BytesIn, bytesOut: s.BytesOut, byKind: s.ByKind, status: s.Status}
	uploaded := map[string]int{}         // by repository and digest
	uploadedAnywhere := map[string]int{} // by digest
	for _, r := range reqs {
		switch {
		case w.sharedRepos[r.Repo] && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			c.sharedReads++
		case r.Kind == "manifest" && r.Method == http.MethodPut && r.Status() < 300:
			c.manifestPuts++
		case r.Kind == "upload" && r.Method == http.MethodPut && r.Ref != "" && r.Status() < 300:
			c.blobUploads++
			uploaded[r.Repo+"@"+r.Ref]++
			uploadedAnywhere[r.Ref]++
			if uploaded[r.Repo+"@"+r.Ref] > 1 {
				c.duplicateBlob++
			} else if uploadedAnywhere[r.Ref] > 1 {
				c.sharedBlob++
			}
		case r.Kind == "mount" && r.Status() < 300:
			c.mounts++
		}
	}
	return c
}

// kinds renders a request count by kind, largest first.
func kinds(m map[string]int) string {
	return renderKinds(m, func(v int) string { return fmt.Sprint(v) })
}

// renderKinds renders a count by kind, largest first, each count as value
// gives it.
func renderKinds(m map[string]int, value func(int) string) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	var parts []string
	for _, e := range all {
		parts = append(parts, e.k+" "+value(e.v))
	}
	return strings.Join(parts, ", ")
}
