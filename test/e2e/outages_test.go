package e2e

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestOutagesRecoverWithinSeconds: the distribution registry fails in one
// way for 80 s (E2E_OUTAGE) — 503 from everything, a hang (connections
// accepted, nothing answered), or 503 from the builders' repositories only
// while /v2/ and the store's and stack's repositories answer. The objects
// are asked to reconcile as the outage starts, so they meet it. The
// controller runs with its default flags: no resync during the outage, and
// a backoff doubling from 1 s whose retries (jittered ±20 %) fall 50-76 s
// and 101-153 s after the first failure — never within 10 s after an 80 s
// outage, so only the circuits can make everything Ready that soon.
// Throughout, what the objects found before is kept, and nothing says
// Stalled; a builder created during the outage says why it waits within
// seconds; nothing is pushed twice.
func TestOutagesRecoverWithinSeconds(t *testing.T) {
	outage := 80 * time.Second
	if v := os.Getenv("E2E_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("E2E_OUTAGE: %v", err)
		}
		outage = d
	}
	unavailable := registrytest.Answer(503, nil, registrytest.OCIError("UNAVAILABLE", "maintenance"))
	for _, tc := range []struct {
		name string
		// fault starts the outage on w's registry proxy.
		fault func(w *faultWorld)
		// storeAndStack: whether the store and stack meet the outage.
		storeAndStack bool
	}{
		{"503", func(w *faultWorld) { w.f.Inject("", "/v2/", -1, unavailable) }, true},
		{"hang", func(w *faultWorld) { w.f.Inject("", "", -1, w.f.Hang) }, true},
		{"503-builders-only", func(w *faultWorld) { w.f.Inject("", "/v2/builders/", -1, unavailable) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newFaultWorld(t, "outage-"+tc.name)
			startController(t)
			w.apply(t)
			w.waitReady(t, 60*time.Second)
			good, _ := w.status(t)
			pushes := w.f.Count("PUT", "/builders/"+w.name+"/manifests/")

			tc.fault(w)
			started := time.Now()
			w.requestReconcile(t, "clusterstore/"+w.name, "clusterstack/"+w.name, "builder/"+w.name)
			late := w.name + "-late"
			w.createBuilder(t, late)
			took := eventually(t, 20*time.Second, "the builder created during the outage to say why it waits", func() (bool, string) {
				b, err := client.BuildsmithV1alpha1().Builders(w.ns).Get(context.Background(), late, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				ready := b.Status.GetCondition(v1alpha1.ConditionReady)
				reconciling := b.Status.GetCondition(v1alpha1.ConditionReconciling)
				// It meets the outage itself, or first sees its stack or
				// store not Ready (they met it first).
				knows := ready != nil && (ready.Reason == "RegistryUnavailable" || ready.Reason == "StackNotReady" || ready.Reason == "StoreNotReady")
				return knows && reconciling != nil && reconciling.IsTrue(),
					fmt.Sprintf("%+v", b.Status.Conditions)
			})
			t.Logf("the builder created during the outage reported it after %v", took.Round(100*time.Millisecond))

			for time.Since(started) < outage {
				now, reasons := w.status(t)
				if !reflect.DeepEqual(now, good) {
					t.Fatalf("status changed during the outage:\nbefore %+v\nnow    %+v", good, now)
				}
				if !tc.storeAndStack && (reasons[0] != "" || reasons[1] != "") {
					t.Fatalf("the store or stack, whose repositories answer, are not Ready: %q", reasons)
				}
				time.Sleep(2 * time.Second)
			}
			// The builder says what it meets first: the outage, or (when
			// they meet it too) its stack or store not Ready.
			_, reasons := w.status(t)
			builderKnows := slices.Contains([]string{"RegistryUnavailable", "StackNotReady", "StoreNotReady"}, reasons[2])
			storeAndStack := [2]string{"", ""}
			if tc.storeAndStack {
				storeAndStack = [2]string{"RegistryUnavailable", "RegistryUnavailable"}
			}
			if [2]string{reasons[0], reasons[1]} != storeAndStack || !builderKnows {
				t.Errorf("reasons of store, stack, builder at the end of the outage: %q, want store and stack %q, the builder's the outage's",
					reasons, storeAndStack)
			}
			w.notStalled(t, late)

			w.f.ClearFaults()
			ended := time.Now()
			// With backoffs of up to 5 minutes, only the circuits' probes
			// bring everything back this soon.
			wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=10s",
				"clusterstore/"+w.name, "clusterstack/"+w.name, "-n", w.ns, "builder/"+w.name, "builder/"+late)
			if out, err := wait.CombinedOutput(); err != nil {
				t.Fatalf("not Ready 10s after the outage: %v\n%s", err, out)
			}
			t.Logf("all Ready %v after the outage ended", time.Since(ended).Round(100*time.Millisecond))
			if now, _ := w.status(t); !reflect.DeepEqual(now, good) {
				t.Errorf("status after recovery differs:\nbefore %+v\nafter  %+v", good, now)
			}
			if n := w.f.Count("PUT", "/builders/"+w.name+"/manifests/"); n != pushes {
				t.Errorf("the builder Ready before the outage was pushed %d more times", n-pushes)
			}
			if n := w.f.Count("PUT", "/builders/"+late+"/manifests/"); n != 1 {
				t.Errorf("the builder created during the outage was pushed %d times, want 1", n)
			}
		})
	}
}

// createBuilder creates a builder over the world's store and stack, with a
// tag of its own.
func (w *faultWorld) createBuilder(t *testing.T, name string) {
	t.Helper()
	w.objects.createBuilder(t, w.ns, name, v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder()}})
}

// requestReconcile asks for a reconcile of each object now, as a user would
// with kubectl annotate (or kubectl buildsmith reconcile).
func (w *faultWorld) requestReconcile(t *testing.T, objects ...string) {
	t.Helper()
	at := time.Now().UTC().Format(time.RFC3339Nano)
	args := append([]string{"annotate", "--overwrite", "-n", w.ns}, objects...)
	if out, err := env.Kubectl(append(args, v1alpha1.ReconcileRequestedAtAnnotation+"="+at)...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl annotate: %v\n%s", err, out)
	}
}

// notStalled fails the test when the store, the stack, the builder or any
// of the extra builders says Stalled=True: an outage is never a reason to
// give up.
func (w *faultWorld) notStalled(t *testing.T, builders ...string) {
	t.Helper()
	ctx := context.Background()
	bs := client.BuildsmithV1alpha1()
	statuses := map[string]*v1alpha1.ConditionedStatus{}
	if store, err := bs.ClusterStores().Get(ctx, w.name, metav1.GetOptions{}); err == nil {
		statuses["clusterstore/"+w.name] = &store.Status.ConditionedStatus
	}
	if stack, err := bs.ClusterStacks().Get(ctx, w.name, metav1.GetOptions{}); err == nil {
		statuses["clusterstack/"+w.name] = &stack.Status.ConditionedStatus
	}
	for _, name := range append([]string{w.name}, builders...) {
		if b, err := bs.Builders(w.ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			statuses["builder/"+name] = &b.Status.ConditionedStatus
		}
	}
	if len(statuses) != 3+len(builders) {
		t.Fatalf("read %d of %d objects", len(statuses), 3+len(builders))
	}
	for object, s := range statuses {
		if c := s.GetCondition(v1alpha1.ConditionStalled); c != nil && c.IsTrue() {
			t.Errorf("%s is Stalled during an outage: %s: %s", object, c.Reason, c.Message)
		}
	}
}
