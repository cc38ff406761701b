package clusterstack

import (
	"time"

	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/pkg/configmap"
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
// reconcile, to the letter, for one row of each class.
func TestTable(t *testing.T) {
	f := registrytest.New(t)
	labels := map[string]string{cnb.LabelStackID: stackID}
	build := f.PushImage("stack/build:1", labels, stackEnv...)
	run := f.PushImage("stack/run:1", labels)
	f.PushImage("stack/run-other:1", map[string]string{cnb.LabelStackID: "other"})
	buildDigest, _ := build.Digest()
	runDigest, _ := run.Digest()
	f.Inject("", "/stack/run-503/manifests/", -1, registrytest.Answer(503, nil, ""))

	stack := func(runImage string, status func(*v1alpha1.ClusterStackStatus)) *v1alpha1.ClusterStack {
		s := &v1alpha1.ClusterStack{
			ObjectMeta: metav1.ObjectMeta{Name: "jammy", Generation: 1},
			Spec: v1alpha1.ClusterStackSpec{ID: stackID,
				BuildImage: v1alpha1.ImageSource{Image: f.Addr + "/stack/build:1"},
				RunImage:   v1alpha1.RunImageSource{Image: f.Addr + "/" + runImage}},
		}
		if status != nil {
			s.Status.ObservedGeneration = 1
			status(&s.Status)
		}
		return s
	}
	unavailable := fmt.Sprintf("GET http://%s/v2/stack/run-503/manifests/1: unexpected status code 503 Service Unavailable", f.Addr)
	mismatch := `run image has stack id "other" (label io.buildpacks.stack.id), the stack says "io.buildpacks.stacks.jammy"`

	rows := pkgtesting.TableTest{{
		Name:    "ready",
		Key:     "jammy",
		Objects: []runtime.Object{stack("stack/run:1", nil)},
		WantErr: true, // the resync requeue
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: stack("stack/run:1", func(s *v1alpha1.ClusterStackStatus) {
			s.ID, s.UserID, s.GroupID, s.OS, s.Arch = stackID, 1000, 1001, "linux", "amd64"
			s.Platforms = []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}}
			s.BuildImage = v1alpha1.ResolvedImage{Image: f.Addr + "/stack/build:1", LatestImage: f.Addr + "/stack/build@" + buildDigest.String()}
			s.RunImage = v1alpha1.ResolvedRunImage{Image: f.Addr + "/stack/run:1", LatestImage: f.Addr + "/stack/run@" + runDigest.String()}
			s.MarkReady()
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeNormal, "Ready", "ClusterStack is Ready")},
	}, {
		Name:    "transient: registry answers 503",
		Key:     "jammy",
		Objects: []runtime.Object{stack("stack/run-503:1", nil)},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: stack("stack/run-503:1", func(s *v1alpha1.ClusterStackStatus) {
			s.MarkRetrying(registry.ReasonRegistryUnavailable, unavailable, reconciler.WaitingMessage(registry.Place{Host: f.Addr, Repository: "stack/run-503"}, 5*time.Minute))
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, registry.ReasonRegistryUnavailable, "%s", unavailable)},
	}, {
		Name:    "waiting: service account missing",
		Key:     "jammy",
		Objects: []runtime.Object{withAccount(stack("stack/run:1", nil))},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: withAccount(stack("stack/run:1", func(s *v1alpha1.ClusterStackStatus) {
			s.MarkRetrying(registry.ReasonServiceAccountNotFound, "serviceaccount buildsmith/reader not found",
				"retrying in 1m0s, or when a dependency changes")
		}))}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, registry.ReasonServiceAccountNotFound, "serviceaccount buildsmith/reader not found")},
	}, {
		Name:    "permanent: run image of another stack",
		Key:     "jammy",
		Objects: []runtime.Object{stack("stack/run-other:1", nil)},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: stack("stack/run-other:1", func(s *v1alpha1.ClusterStackStatus) {
			s.MarkStalled(cnb.ReasonStackIDMismatch, mismatch)
		})}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, cnb.ReasonStackIDMismatch, "%s", mismatch)},
	}, {
		Name: "permanent again: no new event, no status change",
		Key:  "jammy",
		Objects: []runtime.Object{stack("stack/run-other:1", func(s *v1alpha1.ClusterStackStatus) {
			s.MarkStalled(cnb.ReasonStackIDMismatch, mismatch)
		})},
		WantErr: true,
	}}
	rows.Test(t, rt.TableFactory(func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		return NewController(registry.New(ctx, registry.Options{LoopbackRegistries: true}), reconciler.DefaultOptions())(ctx, cmw)
	}))
}

func withAccount(s *v1alpha1.ClusterStack) *v1alpha1.ClusterStack {
	s.Spec.ServiceAccountRef = &v1alpha1.ServiceAccountRef{Name: "reader", Namespace: "buildsmith"}
	return s
}
