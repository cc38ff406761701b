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
	ReasonSourceNotReady    = "SourceNotReady" // one of spec.sources
	ReasonLifecycleNotReady = "LifecycleNotReady"
)

// ready returns the dependency of obj that get finds by name (in
// namespace, "" for a cluster kind) if it is Ready for its current
// generation, and tracks it either way (a stack becoming Ready wakes the
// builders waiting on it).
func ready[T reconciler.Object](r *Core, obj object, kind, namespace, name string, get func(string) (T, error), reason string) (T, error) {
	var none T
	_ = r.Tracker.TrackReference(tracker.Reference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: kind,
		Namespace: namespace, Name: name}, obj)
	named := name
	if namespace != "" {
		named = namespace + "/" + name
	}
	dep, err := get(name)
	if apierrors.IsNotFound(err) {
		return none, failure.Waitingf(reason, "%s %s not found", kind, named)
	} else if err != nil {
		return none, err
	}
	if status := dep.Conditions(); !status.IsReady() || status.ObservedGeneration != dep.GetGeneration() {
		return none, failure.Waitingf(reason, "%s %s is not Ready%s", kind, named, why(*status))
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
	lc, err := ready(r, obj, "ClusterLifecycle", "", ref.Name, r.Lifecycles.Get, ReasonLifecycleNotReady)
	if err != nil {
		return clusterlifecycle.Image{}, "", err
	}
	image, err := clusterlifecycle.ImageOf(lc)
	return image, "ClusterLifecycle " + lc.Name, err
}

// source is one of a builder's sources of buildpacks, Ready.
type source struct {
	ref        v1alpha1.SourceRef // its kind always set
	store      bool               // spec.store; else one of spec.sources
	generation int64
	buildpacks []v1alpha1.StoreBuildpack
	extensions []v1alpha1.StoreBuildpack
}

// sources returns the builder's sources, spec.store (if any) first, each
// Ready: a ClusterStore, or a Buildpack of the builder's namespace. One
// that is not says which: StoreNotReady for the store, SourceNotReady for
// one of spec.sources.
func (r *Core) sources(obj object, spec *v1alpha1.BuilderSpec) ([]source, error) {
	refs := sourceRefs(spec)
	out := make([]source, len(refs))
	for i, ref := range refs {
		out[i] = source{ref: ref, store: i == 0 && spec.Store.Name != ""}
		reason := ReasonSourceNotReady
		if out[i].store {
			reason = ReasonStoreNotReady
		}
		switch ref.Kind {
		case "Buildpack":
			bp, err := ready(r, obj, ref.Kind, obj.GetNamespace(), ref.Name, r.Buildpacks.Buildpacks(obj.GetNamespace()).Get, reason)
			if err != nil {
				return nil, err
			}
			out[i].generation, out[i].buildpacks, out[i].extensions = bp.Generation, bp.Status.Buildpacks, bp.Status.Extensions
		default:
			store, err := ready(r, obj, ref.Kind, "", ref.Name, r.Stores.Get, reason)
			if err != nil {
				return nil, err
			}
			out[i].generation, out[i].buildpacks, out[i].extensions = store.Generation, store.Status.Buildpacks, store.Status.Extensions
		}
	}
	return out, nil
}

// generation is the generation of the source ref of a builder in
// namespace, as the informers have it; false when it is not there.
func (r *Core) generation(namespace string, ref v1alpha1.SourceRef) (int64, bool) {
	if ref.Kind == "Buildpack" {
		if bp, err := r.Buildpacks.Buildpacks(namespace).Get(ref.Name); err == nil {
			return bp.Generation, true
		}
		return 0, false
	}
	if store, err := r.Stores.Get(ref.Name); err == nil {
		return store.Generation, true
	}
	return 0, false
}

// sourceRefs are a builder's sources in order, each with its kind:
// spec.store (if any), then spec.sources.
func sourceRefs(spec *v1alpha1.BuilderSpec) []v1alpha1.SourceRef {
	var refs []v1alpha1.SourceRef
	if spec.Store.Name != "" {
		refs = append(refs, v1alpha1.SourceRef{Kind: "ClusterStore", Name: spec.Store.Name})
	}
	for _, s := range spec.Sources {
		if s.Kind == "" {
			s.Kind = "ClusterStore"
		}
		refs = append(refs, s)
	}
	return refs
}

// poolOf pools what sources hold (cnb.Merge: the first source has a module
// several offer).
func poolOf(sources []source) cnb.Pool {
	pooled := make([]cnb.Source, len(sources))
	for i, s := range sources {
		pooled[i] = cnb.Source{Name: s.ref.Kind + "/" + s.ref.Name, Buildpacks: s.buildpacks, Extensions: s.extensions}
	}
	return cnb.Merge(pooled...)
}

// observedSourceGeneration is the generation of a builder's source ref
// (its store, or one of spec.sources) that status was built from (0: none).
func observedSourceGeneration(status *v1alpha1.BuilderStatus, store bool, ref v1alpha1.SourceRef) int64 {
	if store {
		return status.ObservedStoreGeneration
	}
	for _, s := range status.Sources {
		if s.Kind == ref.Kind && s.Name == ref.Name {
			return s.Generation
		}
	}
	return 0
}
