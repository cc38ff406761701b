package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func TestConditionTransitions(t *testing.T) {
	type want struct {
		ready, reconciling, stalled corev1.ConditionStatus // "" = absent
		reason                      string
		kstatus                     status.Status
	}
	tests := []struct {
		name string
		mark func(*ConditionedStatus)
		want want
	}{{
		name: "retrying",
		mark: func(s *ConditionedStatus) {
			s.MarkRetrying("RegistryUnavailable", "dial tcp: connection refused", "retrying in 16s")
		},
		want: want{ready: corev1.ConditionFalse, reconciling: corev1.ConditionTrue, reason: "RegistryUnavailable",
			kstatus: status.InProgressStatus},
	}, {
		name: "stalled",
		mark: func(s *ConditionedStatus) { s.MarkStalled("InvalidSpec", "bad tag") },
		want: want{ready: corev1.ConditionFalse, stalled: corev1.ConditionTrue, reason: "InvalidSpec",
			kstatus: status.FailedStatus},
	}, {
		name: "stalled after retrying clears Reconciling",
		mark: func(s *ConditionedStatus) {
			s.MarkRetrying("RateLimited", "429", "retrying in 3s")
			s.MarkStalled("StackMismatch", "stack ids differ")
		},
		want: want{ready: corev1.ConditionFalse, stalled: corev1.ConditionTrue, reason: "StackMismatch",
			kstatus: status.FailedStatus},
	}, {
		name: "retrying after stalled clears Stalled",
		mark: func(s *ConditionedStatus) {
			s.MarkStalled("StackMismatch", "stack ids differ")
			s.MarkRetrying("ImageNotFound", "not found", "retrying in 1m0s")
		},
		want: want{ready: corev1.ConditionFalse, reconciling: corev1.ConditionTrue, reason: "ImageNotFound",
			kstatus: status.InProgressStatus},
	}, {
		name: "ready clears both",
		mark: func(s *ConditionedStatus) {
			s.MarkRetrying("RateLimited", "429", "retrying in 3s")
			s.MarkStalled("StackMismatch", "stack ids differ")
			s.MarkReady()
		},
		want: want{ready: corev1.ConditionTrue, kstatus: status.CurrentStatus},
	}, {
		name: "messages with percent signs are kept verbatim",
		mark: func(s *ConditionedStatus) {
			s.MarkRetrying("RegistryUnavailable", "GET /v2/%2F: 503", "retrying in 1s")
		},
		want: want{ready: corev1.ConditionFalse, reconciling: corev1.ConditionTrue, reason: "RegistryUnavailable",
			kstatus: status.InProgressStatus},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := &Builder{}
			b.Generation, b.Status.ObservedGeneration = 3, 3
			tc.mark(&b.Status.ConditionedStatus)

			get := func(ct apis.ConditionType) corev1.ConditionStatus {
				if c := b.Status.GetCondition(ct); c != nil {
					return c.Status
				}
				return ""
			}
			got := want{ready: get(ConditionReady), reconciling: get(ConditionReconciling), stalled: get(ConditionStalled)}
			if c := b.Status.GetCondition(ConditionReady); c != nil {
				got.reason = c.Reason
			}
			if got.ready != tc.want.ready || got.reconciling != tc.want.reconciling ||
				got.stalled != tc.want.stalled || got.reason != tc.want.reason {
				t.Errorf("conditions = %+v, want %+v (all: %+v)", got, tc.want, b.Status.Conditions)
			}
			if b.Status.IsReady() != (tc.want.ready == corev1.ConditionTrue) {
				t.Errorf("IsReady() = %v with Ready %q", b.Status.IsReady(), tc.want.ready)
			}
			if tc.name == "messages with percent signs are kept verbatim" {
				if msg := b.Status.GetCondition(ConditionReady).Message; msg != "GET /v2/%2F: 503" {
					t.Errorf("Ready message = %q", msg)
				}
			}

			// kstatus is what Flux, Argo CD and kpt use to read health.
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(b)
			if err != nil {
				t.Fatal(err)
			}
			res, err := status.Compute(&unstructured.Unstructured{Object: u})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.want.kstatus {
				t.Errorf("kstatus = %s (%s), want %s", res.Status, res.Message, tc.want.kstatus)
			}
		})
	}
}
