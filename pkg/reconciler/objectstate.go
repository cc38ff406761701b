package reconciler

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/apis"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// State metrics: what every object's conditions say now, read from the
// informers' caches when metrics are collected. Alerts written on them fire
// while an object is in a state and resolve when it leaves it, by namespace
// and name, whatever the controller's restarts; counters of reconcile
// outcomes can say neither (a Stalled object is reconciled once).
//
// Each replica reports the objects of the buckets it leads, so that every
// object is reported once in all.
var (
	objectInfo, _ = meter.Int64ObservableGauge("buildsmith.object.info",
		metric.WithDescription("1 for each object, by kind, object_namespace, name, state (ready, stale, reconciling or stalled), "+
			"ready (its Ready condition's status) and reason; the not Ready first, at most --metrics-max-objects series."))
	objectCounts, _ = meter.Int64ObservableGauge("buildsmith.objects",
		metric.WithDescription("Objects, by kind and state (ready, stale, reconciling or stalled), every one counted."))
	lastReconcile, _ = meter.Float64ObservableGauge("buildsmith.last.reconcile.time",
		metric.WithDescription("When a reconcile of the kind last ended (or the controller started), in seconds since the epoch."),
		metric.WithUnit("s"))
	reconcileGap, _ = meter.Float64ObservableGauge("buildsmith.reconcile.gap.max",
		metric.WithDescription("The longest an object that is not Stalled goes between reconciles while the controller works: "+
			"the resync interval, or the retry and poll delays if longer, jitter included (0: Ready objects are not resynced)."),
		metric.WithUnit("s"))
)

// States of objects, as kstatus reads them (buildsmith_object_info's
// state label).
const (
	StateReady       = "ready"       // Ready=True, UpToDate=True
	StateStale       = "stale"       // Ready=True, its re-check failed for a passing reason (UpToDate=False)
	StateReconciling = "reconciling" // not Ready, tried again by itself
	StateStalled     = "stalled"     // not Ready until someone changes something
)

// stateRank orders the states for --metrics-max-objects: what needs a
// person first.
var stateRank = map[string]int{StateStalled: 0, StateReconciling: 1, StateStale: 2, StateReady: 3}

// ObjectState is what an object's conditions say: its state, the status of
// its Ready condition, and the reason of the condition that explains the
// state (none for a ready object).
type ObjectState struct {
	State, Ready, Reason string
}

// StateOf reads obj's conditions.
func StateOf(obj Object) ObjectState {
	status := obj.Conditions()
	ready := string(cmp.Or(conditionStatus(status.GetCondition(v1alpha1.ConditionReady)), "Unknown"))
	if stalled := status.GetCondition(v1alpha1.ConditionStalled); stalled.IsTrue() {
		return ObjectState{StateStalled, ready, stalled.Reason}
	}
	if ready == "True" {
		if upToDate := status.GetCondition(v1alpha1.ConditionUpToDate); upToDate.IsFalse() {
			return ObjectState{StateStale, ready, upToDate.Reason}
		}
		return ObjectState{StateReady, ready, ""}
	}
	reason := ""
	if c := status.GetCondition(v1alpha1.ConditionReady); c != nil {
		reason = c.Reason
	}
	return ObjectState{StateReconciling, ready, reason}
}

func conditionStatus(c *apis.Condition) string {
	if c == nil {
		return ""
	}
	return string(c.Status)
}

// kindStates is one kind's part of the state metrics.
type kindStates struct {
	kind  string
	store cache.Store                     // the controller's cache of the kind
	leads func(types.NamespacedName) bool // whether this replica reconciles the object
	gap   time.Duration                   // buildsmith_reconcile_gap_max
	last  atomic.Int64                    // when a reconcile last ended, in Unix nanoseconds
}

func (k *kindStates) reconciled(now time.Time) {
	if k != nil {
		k.last.Store(now.UnixNano())
	}
}

// stateMetrics are the kinds whose states are reported, and the bound of
// buildsmith_object_info's series (--metrics-max-objects).
type stateMetrics struct {
	register sync.Once
	mu       sync.Mutex
	kinds    []*kindStates
	max      int
}

// objectStates is the process's: OpenTelemetry's instruments are global.
var objectStates stateMetrics

// reportStates adds a controller's kind to the state metrics until ctx is
// done: store is its informer's cache, leads whether this replica leads an
// object's bucket.
func reportStates(ctx context.Context, kind string, store cache.Store, leads func(types.NamespacedName) bool, opts Options) *kindStates {
	k := &kindStates{kind: kind, store: store, leads: leads, gap: reconcileGapMax(opts)}
	k.last.Store(time.Now().UnixNano())
	m := &objectStates
	m.register.Do(func() {
		_, err := meter.RegisterCallback(m.observe, objectInfo, objectCounts, lastReconcile, reconcileGap)
		if err != nil {
			panic(err) // the instruments above are this meter's: cannot fail
		}
	})
	m.mu.Lock()
	m.kinds = append(m.kinds, k)
	m.max = opts.MaxObjectSeries
	m.mu.Unlock()
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.kinds = slices.DeleteFunc(m.kinds, func(c *kindStates) bool { return c == k })
	})
	return k
}

// reconcileGapMax is the longest a reconcile of an object that is not
// Stalled waits while all is well: a Ready object's resync, a failed one's
// retry, a waiting one's poll, each jittered by up to 20 %. Without resyncs
// a Ready object is never reconciled again: 0.
func reconcileGapMax(opts Options) time.Duration {
	if opts.ResyncInterval <= 0 {
		return 0
	}
	return max(opts.ResyncInterval, opts.RetryMaxDelay, opts.PollInterval) * 6 / 5
}

// objectSeries is one series of buildsmith_object_info.
type objectSeries struct {
	kind string
	key  types.NamespacedName
	ObjectState
}

// collect reads the caches of kinds: every object this replica leads, the
// most urgent first when there are more than the bound, and the count of
// each kind's objects by state.
func collect(kinds []*kindStates, bound int) (series []objectSeries, counts map[[2]string]int64) {
	if bound <= 0 {
		bound = DefaultOptions().MaxObjectSeries
	}
	counts = map[[2]string]int64{}
	for _, k := range kinds {
		for _, item := range k.store.List() {
			obj, ok := item.(Object)
			if !ok {
				continue
			}
			key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
			if k.leads != nil && !k.leads(key) {
				continue
			}
			s := objectSeries{kind: k.kind, key: key, ObjectState: StateOf(obj)}
			counts[[2]string{k.kind, s.State}]++
			series = append(series, s)
		}
	}
	if len(series) > bound {
		slices.SortFunc(series, func(a, b objectSeries) int {
			return cmp.Or(cmp.Compare(stateRank[a.State], stateRank[b.State]), cmp.Compare(a.kind, b.kind),
				cmp.Compare(a.key.Namespace, b.key.Namespace), cmp.Compare(a.key.Name, b.key.Name))
		})
		series = series[:bound]
	}
	return series, counts
}

func (m *stateMetrics) observe(_ context.Context, o metric.Observer) error {
	m.mu.Lock()
	kinds, bound := slices.Clone(m.kinds), m.max
	m.mu.Unlock()
	series, counts := collect(kinds, bound)
	for _, s := range series {
		attrs := []attribute.KeyValue{attribute.String("kind", s.kind), attribute.String("name", s.key.Name),
			attribute.String("state", s.State), attribute.String("ready", s.Ready), attribute.String("reason", s.Reason)}
		if s.key.Namespace != "" {
			attrs = append(attrs, attribute.String("object_namespace", s.key.Namespace))
		}
		o.ObserveInt64(objectInfo, 1, metric.WithAttributes(attrs...))
	}
	for _, k := range kinds {
		kind := attribute.String("kind", k.kind)
		for _, state := range []string{StateReady, StateStale, StateReconciling, StateStalled} {
			o.ObserveInt64(objectCounts, counts[[2]string{k.kind, state}], metric.WithAttributes(kind, attribute.String("state", state)))
		}
		o.ObserveFloat64(lastReconcile, float64(k.last.Load())/1e9, metric.WithAttributes(kind))
		o.ObserveFloat64(reconcileGap, k.gap.Seconds(), metric.WithAttributes(kind))
	}
	return nil
}
