package registry

import (
	"slices"
	"testing"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// TestStatusMeanings is the table of what each status means, as
// design.md and the package doc give it.
func TestStatusMeanings(t *testing.T) {
	for _, tc := range []struct {
		code int
		want statusMeaning
	}{
		{429, statusMeaning{outage: true, retried: true, retryAfter: true, class: failure.Transient, reason: ReasonRateLimited}},
		{503, statusMeaning{outage: true, retried: true, retryAfter: true, class: failure.Transient, reason: ReasonRegistryUnavailable}},
		{408, statusMeaning{outage: true, retried: true, class: failure.Transient, reason: ReasonRegistryUnavailable}},
		{500, statusMeaning{outage: true, retried: true, class: failure.Transient, reason: ReasonRegistryUnavailable}},
		{502, statusMeaning{outage: true, retried: true, class: failure.Transient, reason: ReasonRegistryUnavailable}},
		{504, statusMeaning{outage: true, retried: true, class: failure.Transient, reason: ReasonRegistryUnavailable}},
		{501, statusMeaning{outage: true, class: failure.Transient, reason: ReasonRegistryUnavailable}},
		{599, statusMeaning{outage: true, class: failure.Transient, reason: ReasonRegistryUnavailable}},
		{999, statusMeaning{outage: true, class: failure.Transient, reason: ReasonRegistryUnavailable}},
		{401, statusMeaning{class: failure.Waiting, reason: ReasonUnauthorized}},
		{403, statusMeaning{class: failure.Waiting, reason: ReasonUnauthorized}},
		{404, statusMeaning{class: failure.Waiting, reason: ReasonImageNotFound}},
		{400, statusMeaning{class: failure.Permanent, reason: ReasonRegistryRejected}},
		{405, statusMeaning{class: failure.Permanent, reason: ReasonRegistryRejected}},
		{413, statusMeaning{class: failure.Permanent, reason: ReasonRegistryRejected}},
		{200, statusMeaning{class: failure.Transient, reason: ReasonRegistryError}},
		{307, statusMeaning{class: failure.Transient, reason: ReasonRegistryError}},
	} {
		if got := meaningOf(tc.code); got != tc.want {
			t.Errorf("meaningOf(%d) = %+v, want %+v", tc.code, got, tc.want)
		}
	}
	if want := []int{408, 429, 500, 502, 503, 504}; !slices.Equal(retriedStatusCodes, want) {
		t.Errorf("retried in a call: %v, want %v", retriedStatusCodes, want)
	}
}

// TestStatusMeaningsAgree: what the table says of one status holds
// together for every status: a retried answer is an outage, a Retry-After
// is read only from one retried, and an outage is transient.
func TestStatusMeaningsAgree(t *testing.T) {
	for code := 100; code < 1000; code++ {
		m := meaningOf(code)
		if m.retryAfter && !m.retried || m.retried && !m.outage || m.outage && m.class != failure.Transient || m.reason == "" {
			t.Errorf("meaningOf(%d) = %+v", code, m)
		}
	}
}
