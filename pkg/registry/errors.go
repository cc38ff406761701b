package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Class says what a caller should do about an error; see the package doc.
type Class = failure.Class

// The classes.
const (
	Transient = failure.Transient
	Waiting   = failure.Waiting
	Permanent = failure.Permanent
)

// Reasons, as they appear in conditions.
const (
	ReasonRegistryUnavailable    = "RegistryUnavailable"
	ReasonRateLimited            = "RateLimited"
	ReasonRegistryError          = "RegistryError"
	ReasonImageNotFound          = "ImageNotFound"
	ReasonUnauthorized           = "Unauthorized"
	ReasonCertificateInvalid     = "CertificateInvalid"
	ReasonServiceAccountNotFound = "ServiceAccountNotFound"
	ReasonSecretNotFound         = "SecretNotFound"
	ReasonInvalidReference       = "InvalidReference"
	ReasonInvalidImage           = "InvalidImage"
	ReasonPlatformNotFound       = "PlatformNotFound"
	ReasonInvalidSecret          = "InvalidSecret"
	ReasonRegistryRejected       = "RegistryRejected"
)

// Error is a classified error. Every error a Client returns is one.
type Error = failure.Error

// Classify returns the class of err; see the package doc. It is 0 for nil.
func Classify(err error) Class {
	if err == nil {
		return 0
	}
	return asError(err).Class
}

// Reason returns the condition reason for err, "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	return asError(err).Reason
}

// RetryAfter returns how long the registry asked the caller to wait before
// trying again (its Retry-After header), 0 if it did not ask.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// Host returns the registry host err came from, "" if none.
func Host(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Host
	}
	return ""
}

// asError returns err's *Error, classifying err if it has none.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	class, reason := classify(err)
	return &Error{Class: class, Reason: reason, Err: err}
}

// classify places an error from ggcr, net/http or the standard library. The
// order matters: the most specific evidence is looked at first, and errors.As
// sees through the wrapping of url.Error, net.OpError and ggcr's multi-errors.
func classify(err error) (Class, string) {
	var badName *name.ErrBadName
	if errors.As(err, &badName) {
		return Permanent, ReasonInvalidReference
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return classifyResponse(te)
	}
	if isCertificateError(err) {
		return Waiting, ReasonCertificateInvalid
	}
	if isNetworkError(err) {
		return Transient, ReasonRegistryUnavailable
	}
	return Transient, ReasonRegistryError
}

// classifyResponse places an HTTP error answer. The status decides, except
// that a diagnostic code says more than a generic status (some registries rate
// limit with 403 TOOMANYREQUESTS or refuse with 400 DENIED).
func classifyResponse(te *transport.Error) (Class, string) {
	for _, d := range te.Errors {
		switch d.Code {
		case transport.TooManyRequestsErrorCode:
			return Transient, ReasonRateLimited
		case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
			if te.StatusCode < 500 {
				return Waiting, ReasonUnauthorized
			}
		}
	}
	switch code := te.StatusCode; {
	case code == http.StatusTooManyRequests:
		return Transient, ReasonRateLimited
	case code == http.StatusRequestTimeout || code >= 500:
		return Transient, ReasonRegistryUnavailable
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return Waiting, ReasonUnauthorized
	case code == http.StatusNotFound:
		return Waiting, ReasonImageNotFound
	case code >= 400:
		return Permanent, ReasonRegistryRejected
	}
	// A 2xx or 3xx that ggcr did not expect (say 200 where it wanted 201):
	// an odd registry or proxy, most likely passing.
	return Transient, ReasonRegistryError
}

func isCertificateError(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalid          x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownAuthority) || errors.As(err, &invalid) ||
		errors.As(err, &hostname) || errors.As(err, &verification)
}

// isNetworkError reports failures to reach a registry or to read its answer:
// refused and reset connections, DNS failures, timeouts (including the
// operation's deadline), and answers cut short.
func isNetworkError(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, net.ErrClosed) {
		return true
	}
	var (
		dnsErr *net.DNSError
		opErr  *net.OpError
		netErr net.Error
	)
	if errors.As(err, &dnsErr) || errors.As(err, &opErr) {
		return true
	}
	return errors.As(err, &netErr) && netErr.Timeout()
}

// newError classifies err as coming from host, keeping an existing
// classification.
func newError(host string, retryAfter time.Duration, err error) *Error {
	e := asError(err)
	out := *e
	if out.Host == "" {
		out.Host = host
	}
	if out.RetryAfter < retryAfter {
		out.RetryAfter = retryAfter
	}
	if out.Err == nil {
		out.Err = err
	}
	return &out
}

// permanentError and waitingError make classified errors of our own.
func permanentError(reason, host string, err error) *Error {
	return &Error{Class: Permanent, Reason: reason, Host: host, Err: err}
}

func waitingError(reason string, err error) *Error {
	return &Error{Class: Waiting, Reason: reason, Err: err}
}
