package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// isOutage reports whether a request's outcome says its place is failing
// rather than answering: it could not be reached, reset the connection or
// did not answer in time, or it answered a status whose meaning is an
// outage (408, 429 and 5xx, see meaningOf). The caller's own
// cancellation or deadline is not an outage, nor is a certificate it does
// not trust (that needs a person), nor any other answer.
func isOutage(ctx context.Context, resp *http.Response, err error) bool {
	if err != nil {
		if ctx.Err() != nil || isCertificateError(err) || isRefusal(err) {
			return false
		}
		return isNetworkError(err)
	}
	return meaningOf(resp.StatusCode).outage
}

// isRefusal reports errors this client made without a request: an open
// circuit or a Retry-After hold.
func isRefusal(err error) bool {
	var open *circuitOpenError
	var e *failure.Error
	return errors.As(err, &open) || errors.As(err, &e)
}

// outageError describes a failed request as a classified error.
func outageError(req *http.Request, resp *http.Response, err error) *failure.Error {
	if err != nil {
		return newError(req.URL.Host, 0, err)
	}
	return newError(req.URL.Host, 0, &failure.Error{Class: failure.Transient, Reason: meaningOf(resp.StatusCode).reason,
		Err: fmt.Errorf("%s %s: %s", req.Method, redactURL(req.URL), resp.Status)})
}

// gateTransport keeps requests from places whose circuit is open, and tells
// the circuits and the call what each request's outcome says about its
// place.
type gateTransport struct {
	next     http.RoundTripper
	circuits *Circuits
}

func (g *gateTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	place := placeOf(req, nil)
	if refused := g.circuits.refuse(req.Context(), place); refused != nil {
		return nil, refused
	}
	resp, err := g.next.RoundTrip(req)
	if isOutage(req.Context(), resp, err) {
		if call := callFrom(req.Context()); call != nil {
			failed := placeOf(req, err)
			call.noteOutage(failed, probeFor(req, failed))
		}
	} else if err == nil {
		g.circuits.answered(place)
		if call := callFrom(req.Context()); call != nil {
			call.answered(place) // a retry got through: not this call's outage
			resp.Body = &outageBody{ReadCloser: resp.Body, req: req, call: call}
		}
	}
	return resp, err
}

// outageBody notes on the call an answer whose body was cut short (a reset,
// a stall): the place failed after all.
type outageBody struct {
	io.ReadCloser
	req  *http.Request
	call *call
}

func (b *outageBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && isOutage(b.req.Context(), nil, err) {
		failed := placeOf(b.req, err)
		b.call.noteOutage(failed, probeFor(b.req, failed))
	}
	return n, err
}
