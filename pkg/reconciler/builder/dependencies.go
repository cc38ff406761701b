package builder

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
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
