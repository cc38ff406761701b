package e2e

import (
	"context"
	"fmt"
	"os"
	"reflect"
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
// outage, so only the circuits can bring everything back that soon.
// Throughout, the objects that were Ready stay Ready with what they found
// (issue 26: an outage that changed nothing takes nothing usable away),
// saying within 15 s in UpToDate=False what their re-check met; nothing
// says Stalled; a builder created during the outage says why it waits
// within 15 s; nothing is pushed twice.
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
			good, _, _ := w.status(t)
			goodSince := w.readySince(t)
			pushes := w.f.Count("PUT", "/builders/"+w.name+"/manifests/latest")

			// What the re-checks must say: the builder meets the outage
			// itself (its stack and store stay Ready, so it never waits
			// on them); the store and stack only when theirs.
			want := [3]string{"", "", "RegistryUnavailable"}
			if tc.storeAndStack {
				want = [3]string{"RegistryUnavailable", "RegistryUnavailable", "RegistryUnavailable"}
			}
			// usable fails the test when an object that was Ready is not,
			// or its status changed, and returns the UpToDate reasons.
			usable := func() [3]string {
				now, ready, upToDate := w.status(t)
				if ready != [3]string{} {
					t.Fatalf("left Ready during the outage: Ready reasons of store, stack, builder %q (UpToDate %q)", ready, upToDate)
				}
				if !reflect.DeepEqual(now, good) {
					t.Fatalf("status changed during the outage:\nbefore %+v\nnow    %+v", good, now)
				}
				return upToDate
			}

			tc.fault(w)
			started := time.Now()
			w.requestReconcile(t, "clusterstore/"+w.name, "clusterstack/"+w.name, "builder/"+w.name)
			late := w.name + "-late"
			w.createBuilder(t, late)
			took := eventually(t, 15*time.Second, "the re-checked objects to say what they met, Ready all along", func() (bool, string) {
				upToDate := usable()
				return upToDate == want, fmt.Sprintf("UpToDate reasons of store, stack, builder %q, want %q", upToDate, want)
			})
			t.Logf("the re-checked objects reported the outage in UpToDate after %v", took.Round(100*time.Millisecond))
			took = eventually(t, 15*time.Second, "the builder created during the outage to say why it waits", func() (bool, string) {
				b, err := client.BuildsmithV1alpha1().Builders(w.ns).Get(context.Background(), late, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				ready := b.Status.GetCondition(v1alpha1.ConditionReady)
				reconciling := b.Status.GetCondition(v1alpha1.ConditionReconciling)
				return ready != nil && ready.IsFalse() && ready.Reason == "RegistryUnavailable" && reconciling != nil && reconciling.IsTrue(),
					fmt.Sprintf("%+v", b.Status.Conditions)
			})
			t.Logf("the builder created during the outage reported it %v after it was created", took.Round(100*time.Millisecond))

			for time.Since(started) < outage {
				if upToDate := usable(); upToDate != want {
					t.Fatalf("UpToDate reasons of store, stack, builder %q during the outage, want %q", upToDate, want)
				}
				time.Sleep(2 * time.Second)
			}
			w.notStalled(t, late)

			w.f.ClearFaults()
			ended := time.Now()
			// With backoffs of up to 5 minutes, only the circuits' probes
			// bring everything back within 10 s: that is what this checks.
			// How soon they do (issue 26's 5 s) is a figure, measured by
			// bench §§ 6 and 7 on a quiet machine, not asserted here, where
			// a busy one made a 5 s bound fail now and then.
			w.waitUpToDate(t, 10*time.Second)
			t.Logf("all up to date %v after the outage ended", time.Since(ended).Round(100*time.Millisecond))
			wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=10s", "-n", w.ns, "builder/"+late)
			if out, err := wait.CombinedOutput(); err != nil {
				t.Fatalf("the builder created during the outage not Ready 10s after it: %v\n%s", err, out)
			}
			t.Logf("all Ready and up to date %v after the outage ended", time.Since(ended).Round(100*time.Millisecond))
			if now, _, _ := w.status(t); !reflect.DeepEqual(now, good) {
				t.Errorf("status after recovery differs:\nbefore %+v\nafter  %+v", good, now)
			}
			if n := w.f.Count("PUT", "/builders/"+w.name+"/manifests/latest"); n != pushes {
				t.Errorf("the builder Ready before the outage was pushed %d more times", n-pushes)
			}
			if since := w.readySince(t); since != goodSince {
				t.Errorf("Ready changed during the outage and back (last transitions %v, before %v)", since, goodSince)
			}
			if n := w.f.Count("PUT", "/builders/"+late+"/manifests/latest"); n != 1 {
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
