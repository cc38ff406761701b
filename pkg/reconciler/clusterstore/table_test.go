package clusterstore

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
	goImage := f.PushBuildpackage("bp/go:1", registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"})
	f.PushBuildpackage("bp/go-fork:1", registrytest.Buildpack{ID: "example/go", Version: "1.0.0", API: "0.10"})
	f.Inject("", "/bp/flaky/manifests/", -1, registrytest.Answer(502, nil, ""))
	digest, _ := goImage.Digest()
	cf, _ := goImage.ConfigFile()
	m, _ := goImage.Manifest()
	goBuildpacks, err := cnb.Buildpackage(f.Addr+"/bp/go@"+digest.String(), cf, m)
	if err != nil {
		t.Fatal(err)
	}
	for i := range goBuildpacks {
		goBuildpacks[i].Platforms = []v1alpha1.Platform{{OS: "linux", Arch: "amd64"}}
	}

	store := func(status func(*v1alpha1.ClusterStoreStatus), sources ...string) *v1alpha1.ClusterStore {
		s := &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 1}}
		for _, source := range sources {
			s.Spec.Sources = append(s.Spec.Sources, v1alpha1.ImageSource{Image: f.Addr + "/" + source})
		}
		if status != nil {
			s.Status.ObservedGeneration = 1
			status(&s.Status)
		}
		return s
	}
	unavailable := fmt.Sprintf("GET http://%s/v2/bp/flaky/manifests/1: unexpected status code 502 Bad Gateway", f.Addr)
	kept := func(s *v1alpha1.ClusterStoreStatus) { s.Buildpacks = goBuildpacks }

	rows := pkgtesting.TableTest{{
		Name:    "ready",
		Key:     "default",
		Objects: []runtime.Object{store(nil, "bp/go:1")},
		WantErr: true, // the resync requeue
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: store(func(s *v1alpha1.ClusterStoreStatus) {
			s.Buildpacks = goBuildpacks
			s.MarkReady()
		}, "bp/go:1")}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeNormal, "Ready", "ClusterStore is Ready")},
	}, {
		Name: "transient, unchanged: a source answers 502; stays Ready, the list is kept, UpToDate says why",
		Key:  "default",
		Objects: []runtime.Object{store(func(s *v1alpha1.ClusterStoreStatus) {
			kept(s)
			s.MarkReady()
		}, "bp/go:1", "bp/flaky:1")},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: store(func(s *v1alpha1.ClusterStoreStatus) {
			kept(s)
			s.MarkReady()
			s.MarkStale(registry.ReasonRegistryUnavailable, unavailable+"; "+
				reconciler.WaitingMessage(registry.Place{Host: f.Addr, Repository: "bp/flaky"}, 5*time.Minute))
		}, "bp/go:1", "bp/flaky:1")}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, registry.ReasonRegistryUnavailable, "%s", unavailable)},
	}, {
		Name: "transient, spec edited: a source answers 502; not Ready for the new generation, the list is kept",
		Key:  "default",
		Objects: []runtime.Object{edited(store(func(s *v1alpha1.ClusterStoreStatus) {
			kept(s)
			s.MarkReady()
		}, "bp/go:1", "bp/flaky:1"))},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: edited(store(func(s *v1alpha1.ClusterStoreStatus) {
			kept(s)
			s.ObservedGeneration = 2
			s.MarkRetrying(registry.ReasonRegistryUnavailable, unavailable, reconciler.WaitingMessage(registry.Place{Host: f.Addr, Repository: "bp/flaky"}, 5*time.Minute))
		}, "bp/go:1", "bp/flaky:1"))}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, registry.ReasonRegistryUnavailable, "%s", unavailable)},
	}, {
		Name: "recovered: UpToDate again, one event",
		Key:  "default",
		Objects: []runtime.Object{store(func(s *v1alpha1.ClusterStoreStatus) {
			kept(s)
			s.MarkReady()
			s.MarkStale(registry.ReasonRegistryUnavailable, unavailable)
		}, "bp/go:1")},
		WantErr: true, // the resync requeue
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: store(func(s *v1alpha1.ClusterStoreStatus) {
			kept(s)
			s.MarkReady()
		}, "bp/go:1")}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeNormal, "UpToDate", "ClusterStore is up to date again")},
	}, {
		Name:    "waiting: service account missing",
		Key:     "default",
		Objects: []runtime.Object{withAccount(store(nil, "bp/go:1"))},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: withAccount(store(func(s *v1alpha1.ClusterStoreStatus) {
			s.MarkRetrying(registry.ReasonServiceAccountNotFound, "serviceaccount buildsmith/reader not found",
				"retrying in 1m0s, or when a dependency changes")
		}, "bp/go:1"))}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, registry.ReasonServiceAccountNotFound, "serviceaccount buildsmith/reader not found")},
	}, {
		Name:    "permanent: the same buildpack with other contents",
		Key:     "default",
		Objects: []runtime.Object{store(nil, "bp/go:1", "bp/go-fork:1")},
		WantErr: true,
		WantStatusUpdates: []clientgotesting.UpdateActionImpl{{Object: store(func(s *v1alpha1.ClusterStoreStatus) {
			s.MarkStalled(cnb.ReasonDuplicateBuildpack, duplicateMessage(t, f))
		}, "bp/go:1", "bp/go-fork:1")}},
		WantEvents: []string{pkgtesting.Eventf(corev1.EventTypeWarning, cnb.ReasonDuplicateBuildpack, "%s", duplicateMessage(t, f))},
	}}
	rows.Test(t, rt.TableFactory(func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		return NewController(registry.New(ctx, registry.Options{LoopbackRegistries: true}), reconciler.DefaultOptions())(ctx, cmw)
	}))
}

func duplicateMessage(t *testing.T, f *registrytest.Registry) string {
	t.Helper()
	goRef, err := f.Resolve(f.Addr + "/bp/go:1")
	if err != nil {
		t.Fatal(err)
	}
	forkRef, err := f.Resolve(f.Addr + "/bp/go-fork:1")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("buildpack example/go@1.0.0 is in %s and in %s with different contents", goRef, forkRef)
}

// edited is s with a new generation, its status still of the last one.
func edited(s *v1alpha1.ClusterStore) *v1alpha1.ClusterStore {
	s.Generation = 2
	return s
}

func withAccount(s *v1alpha1.ClusterStore) *v1alpha1.ClusterStore {
	s.Spec.ServiceAccountRef = &v1alpha1.ServiceAccountRef{Name: "reader", Namespace: "buildsmith"}
	return s
}
