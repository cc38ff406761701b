package reconciler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// builderIn is a Builder of namespace ns whose last reconcile ended with
// err (nil: Ready), through the Policy as the controller would.
func builderIn(t *testing.T, ns, name string, usable bool, err error) *v1alpha1.Builder {
	t.Helper()
	b := &v1alpha1.Builder{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1}}
	b.Status.ObservedGeneration = 1
	if usable {
		b.Status.MarkReady()
	}
	_ = NewPolicy("Builder", DefaultOptions(), nil, nil, nil).Finish(context.Background(), b, err)
	return b
}

func storeOf(t *testing.T, objects ...any) cache.Store {
	t.Helper()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, o := range objects {
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// TestCollectStates: every object a replica leads is reported with the
// state its conditions say, once; the others are left to their leader; over
// the bound the stalled go first, then the reconciling, the stale and the
// ready, and the counts still hold every object.
func TestCollectStates(t *testing.T) {
	transient := failure.Transientf(registry.ReasonRegistryUnavailable, "GET …: 503")
	builders := storeOf(t,
		builderIn(t, "team-a", "ready", true, nil),
		builderIn(t, "team-a", "stale", true, transient),
		builderIn(t, "team-a", "retrying", false, transient),
		builderIn(t, "team-b", "stalled", true, failure.Permanentf(ReasonInvalidSpec, "no such buildpack")),
		builderIn(t, "team-b", "waiting", false, failure.Waitingf(registry.ReasonImageNotFound, "gone")),
		builderIn(t, "team-c", "led-elsewhere", false, transient),
	)
	stack := newStack() // never reconciled: Ready Unknown
	kinds := []*kindStates{
		{kind: "Builder", store: builders, leads: func(k types.NamespacedName) bool { return k.Namespace != "team-c" }},
		{kind: "ClusterStack", store: storeOf(t, stack)},
	}

	series, counts := collect(kinds, 100)
	want := map[string]ObjectState{
		"Builder team-a/ready":    {StateReady, "True", ""},
		"Builder team-a/stale":    {StateStale, "True", registry.ReasonRegistryUnavailable},
		"Builder team-a/retrying": {StateReconciling, "False", registry.ReasonRegistryUnavailable},
		"Builder team-b/stalled":  {StateStalled, "False", ReasonInvalidSpec},
		"Builder team-b/waiting":  {StateReconciling, "False", registry.ReasonImageNotFound},
		"ClusterStack /s":         {StateReconciling, "Unknown", ""},
	}
	got := map[string]ObjectState{}
	for _, s := range series {
		got[fmt.Sprintf("%s %s", s.kind, s.key)] = s.ObjectState
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("series\n%v\nwant\n%v", got, want)
	}
	wantCounts := map[[2]string]int64{
		{"Builder", StateReady}: 1, {"Builder", StateStale}: 1, {"Builder", StateReconciling}: 2, {"Builder", StateStalled}: 1,
		{"ClusterStack", StateReconciling}: 1,
	}
	if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
		t.Errorf("counts %v, want %v", counts, wantCounts)
	}

	// Bound to 3: the stalled, then the reconciling by kind, namespace and
	// name; the counts are those of every object.
	series, bounded := collect(kinds, 3)
	var names []string
	for _, s := range series {
		names = append(names, s.key.String())
	}
	if want := []string{"team-b/stalled", "team-a/retrying", "team-b/waiting"}; !slices.Equal(names, want) {
		t.Errorf("bounded to 3: %v, want %v", names, want)
	}
	if fmt.Sprint(bounded) != fmt.Sprint(counts) {
		t.Errorf("bounded counts %v, want every object's %v", bounded, counts)
	}
}

// TestReportStatesUntilDone: a controller's kind is reported while its
// context lives, and its last reconcile is stamped by the Policy.
func TestReportStatesUntilDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	opts := DefaultOptions()
	k := reportStates(ctx, "ClusterStack", storeOf(t, newStack()), nil, opts)
	if k.gap != 12*time.Minute {
		t.Errorf("gap %s, want the resync interval with its jitter, 12m", k.gap)
	}
	p := NewPolicy("ClusterStack", opts, nil, nil, nil)
	p.states = k
	before := time.Now()
	p.Finish(context.Background(), newStack(), nil)
	if last := time.Unix(0, k.last.Load()); last.Before(before) {
		t.Errorf("last reconcile %s, want after %s", last, before)
	}
	objectStates.mu.Lock()
	reported := slices.Contains(objectStates.kinds, k)
	objectStates.mu.Unlock()
	if !reported {
		t.Fatal("the kind is not reported")
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		objectStates.mu.Lock()
		reported = slices.Contains(objectStates.kinds, k)
		objectStates.mu.Unlock()
		if !reported {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the kind is still reported after its controller's context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReconcileGapMax(t *testing.T) {
	for _, tc := range []struct {
		resync, retry, poll, want time.Duration
	}{
		{10 * time.Minute, 5 * time.Minute, time.Minute, 12 * time.Minute},
		{time.Minute, 5 * time.Minute, time.Minute, 6 * time.Minute}, // a failing object's retry is the longest
		{0, 5 * time.Minute, time.Minute, 0},                         // Ready objects are never reconciled again
	} {
		opts := Options{ResyncInterval: tc.resync, RetryMaxDelay: tc.retry, PollInterval: tc.poll}
		if got := reconcileGapMax(opts); got != tc.want {
			t.Errorf("reconcileGapMax(resync %s, retry %s, poll %s) = %s, want %s", tc.resync, tc.retry, tc.poll, got, tc.want)
		}
	}
}
