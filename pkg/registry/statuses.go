package registry

import (
	"net/http"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// statusMeaning is what one HTTP status a registry answers means to this
// client. meaningOf is the one table of them: the circuits, the in-call
// retries, the Retry-After holds and the classification of errors all read
// it, so that a status cannot mean one thing to one of them and another to
// the next. (A diagnostic code in an error body can say more than the status:
// classifyResponse reads those first.)
type statusMeaning struct {
	// outage: the place is failing rather than answering. It counts
	// toward opening the place's circuit, a probe meeting it fails, and
	// a push does not take it for the repository's answer.
	outage bool
	// retried within the call, after a short backoff (ggcr's reads, the
	// push's exchanges), unless the answer carried a Retry-After or the
	// host has an open circuit.
	retried bool
	// retryAfter: its Retry-After header is honoured, as RFC 9110 gives it
	// that meaning for 429 and 503 alone.
	retryAfter bool
	// class and reason of the error it is when it fails a request.
	class  failure.Class
	reason string
}

// meaningOf is the meaning of status code.
func meaningOf(code int) statusMeaning {
	switch {
	case code == http.StatusTooManyRequests:
		return statusMeaning{outage: true, retried: true, retryAfter: true, class: failure.Transient, reason: ReasonRateLimited}
	case code == http.StatusServiceUnavailable:
		return statusMeaning{outage: true, retried: true, retryAfter: true, class: failure.Transient, reason: ReasonRegistryUnavailable}
	case code == http.StatusRequestTimeout, code == http.StatusInternalServerError,
		code == http.StatusBadGateway, code == http.StatusGatewayTimeout:
		return statusMeaning{outage: true, retried: true, class: failure.Transient, reason: ReasonRegistryUnavailable}
	case code >= 500:
		// 501, 505 and the like (and codes no standard gives): the place is
		// failing, and its circuit's probes find when it stops, but asking
		// again at once is not likely to be answered otherwise.
		return statusMeaning{outage: true, class: failure.Transient, reason: ReasonRegistryUnavailable}
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return statusMeaning{class: failure.Waiting, reason: ReasonUnauthorized}
	case code == http.StatusNotFound:
		return statusMeaning{class: failure.Waiting, reason: ReasonImageNotFound}
	case code >= 400:
		// The request refused for what it is: sending it again cannot help.
		return statusMeaning{class: failure.Permanent, reason: ReasonRegistryRejected}
	}
	// A 1xx, 2xx or 3xx where another was expected (say 200 where ggcr
	// wanted 201): an odd registry or proxy, most likely passing.
	return statusMeaning{class: failure.Transient, reason: ReasonRegistryError}
}

// retriedStatusCodes are the codes meaningOf retries within a call, as
// ggcr's options take them.
var retriedStatusCodes = func() []int {
	var codes []int
	for code := 100; code < 600; code++ {
		if meaningOf(code).retried {
			codes = append(codes, code)
		}
	}
	return codes
}()
