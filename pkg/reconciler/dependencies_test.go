package reconciler

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// TestOnUsableChange: the builders of a stack are woken when what they read
// of it changes, and not when its re-check fails and passes, which leaves
// it Ready with the same resolved status (the cascade of issue 26: every
// builder re-checking its own image into the same registry blip).
func TestOnUsableChange(t *testing.T) {
	ready := &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "jammy", Generation: 2, ResourceVersion: "10"}}
	ready.Status.ObservedGeneration = 2
	ready.Status.BuildImage = v1alpha1.ResolvedImage{Image: "r.example/build:1", LatestImage: "r.example/build@sha256:aa"}
	ready.Status.MarkReady()

	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.ClusterStack)
		wake   bool
	}{
		{"a re-check fails: Ready, not UpToDate", func(s *v1alpha1.ClusterStack) {
			s.Status.MarkStale(registry.ReasonRegistryUnavailable, "GET …: 503; retrying in 2s")
		}, false},
		{"the status is written again, or the labels change", func(s *v1alpha1.ClusterStack) {
			s.Labels = map[string]string{"team": "a"}
			s.Status.LastHandledReconcileAt = "now"
		}, false},
		{"the build image moved", func(s *v1alpha1.ClusterStack) {
			s.Status.BuildImage.LatestImage = "r.example/build@sha256:bb"
		}, true},
		{"not Ready", func(s *v1alpha1.ClusterStack) {
			s.Status.MarkRetrying(registry.ReasonImageNotFound, "gone", "retrying in 1m0s, or when a dependency changes")
		}, true},
		{"edited: woken when it is reconciled, not before", func(s *v1alpha1.ClusterStack) { s.Generation = 3 }, false},
		{"a new generation reconciled", func(s *v1alpha1.ClusterStack) { s.Generation, s.Status.ObservedGeneration = 3, 3 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			after := ready.DeepCopy()
			after.ResourceVersion = "11"
			tc.change(after)
			woken := 0
			OnUsableChange(func(any) { woken++ }).OnUpdate(ready, after)
			if (woken > 0) != tc.wake {
				t.Errorf("woken %d times, want woken: %v", woken, tc.wake)
			}
		})
	}
	// Back from a failed re-check to UpToDate: nothing builders read changed.
	stale := ready.DeepCopy()
	stale.Status.MarkStale(registry.ReasonRegistryUnavailable, "503")
	woken := 0
	OnUsableChange(func(any) { woken++ }).OnUpdate(stale, ready)
	if woken != 0 {
		t.Errorf("recovery woke the builders %d times", woken)
	}
}
