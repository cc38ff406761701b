package receiver

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/logging"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/receiver"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// ServerOptions are the receiver server's flags.
type ServerOptions struct {
	// Port is where notifications are taken (0: no server).
	Port int
	// EventsPerSecond and Burst bound the notifications one Receiver
	// takes, on each replica: beyond them, 429.
	EventsPerSecond float64
	Burst           int
	// Concurrent bounds the notifications read at once (the rest: 503).
	Concurrent int
}

// DefaultServerOptions are the flags' defaults.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{Port: 9292, EventsPerSecond: 5, Burst: 20, Concurrent: 32}
}

// AddFlags registers the options as flags, with o's values as defaults.
func (o *ServerOptions) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Port, "receiver-port", o.Port, "port of the Receivers' webhooks (0: none)")
	fs.Float64Var(&o.EventsPerSecond, "receiver-events-per-second", o.EventsPerSecond,
		"notifications one Receiver may send a second, on each replica; beyond it (and --receiver-burst) they are refused with 429")
	fs.IntVar(&o.Burst, "receiver-burst", o.Burst, "notifications one Receiver may send at once")
	fs.IntVar(&o.Concurrent, "receiver-concurrent", o.Concurrent, "notifications read at once by a replica; beyond it they are refused with 503")
}

// Results of a notification, the result label of
// buildsmith_receiver_events_total.
const (
	resultWoken        = "woken"        // objects were asked to reconcile
	resultUnmatched    = "unmatched"    // a push of a repository nothing in reach reads
	resultIgnored      = "ignored"      // not a push
	resultUnauthorized = "unauthorized" // no token, another one, a bad signature
	resultMalformed    = "malformed"
	resultTooLarge     = "too_large"
	resultRateLimited  = "rate_limited"
	resultNotFound     = "not_found" // no Ready Receiver has the path
	resultBusy         = "busy"
	resultFailed       = "failed" // the API server refused a reconcile request
)

var events, _ = otel.Meter("buildsmith.dev/receiver").Int64Counter("buildsmith.receiver.events",
	metric.WithDescription("Notifications taken by the Receivers' webhooks, by the Receiver's type and the result."))

// webhookIndex indexes Receivers by their webhook path.
const webhookIndex = "buildsmith.dev/webhook-path"

func webhookPathOf(obj any) ([]string, error) {
	if rc, ok := obj.(*v1alpha1.Receiver); ok && rc.Status.WebhookPath != "" {
		return []string{rc.Status.WebhookPath}, nil
	}
	return nil, nil
}

// server takes the notifications of every Receiver.
type server struct {
	receivers       cache.Indexer
	secrets         registry.SecretReader
	kinds           []wakeable
	waker           *waker
	systemNamespace string
	opts            ServerOptions
	synced          func() bool
	slots           chan struct{}

	mu       sync.Mutex
	limiters map[types.UID]*rate.Limiter
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		w.WriteHeader(http.StatusOK)
		return
	}
	typ, result, status := s.take(w, r)
	events.Add(r.Context(), 1, metric.WithAttributes(attribute.String("type", typ), attribute.String("result", result)))
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
}

// take reads a notification and wakes what it names; it returns the
// Receiver's type, the result and the HTTP status to answer.
func (s *server) take(w http.ResponseWriter, r *http.Request) (typ, result string, status int) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/hook/") {
		return "unknown", resultNotFound, http.StatusNotFound
	}
	if !s.synced() {
		return "unknown", resultBusy, http.StatusServiceUnavailable
	}
	rc := s.receiverAt(r.URL.Path)
	if rc == nil {
		return "unknown", resultNotFound, http.StatusNotFound
	}
	typ = rc.Spec.Type
	if !s.limiter(rc).Allow() {
		return typ, resultRateLimited, http.StatusTooManyRequests
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		return typ, resultBusy, http.StatusServiceUnavailable
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	result, status = s.read(ctx, rc, w, r)
	return typ, result, status
}

// read authenticates and reads the notification for rc, and wakes the
// objects it names.
func (s *server) read(ctx context.Context, rc *v1alpha1.Receiver, w http.ResponseWriter, r *http.Request) (string, int) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, receiver.MaxBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return resultTooLarge, http.StatusRequestEntityTooLarge
	} else if err != nil {
		return resultMalformed, http.StatusBadRequest
	}
	// The token now, not the one the path was made of: a Receiver whose
	// token changed takes notifications at its new path only.
	token, err := readToken(ctx, s.secrets, rc)
	if err != nil || receiver.WebhookPath(token, rc.Name, rc.Namespace) != rc.Status.WebhookPath {
		return resultNotFound, http.StatusNotFound
	}
	pushes, err := receiver.Read(rc.Spec.Type, token, r.Header, body)
	switch {
	case errors.Is(err, receiver.ErrUnauthorized):
		return resultUnauthorized, http.StatusUnauthorized
	case err != nil:
		return resultMalformed, http.StatusBadRequest
	case len(pushes) == 0:
		return resultIgnored, http.StatusAccepted
	}
	found, err := targets(s.kinds, rc, s.systemNamespace, pushes)
	if err != nil {
		return resultFailed, http.StatusInternalServerError
	}
	if len(found) == 0 {
		return resultUnmatched, http.StatusAccepted
	}
	woken, err := s.waker.wake(ctx, found)
	logger := logging.FromContext(ctx)
	if err != nil {
		logger.Warnw("receiver: "+err.Error(), "receiver", describe(rc))
		return resultFailed, http.StatusServiceUnavailable
	}
	logger.Infow("receiver: reconciles requested", "receiver", describe(rc), "pushes", len(pushes), "objects", len(found), "woken", woken)
	return resultWoken, http.StatusAccepted
}

// receiverAt is the Ready Receiver whose webhook path is path, if any.
func (s *server) receiverAt(path string) *v1alpha1.Receiver {
	found, err := s.receivers.ByIndex(webhookIndex, path)
	if err != nil {
		return nil
	}
	for _, obj := range found {
		if rc, ok := obj.(*v1alpha1.Receiver); ok && rc.Status.IsReady() {
			return rc
		}
	}
	return nil
}

// limiter is rc's rate limiter, made on its first notification; those of
// Receivers gone are dropped once there are many.
func (s *server) limiter(rc *v1alpha1.Receiver) *rate.Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.limiters[rc.UID]; ok {
		return l
	}
	if len(s.limiters) >= 1024 {
		for uid := range s.limiters {
			if !s.exists(uid) {
				delete(s.limiters, uid)
			}
		}
	}
	l := rate.NewLimiter(rate.Limit(s.opts.EventsPerSecond), s.opts.Burst)
	s.limiters[rc.UID] = l
	return l
}

// exists reports whether a Receiver of that UID is in the cache.
func (s *server) exists(uid types.UID) bool {
	for _, obj := range s.receivers.List() {
		if rc, ok := obj.(*v1alpha1.Receiver); ok && rc.UID == uid {
			return true
		}
	}
	return false
}
