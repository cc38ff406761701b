// Package failure is the vocabulary of classified errors: a Class that says
// what the controller does about an error, and a Reason that the object's
// conditions show. It has no dependencies, so that pure packages (image
// assembly, order resolution) can say how their errors are meant without
// importing Kubernetes or registry code.
//
// Errors are classified once, where they arise: pkg/registry for registry
// and network errors, the pure packages for their own, pkg/reconciler for
// Kubernetes API errors. pkg/reconciler maps a class to conditions and a
// requeue in one place.
package failure

import (
	"errors"
	"fmt"
	"time"
)

// Class says what to do about an error.
type Class int

const (
	// Transient errors go away by themselves: retry with backoff.
	Transient Class = iota + 1
	// Waiting errors need something to appear or change (an image, a
	// Secret, a dependency becoming Ready): poll slowly, and retry at once
	// when a dependency changes.
	Waiting
	// Permanent errors need a person to change the input: report Stalled
	// and retry only when the object or a dependency changes.
	Permanent
)

func (c Class) String() string {
	switch c {
	case Transient:
		return "Transient"
	case Waiting:
		return "Waiting"
	case Permanent:
		return "Permanent"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Error is a classified error.
type Error struct {
	Class Class
	// Reason is a CamelCase word for the condition's reason.
	Reason string
	// RetryAfter is how long the server asked the caller to wait, if it did.
	RetryAfter time.Duration
	// Err is the underlying error; its message is the condition's message.
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// As returns err's classification, if it has one.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Permanentf returns a Permanent error with a formatted message.
func Permanentf(reason, format string, args ...any) *Error {
	return &Error{Class: Permanent, Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Waitingf returns a Waiting error with a formatted message.
func Waitingf(reason, format string, args ...any) *Error {
	return &Error{Class: Waiting, Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Transientf returns a Transient error with a formatted message.
func Transientf(reason, format string, args ...any) *Error {
	return &Error{Class: Transient, Reason: reason, Err: fmt.Errorf(format, args...)}
}
