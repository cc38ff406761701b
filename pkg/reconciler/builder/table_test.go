package builder

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/pkg/controller"
	pkgtesting "knative.dev/pkg/reconciler/testing"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

// TestTable runs knative's TableTest: every status update and event of a
// reconcile, to the letter, for a row of each failure class. (Success, with
// its digests, is checked in TestBuilderReadyAndThenNoRedundantWork.)
func TestTable(t *testing.T) {
	x := newFixture(t)
	x.f.Inject("PUT", "/builders/failing/manifests/", -1, registrytest.Answer(503, nil, ""))
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "apps"}}
	failed := func(mutate func(*v1alpha1.Builder), status func(*v1alpha1.BuilderStatus)) *v1alpha1.Builder {
		b := x.builder(mutate)
		if status != nil {
			b.Status.ObservedGeneration = 1
			status(&b.Status)
		}
		return b
	}
	missingStack := func(b *v1alpha1.Builder) { b.Spec.Stack.Name = "bionic" }
	unknownBuildpack := func(b *v1alpha1.Builder) {
		b.Spec.Order = []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/ruby"}}}}
	}
	failingTag := func(b *v1alpha1.Builder) { b.Spec.Tag = x.f.Addr + "/builders/failing:latest" }
	const noLifecycle = `the ConfigMap lifecycle-image (key "image") in the controller's namespace names no lifecycle image`
	pushFailed := fmt.Sprintf("PUT http://%s/v2/builders/failing/manifests/latest: unexpected status code 503 Service Unavailable", x.f.Addr)
	withLifecycle := map[string]any{"lifecycle": x.f.Addr + "/lifecycle:0.21.0"}

	rows := pkgtesting.TableTest{{
		Name:          "waiting: stack missing",
		Key:           "apps/go",
		Objects:       []runtime.Object{x.builder(missingStack), x.stack, x.store, account},
		OtherTestData: withLifecycle,
		WantErr:       true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: failed(missingStack, func(s *v1alpha1.BuilderStatus) {
			s.MarkRetrying(ReasonStackNotReady, "ClusterStack bionic not found", "retrying in 1m0s, or when a dependency changes")
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, ReasonStackNotReady, "ClusterStack bionic not found")},
	}, {
		Name:    "waiting: no lifecycle configured",
		Key:     "apps/go",
		Objects: []runtime.Object{x.builder(nil), x.stack, x.store, account},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: failed(nil, func(s *v1alpha1.BuilderStatus) {
			s.MarkRetrying(ReasonLifecycleNotConfigured, noLifecycle, "retrying in 1m0s, or when a dependency changes")
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, ReasonLifecycleNotConfigured, "%s", noLifecycle)},
	}, {
		Name:          "permanent: buildpack not in the store",
		Key:           "apps/go",
		Objects:       []runtime.Object{x.builder(unknownBuildpack), x.stack, x.store, account},
		OtherTestData: withLifecycle,
		WantErr:       true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: failed(unknownBuildpack, func(s *v1alpha1.BuilderStatus) {
			s.MarkStalled(cnb.ReasonBuildpackNotFound, "buildpack example/ruby is not in the store")
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, cnb.ReasonBuildpackNotFound, "buildpack example/ruby is not in the store")},
	}, {
		Name:          "transient: the push is refused, nothing tagged",
		Key:           "apps/go",
		Objects:       []runtime.Object{x.builder(failingTag), x.stack, x.store, account},
		OtherTestData: withLifecycle,
		WantErr:       true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: failed(failingTag, func(s *v1alpha1.BuilderStatus) {
			s.MarkRetrying(registry.ReasonRegistryUnavailable, pushFailed, reconciler.WaitingMessage(registry.Place{Host: x.f.Addr, Repository: "builders/failing"}, 5*time.Minute))
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, registry.ReasonRegistryUnavailable, "%s", pushFailed)},
	}}
	rows.Test(t, func(t *testing.T, row *pkgtesting.TableRow) (controller.Reconciler, pkgtesting.ActionRecorderList, pkgtesting.EventList) {
		ctx, clients := rt.Setup(t, row.Objects...)
		ref, _ := row.OtherTestData["lifecycle"].(string)
		x.lifecycle = NewLifecycleSource(time.Hour) // each row resolves the lifecycle afresh
		rec := rt.Sync(x.builderController(ctx, ref))
		return rec, pkgtesting.ActionRecorderList{clients.Buildsmith}, pkgtesting.EventList{Recorder: clients.Recorder}
	})
}
