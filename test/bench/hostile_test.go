package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/reconciler/builder"
	"github.com/buildsmith/buildsmith/test/controllertest"
	"github.com/buildsmith/buildsmith/test/cosigntest"
	"github.com/buildsmith/buildsmith/test/hostileregistry"
	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// hostileConfig is what scenario 15 creates.
type hostileConfig struct {
	tenants, perTenant int           // ordinary namespaces and builders in each
	hosts              int           // hostile builders, each tagged on a host of its own that does not resolve
	missing            int           // Secret names (none existing) one ServiceAccount lists
	big                int           // Secrets of bigSecretBytes, listed by one ServiceAccount
	signing            int           // builders sharing one cosign key sealed with the OWASP scrypt preset
	requeues           int           // reconciles asked of each signing builder
	drain              time.Duration // longest wait for every hostile builder to be reconciled once
	splitMissing       int           // ServiceAccounts of maxSASecrets missing names each (under the count limit)
}

// The controller's default bounds (README's flag table), which the scenario
// runs against.
const (
	maxSASecrets          = 32
	maxSecretBytes        = 64 << 10
	maxWatchesPerNS       = 64
	maxWatches            = 2048
	maxRegistryHostLabels = 256
	maxFailingRegistries  = 16
	maxSigningKeyMemory   = 64 << 20
	// bigSecretBytes is a Secret's data, a little under the API server's
	// limit of 1 MiB per object (metadata included).
	bigSecretBytes = 1_000_000
)

// TestHostileTenant is scenario 15 (issue 27): the ordinary builders of
// BENCH_TENANTS (10) namespaces × BENCH_TENANT_N (20) alone, and beside a
// tenant that asks for as much as the API lets it: a ServiceAccount naming
// BENCH_HOSTILE_MISSING (10,000) Secrets that do not exist, another naming
// BENCH_HOSTILE_BIG (200) Secrets of ~1 MiB (and, so that the reads
// themselves are tried, the same Secrets one per ServiceAccount and the
// missing names 32 per ServiceAccount), 4 builders sharing a cosign key
// sealed with scrypt's OWASP preset (N=2^17, 128 MiB a decryption) asked
// to reconcile 10 times, and BENCH_HOSTILE_HOSTS (5,000) builders whose tags
// name as many distinct hosts that do not resolve. BENCH_HOSTILE_RUNS (1)
// runs of each, fresh controller and registries per run. Beside the hostile
// tenant the counts are read once more when its queue has reached every
// builder, or after BENCH_HOSTILE_DRAIN (5m); BENCH_HOSTILE_PROFILE=DIR
// keeps the controller's heap and goroutine profiles of each read.
func TestHostileTenant(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	cfg := hostileConfig{tenants: envInt("BENCH_TENANTS", 10), perTenant: envInt("BENCH_TENANT_N", 20),
		hosts: envInt("BENCH_HOSTILE_HOSTS", 5000), missing: envInt("BENCH_HOSTILE_MISSING", 10000),
		big: envInt("BENCH_HOSTILE_BIG", 200), signing: 4, requeues: 10, splitMissing: 10,
		drain: envDuration("BENCH_HOSTILE_DRAIN", 5*time.Minute)}
	runs := envInt("BENCH_HOSTILE_RUNS", 1)
	var alone, beside []hostileResult
	for run := range runs {
		for _, hostile := range []bool{false, true} {
			id := fmt.Sprintf("r%d-%v", run, hostile)
			t.Run(id, func(t *testing.T) {
				r := hostileRun(t, id, cfg, hostile)
				if hostile {
					beside = append(beside, r)
				} else {
					alone = append(alone, r)
				}
			})
		}
	}
	if len(alone) == 0 || len(beside) == 0 {
		t.Fatal("no complete run")
	}
	addSection(hostileSection(cfg, alone, beside))
}

// hostileResult is one run's figures.
type hostileResult struct {
	ready     time.Duration   // ordinary builders created → all Ready
	ok        bool            // all Ready within the timeout
	setup     time.Duration   // creating the hostile tenant's objects
	peakRSS   int64           // over the whole run
	peakEarly int64           // until hostileSettle after the ordinary builders were Ready
	atReady   metricsSnapshot // right after the ordinary builders were Ready
	later     metricsSnapshot // hostileSettle after that
	drained   metricsSnapshot // after the drain (hostile runs only)
	maxGo     int64           // most goroutines seen by the sampler (every 2 s)
	maxSeries int             // most metric series seen by the sampler
	// hostile builders with a status at Ready, at the later read and after
	// the drain, and how long after the later read the drain ended.
	triedAtReady, triedLater, triedDrained int
	drain                                  time.Duration
	// reasons the hostile builders ended with, by group, after the drain.
	reasons map[string]map[string]int
	// signing builders whose status acknowledges the last reconcile asked,
	// how long after it was asked they all did (or the wait gave up), and
	// what they acknowledged.
	requeuesHandled int
	requeueWait     time.Duration
	acknowledged    []string
	requeueErr      error
	// goroutines by the function that started them, at the last read.
	createdBy string
	// the controller's heap at hostileSettle after Ready and at the end.
	heapLater, heapEnd heapFacts
	// this machine's DNS answers for .invalid names, asked one after the
	// other by the bench: before the hostile tenant, and while the
	// controller was failing on its hosts (at hostileSettle after Ready).
	dnsQuiet, dnsBusy dnsLatency
	// the most the controller's scratch directory held; nil when the
	// controller ran from start to end, else how it ended.
	scratchPeak int64
	ended       error
	// what the hostile registry's objects said (hostile runs only).
	registry registryOutcome
}

// hostileSettle is how long after the ordinary builders are Ready the
// counts are read again.
const hostileSettle = 30 * time.Second

// hostileGroups are the hostile builders' groups, by name prefix, in the
// order the report lists them (longest prefix first where they overlap).
var hostileGroups = []struct{ prefix, what string }{
	{"sign-", "sharing the OWASP-sealed cosign key"},
	{"names-all", "ServiceAccount naming all the missing Secrets"},
	{"names-", "ServiceAccounts naming 32 missing Secrets each"},
	{"big-all", "ServiceAccount naming all the 1 MiB Secrets"},
	{"big-", "ServiceAccounts naming one 1 MiB Secret each"},
	{"host-", "tags on hosts that do not resolve"},
}

func hostileGroup(name string) string {
	for _, g := range hostileGroups {
		if strings.HasPrefix(name, g.prefix) {
			return g.prefix
		}
	}
	return "?"
}

// hostileRun starts a controller, creates the hostile tenant when hostile,
// then the ordinary builders, and measures. When hostile, it then waits for
// the hostile tenant's queue to have reached every builder once (at most
// cfg.drain) and reads the counts again.
func hostileRun(t *testing.T, id string, cfg hostileConfig, hostile bool) hostileResult {
	var r hostileResult
	ctx := context.Background()
	f := registrytest.New(t)
	seed(t, f.Addr)
	scratch := t.TempDir()
	p, profiling := startController(t, "--scratch-dir", scratch)
	defer p.Kill()
	scratchPeak := hostileregistry.SampleScratch(t, scratch)
	w := newWorld(t, f.Addr)
	w.waitStoreStackReady(t, 60*time.Second)
	// Shared images read before either run's timed part, as in § 11.
	warm := w.inNamespace(t, "warm-"+id, f.Addr)
	warm.createBuilders(t, 10000, 10001, w.order())
	if _, ok := warm.waitBuildersReady(t, 1, time.Minute); !ok {
		t.Fatal("the warm-up builder is not Ready")
	}

	sampler := sampleMetrics(p)
	defer sampler.stop()

	var hw *world
	var signing []string
	var rt *registryTenant
	if hostile {
		r.dnsQuiet = lookupInvalid(id+"-quiet", 20)
		begin := time.Now()
		hw, signing = createHostileTenant(t, w, "hostile-"+id, f.Addr, cfg)
		rt = createRegistryTenant(t, w, id)
		r.setup = time.Since(begin)
		t.Logf("%s: hostile tenant created in %s", id, r.setup.Round(100*time.Millisecond))
	}

	// The signing builders are asked to reconcile every second while the
	// ordinary ones are created and reconciled.
	requeued := make(chan error, 1)
	if hostile {
		go func() { requeued <- requestReconciles(ctx, hw.ns, signing, cfg.requeues, time.Second) }()
	} else {
		requeued <- nil
	}

	var ordinary []*world
	start := time.Now()
	for k := range cfg.tenants {
		tw := w.inNamespace(t, fmt.Sprintf("ordinary-%s-%d", id, k), f.Addr)
		tw.createBuilders(t, k*cfg.perTenant, (k+1)*cfg.perTenant, w.order())
		ordinary = append(ordinary, tw)
	}
	want := cfg.tenants * cfg.perTenant
	_, err := localhost.Poll(ctx, 10*time.Minute-time.Since(start), 100*time.Millisecond, "ordinary builders Ready", func() (bool, string) {
		ready := 0
		for _, tw := range ordinary {
			n, _, _ := tw.readyCount(t)
			ready += n
		}
		return ready >= want, fmt.Sprintf("%d/%d Ready", ready, want)
	})
	r.ready, r.ok = time.Since(start), err == nil
	if err != nil {
		t.Logf("%s: ordinary builders not all Ready in 10 min: %v", id, err)
	}
	r.atReady = snapshot(t, p)
	if hostile {
		reasons, _, _ := hostileReasons(t, hw.ns, "", false)
		r.triedAtReady = tried(reasons)
	}
	r.requeueErr = <-requeued
	asked := time.Now()
	time.Sleep(hostileSettle)
	r.later = snapshot(t, p)
	laterAt := time.Now()
	r.peakEarly = p.PeakRSS()
	r.heapLater = readHeap(t, profiling, id+"-later")
	if hostile {
		r.dnsBusy = lookupInvalid(id+"-busy", 20)
		reasons, _, _ := hostileReasons(t, hw.ns, "", false)
		r.triedLater = tried(reasons)
		// The last reconcile asked of the signing builders waits its turn
		// in the hostile tenant's queue: how long, up to 3 minutes.
		_, _ = localhost.Poll(ctx, 3*time.Minute-time.Since(asked), time.Second, "signing builders acknowledge the last request", func() (bool, string) {
			_, r.requeuesHandled, r.acknowledged = hostileReasons(t, hw.ns, strconv.Itoa(cfg.requeues), false)
			return r.requeuesHandled == cfg.signing, fmt.Sprint(r.acknowledged)
		})
		r.requeueWait = time.Since(asked)
		// The drain: until every hostile builder has been reconciled once.
		_, _ = localhost.Poll(ctx, cfg.drain-time.Since(laterAt), 10*time.Second, "every hostile builder reconciled once", func() (bool, string) {
			reasons, _, _ := hostileReasons(t, hw.ns, "", false)
			n := tried(reasons)
			return n == cfg.objects(), fmt.Sprintf("%d/%d", n, cfg.objects())
		})
		r.drain = time.Since(laterAt)
		r.drained = snapshot(t, p)
		r.reasons, _, _ = hostileReasons(t, hw.ns, "", true)
		r.triedDrained = tried(r.reasons)
		r.registry = rt.outcome(time.Minute)
		rt.objects.Log(t)
	}
	r.scratchPeak, r.ended = scratchPeak(), p.Running()
	r.createdBy = goroutinesByCreator(t, profiling, 6)
	r.heapEnd = readHeap(t, profiling, id+"-end")
	r.peakRSS = p.PeakRSS()
	r.maxGo, r.maxSeries = sampler.stop()
	t.Logf("%s: heap at +%s %+v, at the end %+v; DNS before %s, while busy %s", id, hostileSettle, r.heapLater, r.heapEnd, r.dnsQuiet, r.dnsBusy)
	t.Logf("%s: ordinary Ready in %s (ok %v), peak RSS %s (%s until %s after Ready), at Ready %+v, %s later %+v, "+
		"after the drain (%s; tried %d then %d) %+v, reasons %v, requeues acknowledged %d (%v) %s after the last; goroutines by creator: %s",
		id, r.ready.Round(10*time.Millisecond), r.ok, mib(r.peakRSS), mib(r.peakEarly), hostileSettle, r.atReady, hostileSettle, r.later,
		r.drain.Round(time.Second), r.triedLater, r.triedDrained, r.drained, r.reasons,
		r.requeuesHandled, r.acknowledged, r.requeueWait.Round(time.Second), r.createdBy)
	return r
}

// dnsLatency is how long n lookups of names that do not exist took.
type dnsLatency struct {
	n           int
	median, max time.Duration
	slow        int // over a second
}

func (d dnsLatency) String() string {
	if d.n == 0 {
		return "–"
	}
	short := func(x time.Duration) time.Duration {
		if x < 10*time.Millisecond {
			return x.Round(100 * time.Microsecond)
		}
		return x.Round(10 * time.Millisecond)
	}
	return fmt.Sprintf("median %s, slowest %s, %d of %d over 1 s", short(d.median), short(d.max), d.slow, d.n)
}

// lookupInvalid looks up n names of the .invalid domain one after the
// other, as the controller's dialer would (Go's resolver).
func lookupInvalid(prefix string, n int) dnsLatency {
	var ds []time.Duration
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		begin := time.Now()
		_, _ = net.DefaultResolver.LookupHost(ctx, fmt.Sprintf("bench-%s-%d.invalid", prefix, i))
		ds = append(ds, time.Since(begin))
		cancel()
	}
	slices.Sort(ds)
	d := dnsLatency{n: n, median: ds[n/2], max: ds[n-1]}
	for _, x := range ds {
		if x > time.Second {
			d.slow++
		}
	}
	return d
}

// objects is the number of hostile builders.
func (c hostileConfig) objects() int { return c.signing + 1 + c.big + 1 + c.splitMissing + c.hosts }

// tried counts the builders with a status among reasons.
func tried(reasons map[string]map[string]int) int {
	n := 0
	for _, m := range reasons {
		for reason, v := range m {
			if reason != noStatus {
				n += v
			}
		}
	}
	return n
}

// heapFacts is what the controller's heap profile (debug=1) says: the
// runtime's memory statistics, and the bytes ever allocated under scrypt
// (sampled, as the profile is; a key's decryption allocates ≥ 32 MiB at
// once, which sampling cannot miss).
type heapFacts struct {
	HeapAlloc, HeapSys, StackInuse, Sys int64
	ScryptAlloc                         int64
	// ScryptLargest is the largest single allocation under scrypt: 128 *
	// r * N bytes for a key sealed with N and r (64 MiB for cosign
	// generate-key-pair's N=2^16, 128 MiB for the OWASP preset).
	ScryptLargest int64
	ok            bool
}

var memStat = regexp.MustCompile(`^# (HeapAlloc|HeapSys|Stack|Sys) = (\d+)`)

// readHeap reads the controller's heap profile (--profiling-port); with
// BENCH_HOSTILE_PROFILE=DIR it also saves the heap and goroutine profiles
// there, named after name.
func readHeap(t *testing.T, port int, name string) heapFacts {
	t.Helper()
	var h heapFacts
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?debug=1", port))
	if err != nil {
		t.Logf("heap profile: %v", err)
		return h
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var record, objects int64 // alloc bytes and objects of the record whose frames follow
	scrypt := false
	flush := func() {
		if scrypt {
			h.ScryptAlloc += record
			if objects > 0 {
				h.ScryptLargest = max(h.ScryptLargest, record/objects)
			}
		}
		record, objects, scrypt = 0, 0, false
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "] @ "):
			// "inuse_objects: inuse_bytes [alloc_objects: alloc_bytes] @ …"
			flush()
			if _, rest, ok := strings.Cut(line, "["); ok {
				if n, bytes, ok := strings.Cut(rest, ": "); ok {
					bytes, _, _ = strings.Cut(bytes, "]")
					record, _ = strconv.ParseInt(strings.TrimSpace(bytes), 10, 64)
					objects, _ = strconv.ParseInt(strings.TrimSpace(n), 10, 64)
				}
			}
		case strings.HasPrefix(line, "#\t") && strings.Contains(line, "/scrypt."):
			scrypt = true
		default:
			if m := memStat.FindStringSubmatch(line); m != nil {
				v, _ := strconv.ParseInt(m[2], 10, 64)
				switch m[1] {
				case "HeapAlloc":
					h.HeapAlloc = v
				case "HeapSys":
					h.HeapSys = v
				case "Stack":
					h.StackInuse = v
				case "Sys":
					h.Sys = v
				}
			}
		}
	}
	flush()
	h.ok = sc.Err() == nil && h.Sys > 0
	if dir := os.Getenv("BENCH_HOSTILE_PROFILE"); dir != "" {
		for kind, path := range map[string]string{"heap": "heap", "goroutine": "goroutine?debug=2"} {
			if err := saveURL(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s", port, path), filepath.Join(dir, name+"-"+kind+".pprof")); err != nil {
				t.Logf("saving the %s profile: %v", kind, err)
			}
		}
	}
	return h
}

func saveURL(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// goroutinesByCreator reads the controller's goroutines (pprof, debug=2)
// and renders the top functions that started them, with their counts.
func goroutinesByCreator(t *testing.T, port, top int) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=2", port))
	if err != nil {
		t.Logf("goroutine profile: %v", err)
		return "?"
	}
	defer resp.Body.Close()
	by := map[string]int{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "created by "); ok {
			fn, _, _ := strings.Cut(rest, " in goroutine")
			by[fn]++
		}
	}
	var parts []string
	for i, kv := range sortedCounts(by) {
		if i == top {
			break
		}
		parts = append(parts, fmt.Sprintf("`%s` %d", shortFunc(kv.k), kv.v))
	}
	return strings.Join(parts, ", ")
}

// shortFunc drops a function name's module path up to its package.
func shortFunc(fn string) string {
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		return fn[i+1:]
	}
	return fn
}

type keyCount struct {
	k string
	v int
}

// sortedCounts orders counts largest first, then by key.
func sortedCounts(m map[string]int) []keyCount {
	var all []keyCount
	for k, v := range m {
		all = append(all, keyCount{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v || all[i].v == all[j].v && all[i].k < all[j].k })
	return all
}

// createHostileTenant creates the hostile tenant's Secrets, ServiceAccounts
// and builders in namespace ns, the signing ones first (so that the key's
// Secret has a watch before the namespace's watches run out), the host ones
// last. It returns the tenant's world and the names of the signing builders.
func createHostileTenant(t *testing.T, w *world, ns, addr string, cfg hostileConfig) (*world, []string) {
	t.Helper()
	ctx := context.Background()
	hw := w.inNamespace(t, ns, addr)
	t.Cleanup(func() {
		_ = kube.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = kube.CoreV1().ServiceAccounts(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	createSA := func(sa *corev1.ServiceAccount) {
		t.Helper()
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var builders []hostileBuilder
	tag := func(name string) string { return addr + "/hostile/" + name + ":latest" }

	// A cosign key sealed with scrypt's OWASP preset: 128 MiB and a few
	// tenths of a second to open, twice what the controller allows.
	secret := cosigntest.Secret(ns, "cosign-owasp", cosigntest.CostlyKey(t, "bench"), "bench")
	secret.ResourceVersion = ""
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createSA(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "signing"},
		Secrets: []corev1.ObjectReference{{Name: "cosign-owasp"}}})
	var signing []string
	for i := range cfg.signing {
		name := fmt.Sprintf("sign-%d", i)
		signing = append(signing, name)
		builders = append(builders, hostileBuilder{name, "signing", tag(name)})
	}
	createHostileBuilders(t, hw, builders)
	builders = builders[:0]

	// Secrets of ~1 MiB, as dockerconfigjson (valid JSON, padded) so that
	// the keychain would use them.
	pad := strings.Repeat("x", bigSecretBytes-len(`{"auths":{},"pad":""}`))
	big := make([]string, cfg.big)
	forEach(t, cfg.big, 8, func(i int) error {
		big[i] = fmt.Sprintf("big-%03d", i)
		_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: big[i]},
			Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{},"pad":"` + pad + `"}`)}}, metav1.CreateOptions{})
		return err
	})
	all := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "big-all"}}
	for _, name := range big {
		all.ImagePullSecrets = append(all.ImagePullSecrets, corev1.LocalObjectReference{Name: name})
	}
	createSA(all)
	builders = append(builders, hostileBuilder{"big-all", "big-all", tag("big-all")})
	forEach(t, cfg.big, 8, func(i int) error {
		_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: big[i]},
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: big[i]}}}, metav1.CreateOptions{})
		return err
	})
	for _, name := range big {
		builders = append(builders, hostileBuilder{name, name, tag(name)})
	}

	// Names of Secrets that do not exist: in secrets (where a missing one is
	// skipped, so that every name is looked up and watched), all in one
	// ServiceAccount, and 32 to a ServiceAccount.
	missing := func(i int) corev1.ObjectReference {
		return corev1.ObjectReference{Name: fmt.Sprintf("missing-%05d", i)}
	}
	names := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "names-all"}}
	for i := range cfg.missing {
		names.Secrets = append(names.Secrets, missing(i))
	}
	createSA(names)
	builders = append(builders, hostileBuilder{"names-all", "names-all", tag("names-all")})
	for k := range cfg.splitMissing {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("names-%02d", k)}}
		for i := k * maxSASecrets; i < (k+1)*maxSASecrets; i++ {
			sa.Secrets = append(sa.Secrets, missing(i))
		}
		createSA(sa)
		builders = append(builders, hostileBuilder{sa.Name, sa.Name, tag(sa.Name)})
	}
	createHostileBuilders(t, hw, builders)

	// Tags on hosts of the reserved .invalid domain: each fails at its DNS
	// lookup, a distinct registry to the controller.
	builders = builders[:0]
	for i := range cfg.hosts {
		builders = append(builders, hostileBuilder{fmt.Sprintf("host-%05d", i), "", fmt.Sprintf("h%05d.invalid:5000/app:latest", i)})
	}
	createHostileBuilders(t, hw, builders)
	return hw, signing
}

type hostileBuilder struct{ name, serviceAccount, tag string }

// createHostileBuilders creates builders over w's store and stack, 16 at a
// time.
func createHostileBuilders(t *testing.T, w *world, builders []hostileBuilder) {
	t.Helper()
	bs := client.BuildsmithV1alpha1().Builders(w.ns)
	order := w.order()
	forEach(t, len(builders), 16, func(i int) error {
		b := builders[i]
		_, err := bs.Create(context.Background(), &v1alpha1.Builder{ObjectMeta: metav1.ObjectMeta{Name: b.name, Namespace: w.ns},
			Spec: v1alpha1.NamespacedBuilderSpec{ServiceAccountName: b.serviceAccount, BuilderSpec: v1alpha1.BuilderSpec{
				Tag: b.tag, Stack: v1alpha1.StackRef{Name: w.name}, Store: v1alpha1.StoreRef{Name: w.name}, Order: order}}},
			metav1.CreateOptions{})
		return err
	})
}

// forEach calls do for 0..n-1 on parallel goroutines and fails the test on
// the first error.
func forEach(t *testing.T, n, parallel int, do func(i int) error) {
	t.Helper()
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := do(i); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// requestReconciles asks the named builders of ns to reconcile times times,
// every interval, with the values "1" … times.
func requestReconciles(ctx context.Context, ns string, names []string, times int, interval time.Duration) error {
	bs := client.BuildsmithV1alpha1().Builders(ns)
	for n := 1; n <= times; n++ {
		if n > 1 {
			time.Sleep(interval)
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.ReconcileRequestedAtAnnotation, strconv.Itoa(n))
		for _, name := range names {
			if _, err := bs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// hostileReasons counts the hostile builders by group and by what their
// status says, and how many of the signing builders acknowledge the
// reconcile request last.
func hostileReasons(t *testing.T, ns, last string, logExamples bool) (map[string]map[string]int, int, []string) {
	t.Helper()
	list, err := client.BuildsmithV1alpha1().Builders(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	handled := 0
	var acknowledged []string
	examples := map[string]bool{}
	for _, b := range list.Items {
		g := hostileGroup(b.Name)
		if out[g] == nil {
			out[g] = map[string]int{}
		}
		reason := statusReason(&b)
		out[g][reason]++
		if example := g + " " + reason; logExamples && !examples[example] {
			examples[example] = true
			if c := b.Status.GetCondition(v1alpha1.ConditionReady); c != nil {
				t.Logf("%s: %s: %.300s", b.Name, reason, c.Message)
			}
		}
		if g == "sign-" {
			acknowledged = append(acknowledged, cmp.Or(b.Status.LastHandledReconcileAt, "none"))
			if b.Status.LastHandledReconcileAt == last {
				handled++
			}
		}
	}
	return out, handled, acknowledged
}

const noStatus = "no status yet"

// statusReason is "Ready", the reason Ready is not True, or, for a Ready
// builder whose last reconcile failed, "Ready, UpToDate=False: <reason>".
func statusReason(b *v1alpha1.Builder) string {
	ready := b.Status.GetCondition(v1alpha1.ConditionReady)
	if ready == nil {
		return noStatus
	}
	if ready.IsTrue() {
		if up := b.Status.GetCondition(v1alpha1.ConditionUpToDate); up != nil && up.IsFalse() {
			return "Ready, UpToDate=False: " + up.Reason
		}
		return "Ready"
	}
	if ready.Reason == "" {
		return "Ready=" + string(ready.Status)
	}
	return ready.Reason
}

// metricsSnapshot is what the controller's Prometheus endpoint, and the API
// server's, said at one time.
type metricsSnapshot struct {
	Goroutines    int64 // -1: no goroutine metric found
	Series        int   // lines that are not comments
	HostLabels    int   // distinct host label values of buildsmith's registry metrics
	Other         bool  // whether one of them is "other"
	OtherRequests int64 // buildsmith_registry_requests_total{host="other"}
	OpenCircuits  int64 // buildsmith_registry_circuits_open, summed
	Waiters       int64 // buildsmith_registry_circuits_waiters, summed
	Probes        int64 // buildsmith_registry_circuits_probes_total, summed
	At            time.Time
	SecretWatches int64  // the API server's Secret watches in flight (-1: unknown)
	WatchScopes   string // the same by the metric's scope label
	TopFamilies   string
	// The label with the most distinct values across all series, and how
	// many: a label taking a value per host or object would be unbounded.
	WidestLabel       string
	WidestLabelValues int
}

var (
	hostLabel = regexp.MustCompile(`\bhost="([^"]*)"`)
	anyLabel  = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)
)

// goroutineMetrics are the names the goroutine count may have: OTel's
// runtime instrumentation, and Prometheus' Go collector.
var goroutineMetrics = []string{"go_goroutine_count", "go_goroutines"}

// controllerMetrics reads the controller's Prometheus endpoint.
func controllerMetrics(p *controllertest.Process) (metricsSnapshot, error) {
	s := metricsSnapshot{Goroutines: -1, SecretWatches: -1, At: time.Now()}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.MetricsPort))
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	hosts := map[string]bool{}
	families := map[string]int{}
	labels := map[string]map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s.Series++
		family, _, _ := strings.Cut(line, "{")
		family, _, _ = strings.Cut(family, " ")
		families[family]++
		if _, rest, ok := strings.Cut(line, "{"); ok {
			set, _, _ := strings.Cut(rest, "} ")
			for _, m := range anyLabel.FindAllStringSubmatch(set, -1) {
				if labels[m[1]] == nil {
					labels[m[1]] = map[string]bool{}
				}
				labels[m[1]][m[2]] = true
			}
		}
		fields := strings.Fields(line)
		value, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		for _, g := range goroutineMetrics {
			if family == g {
				s.Goroutines = int64(value)
			}
		}
		if !strings.HasPrefix(family, "buildsmith_registry") {
			continue
		}
		if m := hostLabel.FindStringSubmatch(line); m != nil {
			hosts[m[1]] = true
			if m[1] == "other" && family == "buildsmith_registry_requests_total" {
				s.OtherRequests += int64(value)
			}
		}
		switch family {
		case "buildsmith_registry_circuits_open":
			s.OpenCircuits += int64(value)
		case "buildsmith_registry_circuits_waiters":
			s.Waiters += int64(value)
		case "buildsmith_registry_circuits_probes_total":
			s.Probes += int64(value)
		}
	}
	s.HostLabels, s.Other = len(hosts), hosts["other"]
	widths := map[string]int{}
	for k, vs := range labels {
		widths[k] = len(vs)
	}
	if w := sortedCounts(widths); len(w) > 0 {
		s.WidestLabel, s.WidestLabelValues = w[0].k, w[0].v
	}
	top := sortedCounts(families)
	var parts []string
	for _, e := range top[:min(4, len(top))] {
		parts = append(parts, fmt.Sprintf("%s %d", e.k, e.v))
	}
	s.TopFamilies = strings.Join(parts, ", ")
	return s, sc.Err()
}

// secretWatches is the number of Secret watches the API server is serving
// (apiserver_longrunning_requests) that are not cluster-wide: the bench
// watches no Secrets, and the controller watches each by name, so they are
// the controller's. It also renders the count by the metric's scope.
func secretWatches(ctx context.Context) (int64, string, error) {
	rc, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		return -1, "", err
	}
	defer rc.Close()
	var n int64
	byScope := map[string]int{}
	scope := regexp.MustCompile(`\bscope="([^"]*)"`)
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `resource="secrets"`) ||
			!strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil && v > 0 {
			sc := "?"
			if m := scope.FindStringSubmatch(line); m != nil {
				sc = m[1]
			}
			byScope[sc] += int(v)
			// The controller watches Secrets one by name (scope
			// "resource"); the API server's own watch is cluster-wide.
			if sc != "cluster" {
				n += int64(v)
			}
		}
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		return -1, "", err
	}
	var parts []string
	for _, kv := range sortedCounts(byScope) {
		parts = append(parts, fmt.Sprintf("%s %d", kv.k, kv.v))
	}
	return n, strings.Join(parts, ", "), nil
}

// snapshot reads both endpoints, logging what fails.
func snapshot(t *testing.T, p *controllertest.Process) metricsSnapshot {
	t.Helper()
	s, err := controllerMetrics(p)
	if err != nil {
		t.Logf("controller metrics: %v", err)
	}
	if s.SecretWatches, s.WatchScopes, err = secretWatches(context.Background()); err != nil {
		t.Logf("API server metrics: %v", err)
	}
	return s
}

// metricsSampler reads the controller's goroutines and series every 2 s
// and keeps the largest.
type metricsSampler struct {
	done      chan struct{}
	once      sync.Once
	wg        sync.WaitGroup
	mu        sync.Mutex
	goroutine int64
	series    int
}

func sampleMetrics(p *controllertest.Process) *metricsSampler {
	s := &metricsSampler{done: make(chan struct{}), goroutine: -1}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			if m, err := controllerMetrics(p); err == nil {
				s.mu.Lock()
				s.goroutine, s.series = max(s.goroutine, m.Goroutines), max(s.series, m.Series)
				s.mu.Unlock()
			}
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling (once; later calls return the same) and returns
// the largest counts seen.
func (s *metricsSampler) stop() (goroutines int64, series int) {
	s.once.Do(func() { close(s.done) })
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.goroutine, s.series
}

// hostileSection is the report of scenario 15.
func hostileSection(cfg hostileConfig, alone, beside []hostileResult) *section {
	n := cfg.tenants * cfg.perTenant
	durations := func(rs []hostileResult) (ds []time.Duration) {
		for _, r := range rs {
			ds = append(ds, r.ready)
		}
		return ds
	}
	peaks := func(rs []hostileResult, early bool) (ps []int64) {
		for _, r := range rs {
			if early {
				ps = append(ps, r.peakEarly)
			} else {
				ps = append(ps, r.peakRSS)
			}
		}
		return ps
	}
	// The run whose figures the table shows in detail: the one with the
	// median peak.
	medianRun := func(rs []hostileResult) hostileResult {
		c := append([]hostileResult(nil), rs...)
		sort.Slice(c, func(i, j int) bool { return c[i].peakRSS < c[j].peakRSS })
		return c[len(c)/2]
	}
	a, b := medianRun(alone), medianRun(beside)
	okAll := true
	for _, r := range append(append([]hostileResult(nil), alone...), beside...) {
		okAll = okAll && r.ok
	}
	readyRatio := median(durations(beside)).Seconds() / median(durations(alone)).Seconds()
	rssAlone := medianInt(peaks(alone, false))
	rssRatio := float64(medianInt(peaks(beside, false))) / float64(rssAlone)
	rssEarlyRatio := float64(medianInt(peaks(beside, true))) / float64(medianInt(peaks(alone, true)))

	s := &section{title: fmt.Sprintf("15. A hostile tenant: %s unreachable hosts, %s missing and %d × 1 MiB Secrets, an OWASP-sealed key, "+
		"a hostile registry, beside %d namespaces × %d", thousands(cfg.hosts), thousands(cfg.missing), cfg.big, cfg.tenants, cfg.perTenant)}
	s.what = fmt.Sprintf("Issue 27. Time until the %d ordinary builders (%d namespaces, one healthy registry) are all Ready, alone and beside "+
		"one hostile namespace whose objects are all created first, ahead in the queue (creating them took %s): "+
		"%d builders sharing a cosign key sealed with scrypt's OWASP preset (N=2^17, r=8, p=1: 128 MiB to open), each asked to "+
		"reconcile %d times (`%s`, 1 s apart, while the ordinary builders run); "+
		"a ServiceAccount naming %s Secrets that do not exist (in `secrets`) and %d more naming %d of them each; "+
		"%d Secrets of %s bytes of data (dockerconfigjson), named all by one ServiceAccount and one each by %d more; "+
		"%d builders whose tags name %d distinct hosts `hNNNNN.invalid:5000` (\"unreachable\": names in the reserved `.invalid` "+
		"domain, so every request to them fails at its DNS lookup; how fast this machine's resolver says so is in the notes). One builder per "+
		"ServiceAccount: %d hostile builders. And (issue 37) a registry of the tenant's own, its objects in a second namespace: "+
		"a flattened builder over a zstd layer asking for a 512 MiB window, another over a layer whose GET never ends, a signing "+
		"builder whose `.sig` tag reads %d layers, a Buildpack whose reads are redirected to fresh 16 KiB paths answered 429 "+
		"`Retry-After: 86400`, and %d builders tagged on as many hosts answering 401 with %d MiB of headers. Fresh controller (default flags: %d workers, %d Secrets per ServiceAccount, %d KiB "+
		"per Secret, %d Secret watches per namespace and %d in all, %d MiB of scrypt per key, %d registry host labels, %d failing "+
		"registries waited on per namespace, %d flattens at once of at most %d MiB each) and "+
		"registries per run, one builder of a third namespace Ready first. Counts are read right after the ordinary builders "+
		"are Ready, %s later, and, beside the hostile tenant, once its queue has reached every hostile builder (or after %s): "+
		"its builders are reconciled in turn, %d at a time, so most host builders are first tried after the ordinary ones "+
		"are Ready. Peak RSS is the controller's VmHWM over the whole run.",
		n, cfg.tenants, seconds(setupTimes(beside)), cfg.signing, cfg.requeues, v1alpha1.ReconcileRequestedAtAnnotation,
		thousands(cfg.missing), cfg.splitMissing, maxSASecrets, cfg.big, thousands(bigSecretBytes), cfg.big, cfg.hosts, cfg.hosts,
		cfg.objects(), hostileregistry.SignatureLayers, registryFloods, hostileregistry.FloodHeaderBytes>>20, 4, maxSASecrets, maxSecretBytes>>10, maxWatchesPerNS, maxWatches, maxSigningKeyMemory>>20,
		maxRegistryHostLabels, maxFailingRegistries, builder.DefaultConcurrentFlattens, builder.DefaultMaxFlattenedBytes>>20,
		hostileSettle, cfg.drain, 4)
	s.header = []string{"run, read", "ordinary builders all Ready", "peak RSS so far", "goroutines", "controller's Secret watches",
		"registry host labels", "metric series", "widest label (values)", "hostile builders reconciled", "requests to unnamed hosts",
		"open circuits / waiters"}
	row := func(name, ready, peak string, m metricsSnapshot, reached string) []string {
		return []string{name, ready, peak, count(m.Goroutines), count(m.SecretWatches), fmt.Sprint(m.HostLabels),
			fmt.Sprint(m.Series), fmt.Sprintf("`%s` (%d)", m.WidestLabel, m.WidestLabelValues), reached, fmt.Sprint(m.OtherRequests),
			fmt.Sprintf("%d / %d", m.OpenCircuits, m.Waiters)}
	}
	of := func(k int) string { return fmt.Sprintf("%d/%d", k, cfg.objects()) }
	s.rows = [][]string{
		row("alone, at Ready", seconds(durations(alone)), "", a.atReady, "–"),
		row(fmt.Sprintf("alone, +%s", hostileSettle), "", mib(rssAlone), a.later, "–"),
		row("beside, at Ready", seconds(durations(beside)), "", b.atReady, of(b.triedAtReady)),
		row(fmt.Sprintf("beside, +%s", hostileSettle), "", mib(medianInt(peaks(beside, true))), b.later, of(b.triedLater)),
		row(fmt.Sprintf("beside, after the drain (+%s more)", b.drain.Round(time.Second)), "", mib(medianInt(peaks(beside, false))), b.drained, of(b.triedDrained)),
	}

	watches := max(b.atReady.SecretWatches, b.later.SecretWatches, b.drained.SecretWatches)
	hostLabels := max(b.atReady.HostLabels, b.later.HostLabels, b.drained.HostLabels)
	widest := max(b.atReady.WidestLabelValues, b.later.WidestLabelValues, b.drained.WidestLabelValues)
	// Growth while the queue reached more hostile builders (most of them
	// host builders, each a registry of its own): what grows with hosts or
	// objects shows here.
	reached := b.triedDrained - b.triedLater
	allowed := 50 + reached/10
	seriesGrowth := b.drained.Series - b.later.Series
	goGrowth := b.drained.Goroutines - b.later.Goroutines
	judged := reached >= 100
	probeRate := rate(b.later.Probes, b.drained.Probes, b.later.At, b.drained.At)
	signingOK := b.reasons["sign-"]["SigningKeyTooCostly"]+b.reasons["sign-"]["Ready, UpToDate=False: SigningKeyTooCostly"] == cfg.signing
	s.targets = []target{
		{"peak controller RSS beside the hostile tenant vs alone", "≤ ×2", fmt.Sprintf("×%.2f (%s vs %s; until %s after Ready: ×%.2f; "+
			"less the %s of scrypt memory taken at once to decrypt a signing key, which signing with a key cosign writes costs any tenant: ×%.2f)",
			rssRatio, mib(medianInt(peaks(beside, false))), mib(rssAlone), hostileSettle, rssEarlyRatio, mib(b.heapEnd.ScryptLargest),
			float64(medianInt(peaks(beside, false))-b.heapEnd.ScryptLargest)/float64(rssAlone)), rssRatio <= 2},
		{"ordinary builders Ready beside vs alone (as § 11)", "≤ ×1.2", fmt.Sprintf("×%.2f", readyRatio), okAll && readyRatio <= 1.2},
		{"the controller's Secret watches (only the hostile namespaces have Secrets to watch: the first its many, the registry's one signing key), every read",
			fmt.Sprintf("≤ %d + 1 (`--max-secret-watches-per-namespace`, and the signing key's)", maxWatchesPerNS), count(watches),
			watches >= 0 && watches <= maxWatchesPerNS+1},
		{"host label values in the registry metrics, every read", fmt.Sprintf("≤ %d + \"other\" (`--registry-metric-hosts`)", maxRegistryHostLabels),
			fmt.Sprintf("%d (\"other\" among them: %v)", hostLabels, b.drained.Other || b.later.Other), hostLabels <= maxRegistryHostLabels+1},
		{"metric series: no label with a value per host or object; growth while the queue reached more hostile builders",
			fmt.Sprintf("widest label ≤ %d values; growth < 50 + 1 per 10 builders reached", maxRegistryHostLabels+1),
			fmt.Sprintf("widest %d; %+d series for %d more builders reached", widest, seriesGrowth, reached),
			widest <= maxRegistryHostLabels+1 && (!judged || seriesGrowth < allowed)},
		{"goroutines: growth while the queue reached more hostile builders", "< 50 + 1 per 10 builders reached",
			fmt.Sprintf("%+d for %d more builders reached", goGrowth, reached), b.later.Goroutines >= 0 && (!judged || goGrowth < int64(allowed))},
		{fmt.Sprintf("circuit probes a second from +%s to the end of the drain (the hosts that fail: all the hostile tenant's)", hostileSettle),
			fmt.Sprintf("≤ %d (`--max-failing-registries-per-namespace`, a probe a second each; 10 %% slack)", maxFailingRegistries),
			fmt.Sprintf("%.1f", probeRate), probeRate <= maxFailingRegistries*1.1},
		{"signing builders refused before decryption, through every reconcile asked of them",
			fmt.Sprintf("%d SigningKeyTooCostly; no allocation under scrypt of the OWASP key's 128 MiB (heap profile: only the hostile "+
				"registry's signing key, sealed as cosign generate-key-pair seals, N=2^16: 64 MiB, is opened)", cfg.signing),
			fmt.Sprintf("%s; %s under scrypt", reasonCounts(b.reasons["sign-"]), scryptBytes(b.heapEnd)),
			signingOK && b.requeueErr == nil && b.heapEnd.ok && b.heapEnd.ScryptLargest < 128<<20},
	}
	s.targets = append(s.targets, registryTargets(alone, beside)...)
	if !judged {
		s.notes = append(s.notes, fmt.Sprintf("Only %d more hostile builders were reached during the drain: too few to judge growth (the two "+
			"growth targets count as met on the widest-label check alone).", reached))
	}

	var groups []string
	for _, g := range hostileGroups {
		if m := b.reasons[g.prefix]; m != nil {
			total := 0
			for _, v := range m {
				total += v
			}
			groups = append(groups, fmt.Sprintf("`%s…` (%s, %d): %s", g.prefix, g.what, total, reasonCounts(m)))
		}
	}
	s.notes = append(s.notes, fmt.Sprintf("DNS: 20 lookups of `.invalid` names, one after the other, from the bench: before the hostile "+
		"tenant %s; %s after Ready, while the controller had its own lookups of the hostile hosts in flight, %s. A lookup the "+
		"resolver drops costs Go's resolver a 5 s timeout before it asks again: those hosts were then as much hangs as refusals.",
		b.dnsQuiet, hostileSettle, b.dnsBusy))
	s.notes = append(s.notes, "How the hostile builders ended (the reason of `Ready`, after the drain): "+strings.Join(groups, "; ")+".")
	s.notes = append(s.notes, registryNotes(b)...)
	s.notes = append(s.notes,
		fmt.Sprintf("Goroutines by the function that started them, at the last read: beside %s; alone %s. Alone → beside at +%s: "+
			"%+d goroutines with %d Secret watches, about %.0f a watch (each is an informer of its own).", b.createdBy, a.createdBy,
			hostileSettle, b.later.Goroutines-a.later.Goroutines, b.later.SecretWatches,
			float64(b.later.Goroutines-a.later.Goroutines)/float64(max(b.later.SecretWatches, 1))),
		fmt.Sprintf("Requests to unnamed hosts: `buildsmith_registry_requests_total{host=\"other\"}` (the hosts that never answered "+
			"count there, in-call retries included): %.1f a second from +%s to the end of the drain. Largest metric families after the "+
			"drain: %s (alone: %s).", rate(b.later.OtherRequests, b.drained.OtherRequests, b.later.At, b.drained.At), hostileSettle,
			b.drained.TopFamilies, a.later.TopFamilies),
		fmt.Sprintf("Secret watches are the API server's `apiserver_longrunning_requests{resource=\"secrets\",verb=\"WATCH\"}` without "+
			"its cluster-wide one (by scope after the drain: %s; alone: %s): the controller exports no count of its own. "+
			"Sampled every 2 s from the warm-up builder's Ready to the end, at most: goroutines %s beside (%s alone), metric "+
			"series %d (%d).", b.drained.WatchScopes, a.later.WatchScopes, count(b.maxGo), count(a.maxGo), b.maxSeries, a.maxSeries),
		fmt.Sprintf("The reconciles asked of the signing builders (values 1 … %d): `lastHandledReconcileAt` %s after the last was asked: %s "+
			"(they wait their turn in the hostile tenant's queue, behind its other builders).", cfg.requeues,
			b.requeueWait.Round(time.Second), strings.Join(b.acknowledged, ", ")),
		fmt.Sprintf("Go memory (the heap profile's runtime statistics), %s after Ready: heap allocated %s alone, %s beside; goroutine "+
			"stacks %s and %s; all the runtime holds (Sys) %s and %s. At the end beside: heap %s, stacks %s, Sys %s. Peak RSS added "+
			"per hostile builder: %s (no `GOMEMLIMIT` here: the heap may grow to twice what is live before a collection).", hostileSettle,
			mib(a.heapLater.HeapAlloc), mib(b.heapLater.HeapAlloc), mib(a.heapLater.StackInuse), mib(b.heapLater.StackInuse),
			mib(a.heapLater.Sys), mib(b.heapLater.Sys), mib(b.heapEnd.HeapAlloc), mib(b.heapEnd.StackInuse), mib(b.heapEnd.Sys),
			mib((medianInt(peaks(beside, false))-rssAlone)/int64(cfg.objects()))))
	if len(alone) > 1 {
		s.notes = append(s.notes, fmt.Sprintf("Peak RSS of every run: alone %s, beside %s.", mibs(peaks(alone, false)), mibs(peaks(beside, false))))
	}
	return s
}

// scryptBytes renders what the heap profile saw allocated under scrypt.
func scryptBytes(h heapFacts) string {
	if !h.ok {
		return "? (no heap profile)"
	}
	return fmt.Sprintf("%s (largest at once %s)", mib(h.ScryptAlloc), mib(h.ScryptLargest))
}

// rate is how fast a counter went from a (at ta) to b (at tb), a second.
func rate(a, b int64, ta, tb time.Time) float64 {
	if d := tb.Sub(ta).Seconds(); d > 0 {
		return float64(b-a) / d
	}
	return 0
}

// thousands renders n with a comma every three digits.
func thousands(n int) string {
	d := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func setupTimes(rs []hostileResult) (ds []time.Duration) {
	for _, r := range rs {
		ds = append(ds, r.setup)
	}
	return ds
}

// count renders a count, "?" when unknown.
func count(n int64) string {
	if n < 0 {
		return "?"
	}
	return strconv.FormatInt(n, 10)
}

func mibs(ns []int64) string {
	var parts []string
	for _, n := range ns {
		parts = append(parts, mib(n))
	}
	return strings.Join(parts, ", ")
}

// reasonCounts renders counts by reason, largest first.
func reasonCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, e := range sortedCounts(m) {
		parts = append(parts, fmt.Sprintf("%s %d", e.k, e.v))
	}
	return strings.Join(parts, ", ")
}
