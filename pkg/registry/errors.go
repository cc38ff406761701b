package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/buildsmith/buildsmith/pkg/failure"
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
	ReasonTooManySecrets         = "TooManySecrets"
	ReasonInvalidReference       = "InvalidReference"
	ReasonInvalidImage           = "InvalidImage"
	ReasonPlatformNotFound       = "PlatformNotFound"
	ReasonInvalidSecret          = "InvalidSecret"
	ReasonRegistryRejected       = "RegistryRejected"
	// ReasonInsecureRegistry: the registry could be reached over plain
	// HTTP only, and it is not one allowed that (Options.InsecureRegistries).
	ReasonInsecureRegistry = "InsecureRegistry"
	// ReasonRegistryNotAllowed: a host requests may not go to (a loopback
	// address, unless Options.LoopbackRegistries).
	ReasonRegistryNotAllowed = "RegistryNotAllowed"
)

// Classify returns err's classification, nil for nil: the one err carries,
// else one placed from what ggcr, net/http or the standard library said (see
// the package doc). The order matters: the most specific evidence is looked
// at first, and errors.As sees through the wrapping of url.Error,
// net.OpError and ggcr's multi-errors.
func Classify(err error) *failure.Error {
	if err == nil {
		return nil
	}
	if e, ok := failure.As(err); ok {
		return e
	}
	classified := func(class failure.Class, reason string) *failure.Error {
		return &failure.Error{Class: class, Reason: reason, Err: err}
	}
	var badName *name.ErrBadName
	if errors.As(err, &badName) {
		return classified(failure.Permanent, ReasonInvalidReference)
	}
	// Before answers: for private and loopback hosts ggcr races https and
	// http, and an untrusted certificate on the https side comes with the
	// http side's 400 "HTTP request to HTTPS server".
	if isCertificateError(err) {
		return classified(failure.Waiting, ReasonCertificateInvalid)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return classified(classifyResponse(te))
	}
	if isNetworkError(err) {
		return classified(failure.Transient, ReasonRegistryUnavailable)
	}
	// A registry that speaks plain HTTP only, not allowed to (ours), or
	// met over HTTPS (net/http's error has no type of its own). Waiting,
	// like a bad certificate: the registry or the controller's flags must
	// change, not the object.
	var cleartext *cleartextRefusedError
	if errors.As(err, &cleartext) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return classified(failure.Waiting, ReasonInsecureRegistry)
	}
	return classified(failure.Transient, ReasonRegistryError)
}

// classifyResponse places an HTTP error answer. The status decides, except
// that a diagnostic code says more than a generic status (some registries rate
// limit with 403 TOOMANYREQUESTS or refuse with 400 DENIED).
func classifyResponse(te *transport.Error) (failure.Class, string) {
	for _, d := range te.Errors {
		switch d.Code {
		case transport.TooManyRequestsErrorCode:
			return failure.Transient, ReasonRateLimited
		case transport.BlobUnknownErrorCode, transport.ManifestBlobUnknownErrorCode,
			transport.BlobUploadInvalidErrorCode, transport.BlobUploadUnknownErrorCode:
			// Mid-push: a blob vanished (garbage collection, an upload
			// session expired). Pushing again uploads it again.
			if te.Request == nil || te.Request.Method != http.MethodGet && te.Request.Method != http.MethodHead {
				return failure.Transient, ReasonRegistryUnavailable
			}
		case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
			if te.StatusCode < 500 {
				return failure.Waiting, ReasonUnauthorized
			}
		}
	}
	m := meaningOf(te.StatusCode)
	return m.class, m.reason
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
		dnsErr  *net.DNSError
		opErr   *net.OpError
		stalled *stallError
		netErr  net.Error
	)
	// A stall may be joined with another failure that is no timeout (ggcr
	// tries https and http on loopback registries), so look for it first.
	if errors.As(err, &dnsErr) || errors.As(err, &opErr) || errors.As(err, &stalled) {
		return true
	}
	return errors.As(err, &netErr) && netErr.Timeout()
}

// secretInURL matches the query of a URL in an error message: upload
// locations and pre-signed blob URLs carry credentials there.
var secretInURL = regexp.MustCompile(`(https?://[^\s"?]+)\?[^\s"]*`)

// redacted is an error whose message had secrets removed; errors.Is and
// errors.As still see the original.
type redacted struct {
	err error
	msg string
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// redact removes URL queries and token-server answers from err's message.
// Messages end up in conditions, events and logs.
func redact(err error) error {
	msg := err.Error()
	clean := secretInURL.ReplaceAllString(msg, "$1?REDACTED")
	if i := strings.Index(clean, "bearer response:"); i >= 0 {
		clean = clean[:i+len("bearer response:")] + " REDACTED"
	}
	if clean == msg {
		return err
	}
	return &redacted{err: err, msg: clean}
}

// PlaceError says which place an error is about: a registry, or one of its
// repositories. It sits inside the classified error (failure.Error's Err);
// the Policy finds it with errors.As to wait on that place's circuit. The
// outermost one in a chain is the error's place.
type PlaceError struct {
	Place
	// Untried: nothing was sent to the place's repository; the call was
	// held back because others of the registry fail (its widespread
	// failure). It says nothing yet of the object's own images.
	Untried bool
	Err     error
}

func (e *PlaceError) Error() string { return e.Err.Error() }
func (e *PlaceError) Unwrap() error { return e.Err }

// PlaceOf returns the place err is about, if it names one.
func PlaceOf(err error) (*PlaceError, bool) {
	var pe *PlaceError
	ok := errors.As(err, &pe)
	return pe, ok
}

// placed returns a classified error about place, of class and reason.
func placed(place Place, class failure.Class, reason string, retryAfter time.Duration, err error) *failure.Error {
	return &failure.Error{Class: class, Reason: reason, RetryAfter: retryAfter, Err: &PlaceError{Place: place, Err: err}}
}

// at returns e about place instead of the place it names, if any.
func at(place Place, e *failure.Error) *failure.Error {
	out := *e
	out.Err = &PlaceError{Place: place, Err: e.Err}
	return &out
}

// newError classifies err as coming from host, keeping an existing
// classification and place, and redacts its message.
func newError(host string, retryAfter time.Duration, err error) *failure.Error {
	e := Classify(err)
	out := *e
	out.Err = redact(out.Err)
	if _, ok := PlaceOf(out.Err); !ok && host != "" {
		out.Err = &PlaceError{Place: Place{Host: host}, Err: out.Err}
	}
	if out.RetryAfter < retryAfter {
		out.RetryAfter = retryAfter
	}
	return &out
}

// permanentError and waitingError make classified errors of our own.
func permanentError(reason, host string, err error) *failure.Error {
	return placed(Place{Host: host}, failure.Permanent, reason, 0, err)
}

func waitingError(reason string, err error) *failure.Error {
	return &failure.Error{Class: failure.Waiting, Reason: reason, Err: err}
}
