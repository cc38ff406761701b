package reconciler

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"
	duckv1 "knative.dev/pkg/apis/duck/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
)

// OnUsableChange is the event handler of a kind other objects depend on
// (a builder's stack, store and lifecycle): it calls onChanged (a
// tracker's OnChanged) when such an object is added or deleted, or changes
// in what its dependants read — its resolved status, the generation it is
// for, and whether it is Ready (and why not) — but not when only its
// UpToDate or Reconciling conditions, messages, transition times, labels or
// annotations do, nor when it is edited: its dependants hear of the edit
// when it is reconciled (its observedGeneration changes), rather than
// finding it not reconciled yet. A stack whose re-check fails and passes keeps its resolved status and
// Ready, so its builders are not woken twice for nothing (each of them
// would re-check its own image, into the same registry blip).
func OnUsableChange(onChanged func(any)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: onChanged,
		UpdateFunc: func(oldObj, newObj any) {
			before, ok1 := oldObj.(Object)
			after, ok2 := newObj.(Object)
			if !ok1 || !ok2 || !equality.Semantic.DeepEqual(usableView(before), usableView(after)) {
				onChanged(newObj)
			}
		},
		DeleteFunc: onChanged,
	}
}

// usableView is a copy of obj reduced to what its dependants read.
func usableView(obj Object) Object {
	view := obj.DeepCopyObject().(Object)
	view.SetResourceVersion("")
	view.SetGeneration(0)
	view.SetLabels(nil)
	view.SetAnnotations(nil)
	view.SetManagedFields(nil)
	conditions := view.Conditions()
	conditions.LastHandledReconcileAt = ""
	conditions.Annotations = nil
	var kept duckv1.Conditions
	if ready := conditions.GetCondition(v1alpha1.ConditionReady); ready != nil {
		kept = duckv1.Conditions{{Type: ready.Type, Status: ready.Status, Reason: ready.Reason}}
	}
	conditions.Conditions = kept
	return view
}
