package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// Condition types, chosen so that kstatus (and so Flux, Argo CD and kpt) read
// every object without custom health checks:
//
//   - Ready: True once the current generation is fully reconciled; False with
//     a reason and message saying what is wrong.
//   - Reconciling: True while the controller will try again by itself (a
//     retry or a poll is scheduled); kstatus reads InProgress.
//   - Stalled: True when nothing changes until a person changes something;
//     kstatus reads Failed.
//   - UpToDate: True when the last reconcile succeeded; False with the
//     reason and message of its failure (kpack's condition of that name, so
//     kpack users' checks read it). A usable object whose re-check fails for
//     a passing reason stays Ready and says so here alone (see MarkStale).
//
// Reconciling and Stalled never both hold, and both go away when Ready turns
// True. None of them drives Ready: they are not dependents of the condition
// set.
const (
	ConditionReady       apis.ConditionType = apis.ConditionReady
	ConditionReconciling apis.ConditionType = "Reconciling"
	ConditionStalled     apis.ConditionType = "Stalled"
	ConditionUpToDate    apis.ConditionType = "UpToDate"
)

// conditionSet is the condition set of every kind: Ready alone is the happy
// condition.
var conditionSet = apis.NewLivingConditionSet()

// ConditionedStatus is the conditions and observedGeneration of every kind,
// with the transitions that keep their kstatus meaning.
type ConditionedStatus struct {
	duckv1.Status `json:",inline"`
	// LastHandledReconcileAt is the value of the
	// buildsmith.dev/reconcile-requested-at annotation last acted upon.
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`
}

// ReconcileRequestedAtAnnotation asks for a reconcile now: any new value
// makes the controller reconcile the object at once, skipping the wait of
// its backoff, and echo the value in status.lastHandledReconcileAt (the
// convention of Flux's reconcile.fluxcd.io/requestedAt):
//
//	kubectl annotate --overwrite builder/app buildsmith.dev/reconcile-requested-at="$(date +%s)"
const ReconcileRequestedAtAnnotation = "buildsmith.dev/reconcile-requested-at"

func (s *ConditionedStatus) manage() apis.ConditionManager { return conditionSet.Manage(&s.Status) }

// MarkReady records a fully reconciled generation.
func (s *ConditionedStatus) MarkReady() {
	m := s.manage()
	m.MarkTrue(ConditionUpToDate)
	m.MarkTrue(ConditionReady)
	_ = m.ClearCondition(ConditionReconciling)
	_ = m.ClearCondition(ConditionStalled)
}

// MarkRetrying records a failure that the controller will retry by itself:
// Ready is False with reason and message, Reconciling is True with the same
// reason and retryMessage (e.g. "retrying in 16s").
func (s *ConditionedStatus) MarkRetrying(reason, message, retryMessage string) {
	m := s.manage()
	// Ready last: knative marks the happy condition True whenever a condition
	// is marked True and no dependent is unhappy, and we have no dependents.
	m.MarkTrueWithReason(ConditionReconciling, reason, "%s", retryMessage)
	_ = m.ClearCondition(ConditionStalled)
	m.MarkFalse(ConditionUpToDate, reason, "%s", message)
	m.MarkFalse(ConditionReady, reason, "%s", message)
}

// MarkStale records that a re-check of a usable object failed for a reason
// that passes by itself: Ready stays as it was (True, with its transition
// time), UpToDate is False with reason and message, and neither Reconciling
// nor Stalled is set. Reconciling=True would make kstatus read InProgress,
// and Flux and Argo CD health checks would flip every builder of a cluster
// at each registry blip: the very flapping this state exists to prevent.
func (s *ConditionedStatus) MarkStale(reason, message string) {
	m := s.manage()
	_ = m.ClearCondition(ConditionReconciling)
	_ = m.ClearCondition(ConditionStalled)
	m.MarkFalse(ConditionUpToDate, reason, "%s", message)
}

// MarkStalled records a failure that needs a person: Ready and Stalled say
// why, and nothing is retried until the object or a dependency changes.
func (s *ConditionedStatus) MarkStalled(reason, message string) {
	m := s.manage()
	m.MarkTrueWithReason(ConditionStalled, reason, "%s", message)
	_ = m.ClearCondition(ConditionReconciling)
	m.MarkFalse(ConditionUpToDate, reason, "%s", message)
	m.MarkFalse(ConditionReady, reason, "%s", message) // last, as in MarkRetrying
}

// IsReady reports whether Ready is True. Callers that depend on another
// object also compare its observedGeneration with its generation (see
// IsUsable).
func (s *ConditionedStatus) IsReady() bool { return s.manage().IsHappy() }

// IsUsable reports whether the object's resolved status is good for its
// current generation: Ready is True and was recorded for generation. (A
// reconcile of a new generation starts with Ready Unknown: the generated
// reconciler resets it.)
func (s *ConditionedStatus) IsUsable(generation int64) bool {
	return s.IsReady() && s.ObservedGeneration == generation
}

// Every kind is KRShaped, so that the generated reconcilers manage
// observedGeneration and the Ready condition of a new generation.
var (
	_ duckv1.KRShaped = (*ClusterStore)(nil)
	_ duckv1.KRShaped = (*ClusterStack)(nil)
	_ duckv1.KRShaped = (*ClusterLifecycle)(nil)
	_ duckv1.KRShaped = (*Builder)(nil)
	_ duckv1.KRShaped = (*ClusterBuilder)(nil)
	_ duckv1.KRShaped = (*Buildpack)(nil)
)

// GetConditionSet implements duckv1.KRShaped.
func (*ClusterStore) GetConditionSet() apis.ConditionSet { return conditionSet }

// GetStatus implements duckv1.KRShaped.
func (c *ClusterStore) GetStatus() *duckv1.Status { return &c.Status.Status }

// GetGroupVersionKind implements kmeta.OwnerRefable.
func (*ClusterStore) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("ClusterStore")
}

// GetConditionSet implements duckv1.KRShaped.
func (*ClusterStack) GetConditionSet() apis.ConditionSet { return conditionSet }

// GetStatus implements duckv1.KRShaped.
func (c *ClusterStack) GetStatus() *duckv1.Status { return &c.Status.Status }

// GetGroupVersionKind implements kmeta.OwnerRefable.
func (*ClusterStack) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("ClusterStack")
}

// GetConditionSet implements duckv1.KRShaped.
func (*ClusterLifecycle) GetConditionSet() apis.ConditionSet { return conditionSet }

// GetStatus implements duckv1.KRShaped.
func (c *ClusterLifecycle) GetStatus() *duckv1.Status { return &c.Status.Status }

// GetGroupVersionKind implements kmeta.OwnerRefable.
func (*ClusterLifecycle) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("ClusterLifecycle")
}

// GetConditionSet implements duckv1.KRShaped.
func (*Builder) GetConditionSet() apis.ConditionSet { return conditionSet }

// GetStatus implements duckv1.KRShaped.
func (b *Builder) GetStatus() *duckv1.Status { return &b.Status.Status }

// GetGroupVersionKind implements kmeta.OwnerRefable.
func (*Builder) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("Builder")
}

// GetConditionSet implements duckv1.KRShaped.
func (*ClusterBuilder) GetConditionSet() apis.ConditionSet { return conditionSet }

// GetStatus implements duckv1.KRShaped.
func (b *ClusterBuilder) GetStatus() *duckv1.Status { return &b.Status.Status }

// GetGroupVersionKind implements kmeta.OwnerRefable.
func (*ClusterBuilder) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("ClusterBuilder")
}

// Conditions returns the condition helpers of the object's status.
func (c *ClusterStore) Conditions() *ConditionedStatus { return &c.Status.ConditionedStatus }

// Conditions returns the condition helpers of the object's status.
func (c *ClusterStack) Conditions() *ConditionedStatus { return &c.Status.ConditionedStatus }

// Conditions returns the condition helpers of the object's status.
func (c *ClusterLifecycle) Conditions() *ConditionedStatus { return &c.Status.ConditionedStatus }

// Conditions returns the condition helpers of the object's status.
func (b *Builder) Conditions() *ConditionedStatus { return &b.Status.ConditionedStatus }

// Conditions returns the condition helpers of the object's status.
func (b *ClusterBuilder) Conditions() *ConditionedStatus { return &b.Status.ConditionedStatus }

// GetConditionSet implements duckv1.KRShaped.
func (*Buildpack) GetConditionSet() apis.ConditionSet { return conditionSet }

// GetStatus implements duckv1.KRShaped.
func (b *Buildpack) GetStatus() *duckv1.Status { return &b.Status.Status }

// GetGroupVersionKind implements kmeta.OwnerRefable.
func (*Buildpack) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("Buildpack")
}

// Conditions returns the condition helpers of the object's status.
func (b *Buildpack) Conditions() *ConditionedStatus { return &b.Status.ConditionedStatus }

// GetConditionSet implements duckv1.KRShaped.
func (*Receiver) GetConditionSet() apis.ConditionSet { return conditionSet }

// GetStatus implements duckv1.KRShaped.
func (r *Receiver) GetStatus() *duckv1.Status { return &r.Status.Status }

// GetGroupVersionKind implements kmeta.OwnerRefable.
func (*Receiver) GetGroupVersionKind() schema.GroupVersionKind {
	return SchemeGroupVersion.WithKind("Receiver")
}

// Conditions returns the condition helpers of the object's status.
func (r *Receiver) Conditions() *ConditionedStatus { return &r.Status.ConditionedStatus }
