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
// way for a minute (E2E_OUTAGE) — 503 from everything, a hang (connections
// accepted, nothing answered), or 503 from the builders' repositories only
// while /v2/ and the store's and stack's repositories answer. The
// controller runs with its default backoff (up to 5 minutes), so only the
// circuits can make recovery quick. Throughout, what the objects found
// before is kept; a builder created during the outage says why it waits
// within seconds; after the outage every object is Ready within seconds,
// and nothing is pushed twice.
func TestOutagesRecoverWithinSeconds(t *testing.T) {
	outage := time.Minute
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
			startController(t, "--resync-interval", "2s")
			w.apply(t)
			w.waitReady(t, 60*time.Second)
			good, _ := w.status(t)
			pushes := w.f.Count("PUT", "/builders/"+w.name+"/manifests/")

			tc.fault(w)
			started := time.Now()
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
				// store not Ready (they meet it at their 2 s resync).
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
			if _, reasons := w.status(t); tc.storeAndStack && (reasons[0] != "RegistryUnavailable" || reasons[1] != "RegistryUnavailable") {
				t.Errorf("reasons of store, stack, builder at the end of the outage: %q", reasons)
			}

			w.f.ClearFaults()
			ended := time.Now()
			// With backoffs of up to 5 minutes, only the circuits' probes
			// bring everything back this soon.
			wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=20s",
				"clusterstore/"+w.name, "clusterstack/"+w.name, "-n", w.ns, "builder/"+w.name, "builder/"+late)
			if out, err := wait.CombinedOutput(); err != nil {
				t.Fatalf("not Ready 20s after the outage: %v\n%s", err, out)
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
	if _, err := client.BuildsmithV1alpha1().Builders(w.ns).Create(context.Background(), &v1alpha1.Builder{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
			Tag: w.f.Addr + "/builders/" + name + ":latest", Stack: v1alpha1.StackRef{Name: w.name}, Store: v1alpha1.StoreRef{Name: w.name},
			Order: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/hello"}}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
