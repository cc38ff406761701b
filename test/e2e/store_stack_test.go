package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestStoreAndStackRecoverFromRegistryOutage: a store and a stack go Ready;
// while the registry refuses connections a changed store reports it and
// keeps its last good buildpacks; when the registry is back, the store is
// Ready again within seconds, woken by the registry's health probe rather
// than its backoff.
func TestStoreAndStackRecoverFromRegistryOutage(t *testing.T) {
	ctx := context.Background()
	f := registrytest.New(t)
	f.PushBuildpackage("bp/go:1", registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"})
	f.PushBuildpackage("bp/node:1", registrytest.Buildpack{ID: "example/node", Version: "2.0.0", API: "0.11"})
	stackLabels := map[string]string{"io.buildpacks.stack.id": "io.buildpacks.stacks.jammy"}
	f.PushImage("stack/build:1", stackLabels, "CNB_USER_ID=1000", "CNB_GROUP_ID=1000")
	f.PushImage("stack/run:1", stackLabels)

	// A long backoff: recovery within seconds can only come from the health
	// wake-up.
	startController(t, "--retry-base-delay", "30s", "--retry-max-delay", "5m")

	storeStack{Addr: f.Addr, Name: "outage", Buildpackages: []string{"bp/go:1"}, StackID: "io.buildpacks.stacks.jammy"}.create(t)
	stores := client.BuildsmithV1alpha1().ClusterStores()
	stacks := client.BuildsmithV1alpha1().ClusterStacks()

	eventually(t, 30*time.Second, "store and stack Ready", func() (bool, string) {
		s, err1 := stores.Get(ctx, "outage", metav1.GetOptions{})
		k, err2 := stacks.Get(ctx, "outage", metav1.GetOptions{})
		if err1 != nil || err2 != nil {
			return false, fmt.Sprint(err1, err2)
		}
		return s.Status.IsReady() && k.Status.IsReady() && kstatusOf(t, s) == status.CurrentStatus,
			fmt.Sprintf("store %+v, stack %+v", s.Status.Conditions, k.Status.Conditions)
	})
	store, _ := stores.Get(ctx, "outage", metav1.GetOptions{})
	goodBuildpacks := store.Status.Buildpacks
	if len(goodBuildpacks) != 1 || goodBuildpacks[0].ID != "example/go" {
		t.Fatalf("buildpacks = %+v", goodBuildpacks)
	}

	f.Down()
	store.Spec.Sources = append(store.Spec.Sources, v1alpha1.ImageSource{Image: f.Addr + "/bp/node:1"})
	if _, err := stores.Update(ctx, store, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "store reports the outage", func() (bool, string) {
		s, err := stores.Get(ctx, "outage", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := s.Status.GetCondition(v1alpha1.ConditionReady)
		reconciling := s.Status.GetCondition(v1alpha1.ConditionReconciling)
		return s.Status.ObservedGeneration == s.Generation && ready != nil && ready.IsFalse() &&
				ready.Reason == "RegistryUnavailable" && reconciling != nil && reconciling.IsTrue(),
			fmt.Sprintf("%+v", s.Status.Conditions)
	})
	store, _ = stores.Get(ctx, "outage", metav1.GetOptions{})
	if len(store.Status.Buildpacks) != 1 || store.Status.Buildpacks[0].DiffID != goodBuildpacks[0].DiffID {
		t.Errorf("buildpacks during the outage = %+v, want the last good list kept", store.Status.Buildpacks)
	}
	if got := kstatusOf(t, store); got != status.InProgressStatus {
		t.Errorf("kstatus during the outage: %s", got)
	}

	// An outage, not a blip; and no hot loop during it: the store waits
	// on the registry's circuit, whose probe alone talks to the registry,
	// so it is reconciled (and its status written) at most once more in
	// 2s. A status write must not requeue its own object.
	versions := map[string]bool{}
	for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(20 * time.Millisecond) {
		s, err := stores.Get(ctx, "outage", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		versions[s.ResourceVersion] = true
	}
	if writes := len(versions) - 1; writes > 1 {
		t.Errorf("%d status writes in 2s of outage: a hot loop", writes)
	}
	last, _ := stores.Get(ctx, "outage", metav1.GetOptions{})
	if c := last.Status.GetCondition(v1alpha1.ConditionReconciling); c == nil {
		t.Error("no Reconciling condition during the outage")
	} else if want := "retrying when " + f.Addr + " answers again"; !strings.HasPrefix(c.Message, want) {
		t.Errorf("Reconciling %q during the outage, want %q…", c.Message, want)
	}
	f.Up()
	took := eventually(t, 5*time.Second, "store Ready after the registry recovered", func() (bool, string) {
		s, err := stores.Get(ctx, "outage", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return s.Status.IsReady() && len(s.Status.Buildpacks) == 2, fmt.Sprintf("%+v", s.Status.Conditions)
	})
	t.Logf("Ready %v after the registry came back (its backoff would have been 30s+)", took.Round(10*time.Millisecond))
}

func kstatusOf(t *testing.T, obj runtime.Object) status.Status {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: u})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}
