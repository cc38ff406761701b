package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/localhost"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestBlip is scenario 14 (issue 26, "a blip never takes a usable builder
// away"): BENCH_BLIP_N (default 1000) builders over BENCH_BLIP_NAMESPACES
// (100) namespaces, one store and one stack, all Ready; then every registry
// request fails for BENCH_BLIP_FAULT (60s) — answered 503 in one run, left
// hanging in another — while the store, the stack and every builder are
// asked to reconcile. BENCH_BLIP_RUNS (1) runs per fault, each with its own
// registry and controller.
func TestBlip(t *testing.T) {
	if !full {
		t.Skip("BENCH=1")
	}
	n := envInt("BENCH_BLIP_N", 1000)
	namespaces := min(envInt("BENCH_BLIP_NAMESPACES", 100), max(n/2, 1))
	fault := envDuration("BENCH_BLIP_FAULT", 60*time.Second)
	runs := envInt("BENCH_BLIP_RUNS", 1)
	var rs []blipResult
	for _, rf := range registryFaults[:2] { // 503 and hang, of the whole registry
		for i := range runs {
			t.Run(fmt.Sprintf("%s/%v/run%d", rf.name, fault, i+1), func(t *testing.T) {
				r := blipRun(t, rf, n, namespaces, fault)
				r.run = i + 1
				rs = append(rs, r)
			})
		}
	}
	s := &section{title: fmt.Sprintf("14. A blip: %d Ready builders, their store and stack re-checked while the registry fails", n),
		what: fmt.Sprintf("%d builders in %d namespaces over one store and one stack, all Ready (fresh controller with default flags, "+
			"and registry, per run); then every request to the registry fails (503, or no answer at all) for %v. Right after the "+
			"fault starts, the store, the stack and every builder are annotated with `%s` (a re-check of each, as a resync would "+
			"be). All objects are listed every %v from then until every one is `UpToDate=True` again; an object \"left Ready\" "+
			"when one list showed its `Ready` other than True. Ready events: `Ready` events (an object becoming Ready again) "+
			"recorded from the fault's start until recovery, which a flip shorter than a list interval would leave too. "+
			"Requests: those reaching the registry during the fault. Manifest PUTs: from the fault's start until recovery and "+
			"a second after.", n, namespaces, fault, v1alpha1.ReconcileRequestedAtAnnotation, blipPollInterval),
		header: []string{"fault, run", "objects", "left Ready=True during the fault (after it)", "UpToDate=False seen during the fault (all by)",
			"Reconciling seen", "Ready events", "all UpToDate=True after the fault", "requests/s during", "manifest PUTs", "lists (longest gap)"}}
	okReady, okChecked, okRecovered, okLoad, okPuts, okCurrent := true, true, true, true, true, true
	var recovered []time.Duration
	for _, r := range rs {
		perSecond := float64(r.requests) / r.fault.Seconds()
		allStale := "not all"
		if r.stale == r.objects {
			allStale = fmt.Sprintf("all by %s", r.allStale.Round(100*time.Millisecond))
		}
		rec := r.recovered.Round(100 * time.Millisecond).String()
		if !r.upToDate {
			rec = fmt.Sprintf("not in %s (%d not UpToDate)", r.recovered.Round(time.Second), r.notUpToDate)
		} else {
			recovered = append(recovered, r.recovered)
		}
		s.rows = append(s.rows, []string{fmt.Sprintf("%s, %v, %d", r.faultName, r.fault, r.run), fmt.Sprint(r.objects),
			fmt.Sprintf("%d (%d)", r.leftDuring, r.leftAfter), fmt.Sprintf("%d (%s)", r.stale, allStale),
			fmt.Sprint(r.reconciling), fmt.Sprint(r.readyEvents), rec, fmt.Sprintf("%.2f", perSecond),
			fmt.Sprint(r.manifestPuts), fmt.Sprintf("%d (%s)", r.polls, r.maxGap.Round(10*time.Millisecond))})
		s.notes = append(s.notes, fmt.Sprintf("%s, run %d: all %d builders Ready in %s before the fault; asking every object to "+
			"reconcile took %s; requests during the fault by kind: %s; at the fault's end %d objects were UpToDate=False; "+
			"UpToDate=True again: %s.",
			r.faultName, r.run, r.n, r.setup.Round(100*time.Millisecond), r.asked.Round(100*time.Millisecond), kinds(r.byKind),
			r.staleAtEnd, r.curve()))
		okReady = okReady && r.leftDuring == 0 && r.leftAfter == 0 && r.readyEvents == 0
		okChecked = okChecked && r.stale == r.objects
		okRecovered = okRecovered && r.upToDate && r.recovered <= 5*time.Second
		okLoad = okLoad && perSecond <= 3
		okPuts = okPuts && r.manifestPuts == 0
		okCurrent = okCurrent && r.reconciling == 0
	}
	s.targets = []target{
		{"objects that left Ready=True during the fault (and the recovery; Ready events)", "0", rowsCol(s.rows, 2) + "; events " + rowsCol(s.rows, 5), okReady},
		{"objects re-checked during the fault (UpToDate=False seen): the scenario tested something", "every object", rowsCol(s.rows, 3), okChecked},
		{"every object UpToDate=True after the fault ends", "≤ 5 s", rowsCol(s.rows, 6), okRecovered},
		{"registry requests per second during the fault", "≤ 3/s", rowsCol(s.rows, 7), okLoad},
		{"manifest PUTs during the fault and the recovery", "0", rowsCol(s.rows, 8), okPuts},
		{"objects showing Reconciling during the fault (kstatus stays Current)", "0", rowsCol(s.rows, 4), okCurrent},
	}
	if len(recovered) > 1 {
		s.notes = append(s.notes, "UpToDate=True after the fault, all runs: "+seconds(recovered))
	}
	addSection(s)
}

// blipPollInterval is how often every object is listed: a list of 1,000
// builders costs the API server and the bench a good part of a core, which
// the controller's recovery shares.
const blipPollInterval = 500 * time.Millisecond

type blipResult struct {
	faultName string
	run, n    int
	objects   int // builders, store and stack
	fault     time.Duration
	setup     time.Duration // first create → all Ready
	asked     time.Duration // annotating every object

	leftDuring, leftAfter int           // objects a list showed not Ready=True, during the fault and after it
	stale                 int           // objects a list showed UpToDate=False during the fault
	allStale              time.Duration // fault start → every object seen UpToDate=False
	staleAtEnd            int           // UpToDate=False in the last list of the fault
	reconciling           int           // objects a list showed Reconciling=True during the fault
	readyEvents           int           // Ready events (becoming Ready again) from the fault's start to recovery
	recovered             time.Duration // fault end → every object UpToDate=True
	recovery              []blipPoint   // objects UpToDate=True in each list after the fault
	upToDate              bool
	notUpToDate           int
	polls                 int
	maxGap                time.Duration // between the starts of two lists

	requests     int // reaching the registry during the fault
	byKind       map[string]int
	manifestPuts int
}

// blipPoint is how many objects a list after the fault showed UpToDate=True,
// and when it answered.
type blipPoint struct {
	after    time.Duration
	upToDate int
}

// curve says by when 10, 50 and 90 % of the objects were UpToDate=True
// again: whether recovery waited on a wake-up (a late start) or on the
// reconciles themselves (a steady climb).
func (r blipResult) curve() string {
	var parts []string
	for _, pct := range []int{10, 50, 90} {
		for _, p := range r.recovery {
			if p.upToDate*100 >= pct*r.objects {
				parts = append(parts, fmt.Sprintf("%d %% by %s", pct, p.after.Round(100*time.Millisecond)))
				break
			}
		}
	}
	return strings.Join(parts, ", ")
}

// blipState is what the scenario reads of an object's conditions.
type blipState struct {
	ready, reconciling bool
	upToDate           string // "True", "False", "Unknown" or "" (none)
}

func blipStateOf(c *v1alpha1.ConditionedStatus, generation int64) blipState {
	s := blipState{ready: c.IsUsable(generation)}
	if r := c.GetCondition(v1alpha1.ConditionReconciling); r != nil && r.IsTrue() {
		s.reconciling = true
	}
	if u := c.GetCondition(v1alpha1.ConditionUpToDate); u != nil {
		s.upToDate = string(u.Status)
	}
	return s
}

// blipObjects lists the world's store and stack and the builders of its
// namespaces (prefix), by "kind/namespace/name".
func blipObjects(ctx context.Context, w *world, prefix string) (map[string]blipState, error) {
	bs := client.BuildsmithV1alpha1()
	out := map[string]blipState{}
	store, err := bs.ClusterStores().Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out["ClusterStore//"+w.name] = blipStateOf(&store.Status.ConditionedStatus, store.Generation)
	stack, err := bs.ClusterStacks().Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out["ClusterStack//"+w.name] = blipStateOf(&stack.Status.ConditionedStatus, stack.Generation)
	list, err := bs.Builders("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range list.Items {
		if strings.HasPrefix(b.Namespace, prefix) {
			out["Builder/"+b.Namespace+"/"+b.Name] = blipStateOf(&b.Status.ConditionedStatus, b.Generation)
		}
	}
	return out, nil
}

// blipRun: store, stack and n builders Ready; the registry fails for fault
// while every object is asked to reconcile; then until every object is
// UpToDate=True again.
func blipRun(t *testing.T, rf registryFault, n, namespaces int, fault time.Duration) blipResult {
	ctx := context.Background()
	r := blipResult{faultName: rf.name, n: n, objects: n + 2, fault: fault}
	f := registrytest.New(t)
	seed(t, f.Addr)
	startController(t)
	w := newWorld(t, f.Addr)
	w.waitStoreStackReady(t, 60*time.Second)
	prefix := w.name + "-t"
	start := time.Now()
	per := (n + namespaces - 1) / namespaces
	for k := range namespaces {
		from, to := k*per, min((k+1)*per, n)
		if from >= to {
			break
		}
		w.inNamespace(t, fmt.Sprintf("%s%03d", prefix, k), f.Addr).createBuilders(t, from, to, w.order())
	}
	// Usable and up to date: what a blip must not take away.
	if _, err := localhost.Poll(ctx, max(2*time.Minute, time.Duration(n)*100*time.Millisecond), 2*time.Second,
		"every object Ready and UpToDate", func() (bool, string) {
			objs, err := blipObjects(ctx, w, prefix)
			if err != nil {
				return false, err.Error()
			}
			good := 0
			for _, s := range objs {
				if s.ready && s.upToDate == "True" {
					good++
				}
			}
			return good == r.objects, fmt.Sprintf("%d/%d", good, r.objects)
		}); err != nil {
		t.Fatal(err)
	}
	r.setup = time.Since(start)
	// Each object's first Ready event is recorded after its status: wait
	// for them, so that only later ones count.
	readyBefore := waitReadyEvents(t, w, prefix, r.objects)
	time.Sleep(time.Second) // late requeues and status writes
	f.Traffic().Reset()

	// The fault, and a re-check of everything during it.
	rf.inject(f, func() {})
	faultStart := time.Now()
	var mu sync.Mutex
	faultEnd := time.Time{} // zero while the fault lasts
	done := make(chan struct{})
	seenLeft, seenStale, seenReconciling := map[string]bool{}, map[string]bool{}, map[string]bool{}
	go func() {
		defer close(done)
		var last time.Time
		for {
			at := time.Now()
			mu.Lock()
			end := faultEnd
			mu.Unlock()
			if !end.IsZero() && time.Since(end) > 3*time.Minute {
				return
			}
			objs, err := blipObjects(ctx, w, prefix)
			if err != nil {
				t.Log(err)
				time.Sleep(blipPollInterval)
				continue
			}
			returned := time.Since(faultStart)
			during := end.IsZero() || at.Before(end)
			r.polls++
			if !last.IsZero() {
				r.maxGap = max(r.maxGap, at.Sub(last))
			}
			last = at
			upToDate, stale := 0, 0
			for key, s := range objs {
				if !s.ready && !seenLeft[key] {
					seenLeft[key] = true
					if during {
						r.leftDuring++
					} else {
						r.leftAfter++
					}
				}
				if s.upToDate == "False" {
					stale++
					if during {
						seenStale[key] = true
					}
				}
				if s.reconciling && during {
					seenReconciling[key] = true
				}
				if s.ready && s.upToDate == "True" {
					upToDate++
				}
			}
			if during {
				r.staleAtEnd = stale
				if len(seenStale) == r.objects && r.allStale == 0 {
					r.allStale = returned
				}
			} else {
				// The list's answer, not its start: the time by which the
				// state was reached, at the latest.
				r.recovered, r.notUpToDate = time.Since(end), r.objects-upToDate
				r.recovery = append(r.recovery, blipPoint{r.recovered, upToDate})
				if upToDate == r.objects && len(objs) == r.objects {
					r.upToDate = true
					return
				}
			}
			time.Sleep(max(0, blipPollInterval-time.Since(at)))
		}
	}()

	asked := time.Now()
	requested := asked.UTC().Format(time.RFC3339Nano)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.ReconcileRequestedAtAnnotation, requested))
	bs := client.BuildsmithV1alpha1()
	// The store and stack first: a builder re-checked after them reads
	// them stale (still Ready).
	if _, err := bs.ClusterStores().Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.ClusterStacks().Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	requestBuilderReconciles(t, prefix, patch)
	r.asked = time.Since(asked)

	time.Sleep(fault - time.Since(faultStart))
	f.ClearFaults()
	mu.Lock()
	faultEnd = time.Now()
	mu.Unlock()
	<-done
	time.Sleep(time.Second) // a push after recovery would come now
	r.stale, r.reconciling = len(seenStale), len(seenReconciling)
	r.readyEvents = readyEventsSince(t, w, prefix, readyBefore)

	r.byKind = map[string]int{}
	for _, q := range f.Traffic().Requests() {
		if q.At.Before(faultEnd) {
			r.requests++
			r.byKind[q.Method+" "+q.Kind]++
		}
		if q.Kind == "manifest" && q.Method == http.MethodPut {
			r.manifestPuts++
		}
	}
	return r
}

// requestBuilderReconciles annotates every builder of the namespaces with
// prefix with patch, 16 at a time: kubectl annotate, one PATCH after the
// other, takes several seconds for 1,000 builders, most of a short fault.
func requestBuilderReconciles(t *testing.T, prefix string, patch []byte) {
	t.Helper()
	ctx := context.Background()
	list, err := client.BuildsmithV1alpha1().Builders("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan types.NamespacedName)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range next {
				if _, err := client.BuildsmithV1alpha1().Builders(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, b := range list.Items {
		if strings.HasPrefix(b.Namespace, prefix) {
			next <- types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
}

// readyEvents counts the Ready events (an object becoming Ready) of the
// world's store and stack and of the builders of its namespaces, by event
// (the API server folds repeats of one into its count).
func readyEvents(t *testing.T, w *world, prefix string) map[types.UID]int32 {
	t.Helper()
	list, err := kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Ready"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[types.UID]int32{}
	for _, e := range list.Items {
		o := e.InvolvedObject
		if o.Kind == "Builder" && strings.HasPrefix(o.Namespace, prefix) ||
			(o.Kind == "ClusterStore" || o.Kind == "ClusterStack") && o.Name == w.name {
			out[e.UID] = max(e.Count, 1)
		}
	}
	return out
}

// waitReadyEvents waits (30 s at most) until the objects' first Ready events
// are recorded, and returns the events.
func waitReadyEvents(t *testing.T, w *world, prefix string, objects int) map[types.UID]int32 {
	t.Helper()
	var events map[types.UID]int32
	_, _ = localhost.Poll(context.Background(), 30*time.Second, 500*time.Millisecond, "Ready events", func() (bool, string) {
		events = readyEvents(t, w, prefix)
		return len(events) >= objects, fmt.Sprintf("%d/%d", len(events), objects)
	})
	return events
}

// readyEventsSince counts the Ready events recorded since before.
func readyEventsSince(t *testing.T, w *world, prefix string, before map[types.UID]int32) int {
	t.Helper()
	n := 0
	for uid, count := range readyEvents(t, w, prefix) {
		n += int(count - before[uid])
	}
	return n
}
