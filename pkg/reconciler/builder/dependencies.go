package builder

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterlifecycle"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Reasons of dependency errors.
const (
	ReasonStackNotReady     = "StackNotReady"
	ReasonStoreNotReady     = "StoreNotReady"
	ReasonLifecycleNotReady = "LifecycleNotReady"
)

// ready returns the dependency of obj that get finds by name if it is Ready
// for its current generation, and tracks it either way (a stack becoming
// Ready wakes the builders waiting on it).
func ready[T reconciler.Object](r *Core, obj object, kind, name string, get func(string) (T, error), reason string) (T, error) {
	var none T
	_ = r.Tracker.TrackReference(tracker.Reference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: kind, Name: name}, obj)
	dep, err := get(name)
	if apierrors.IsNotFound(err) {
		return none, failure.Waitingf(reason, "%s %s not found", kind, name)
	} else if err != nil {
		return none, err
	}
	if status := dep.Conditions(); !status.IsReady() || status.ObservedGeneration != dep.GetGeneration() {
		return none, failure.Waitingf(reason, "%s %s is not Ready%s", kind, name, why(*status))
	}
	return dep, nil
}

func why(s v1alpha1.ConditionedStatus) string {
	if c := s.GetCondition(v1alpha1.ConditionReady); c != nil && c.Reason != "" {
		return fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
	}
	return ""
}

// lifecycle returns the lifecycle image of a builder: its ClusterLifecycle's
// when ref names one (which must be Ready), else the lifecycle-image
// ConfigMap's; and how messages name it.
func (r *Core) lifecycle(ctx context.Context, obj object, reg registry.Access, ref *v1alpha1.LifecycleRef) (clusterlifecycle.Image, string, error) {
	if ref == nil {
		image, err := r.Lifecycle.Image(ctx, reg)
		return image, "the lifecycle image", err
	}
	lc, err := ready(r, obj, "ClusterLifecycle", ref.Name, r.Lifecycles.Get, ReasonLifecycleNotReady)
	if err != nil {
		return clusterlifecycle.Image{}, "", err
	}
	image, err := clusterlifecycle.ImageOf(lc)
	return image, "ClusterLifecycle " + lc.Name, err
}

// stores returns the builder's ClusterStores, spec.store first, each Ready.
func (r *Core) stores(obj object, spec *v1alpha1.BuilderSpec) ([]*v1alpha1.ClusterStore, error) {
	refs := storeRefs(spec)
	stores := make([]*v1alpha1.ClusterStore, len(refs))
	for i, ref := range refs {
		store, err := ready(r, obj, "ClusterStore", ref.Name, r.Stores.Get, ReasonStoreNotReady)
		if err != nil {
			return nil, err
		}
		stores[i] = store
	}
	return stores, nil
}

// storeRefs are a builder's sources in order: spec.store, then spec.sources.
func storeRefs(spec *v1alpha1.BuilderSpec) []v1alpha1.StoreRef {
	refs := []v1alpha1.StoreRef{spec.Store}
	for _, source := range spec.Sources {
		refs = append(refs, v1alpha1.StoreRef{Kind: "ClusterStore", Name: source.Name})
	}
	return refs
}

// poolOf pools what stores hold (cnb.Merge: the first source has a module
// several offer).
func poolOf(stores []*v1alpha1.ClusterStore) cnb.Pool {
	sources := make([]cnb.Source, len(stores))
	for i, s := range stores {
		sources[i] = cnb.Source{Name: "ClusterStore/" + s.Name, Buildpacks: s.Status.Buildpacks, Extensions: s.Status.Extensions}
	}
	return cnb.Merge(sources...)
}

// observedStoreGeneration is the generation of the i-th of a builder's
// stores, named name, that status was built from (0: none).
func observedStoreGeneration(status *v1alpha1.BuilderStatus, i int, name string) int64 {
	if i == 0 {
		return status.ObservedStoreGeneration
	}
	for _, s := range status.Sources {
		if s.Kind == "ClusterStore" && s.Name == name {
			return s.Generation
		}
	}
	return 0
}
