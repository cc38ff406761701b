package receiver

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"knative.dev/pkg/logging"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/receiver"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// ServerOptions are the receiver server's flags.
type ServerOptions struct {
	// Port is where notifications are taken (0: no server).
	Port int
	// EventsPerSecond and Burst bound the notifications that wake
	// something, of one namespace's Receivers, on each replica: beyond
	// them, 429.
	EventsPerSecond float64
	Burst           int
	// Concurrent bounds the notifications read at once, NamespaceConcurrent
	// those of one namespace's Receivers (the rest: 503): a slow sender
	// holds its namespace's reads, not every tenant's.
	Concurrent, NamespaceConcurrent int
}

// DefaultServerOptions are the flags' defaults.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{Port: 9292, EventsPerSecond: 5, Burst: 20, Concurrent: 64, NamespaceConcurrent: 4}
}

// AddFlags registers the options as flags, with o's values as defaults.
func (o *ServerOptions) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Port, "receiver-port", o.Port, "port of the Receivers' webhooks (0: none)")
	fs.Float64Var(&o.EventsPerSecond, "receiver-events-per-second", o.EventsPerSecond,
		"notifications that wake something one namespace's Receivers may send a second, on each replica; beyond it (and --receiver-burst) they are refused with 429")
	fs.IntVar(&o.Burst, "receiver-burst", o.Burst, "notifications that wake something one namespace's Receivers may send at once")
	fs.IntVar(&o.Concurrent, "receiver-concurrent", o.Concurrent, "notifications read at once by a replica; beyond it they are refused with 503")
	fs.IntVar(&o.NamespaceConcurrent, "receiver-namespace-concurrent", o.NamespaceConcurrent,
		"notifications to one namespace's Receivers read at once by a replica; beyond it they are refused with 503")
}

// Results of a notification, the result label of
// buildsmith_receiver_events_total.
const (
	resultWoken        = "woken"        // recorded: every replica wakes what reads the repositories
	resultUnmatched    = "unmatched"    // a push of a repository nothing in reach reads
	resultIgnored      = "ignored"      // not a push
	resultUnauthorized = "unauthorized" // no token, another one, a bad signature
	resultMalformed    = "malformed"
	resultTooLarge     = "too_large"
	resultRateLimited  = "rate_limited"
	resultNotFound     = "not_found" // no Ready Receiver has the path
	resultBusy         = "busy"
	resultFailed       = "failed" // the API server refused the record
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
	systemNamespace string
	opts            ServerOptions
	synced          func() bool
	// record writes a notification into the Receiver's status.
	record func(ctx context.Context, rc *v1alpha1.Receiver, n v1alpha1.ReceiverNotification) error
	now    func() time.Time
	slots  *slots
	rates  *namespaceRates

	mu     sync.Mutex
	recent map[types.UID]recorded // the last notification recorded, by Receiver
}

// recorded is a notification recorded, to coalesce those that follow it.
type recorded struct {
	at  time.Time
	key string // coalescingKey
}

// coalesceWindow is how long a notification naming the same repositories
// and tags as the last one recorded is not recorded again: a registry may
// send the same event more than once (its retries, several endpoints).
const coalesceWindow = time.Second

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

// take reads a notification and records what it names; it returns the
// Receiver's type, the result and the HTTP status to answer.
func (s *server) take(w http.ResponseWriter, r *http.Request) (typ, result string, status int) {
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/hook/") {
		return "unknown", resultNotFound, http.StatusNotFound
	}
	if !s.synced() {
		return "unknown", resultBusy, http.StatusServiceUnavailable
	}
	candidates := s.receiversAt(r.URL.Path)
	if len(candidates) == 0 {
		return "unknown", resultNotFound, http.StatusNotFound
	}
	// One namespace's senders, however slow, hold its own reads.
	release, ok := s.slots.take(candidates[0].Namespace)
	if !ok {
		return candidates[0].Spec.Type, resultBusy, http.StatusServiceUnavailable
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, receiver.MaxBody))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return candidates[0].Spec.Type, resultTooLarge, http.StatusRequestEntityTooLarge
	} else if err != nil {
		return candidates[0].Spec.Type, resultMalformed, http.StatusBadRequest
	}
	rc, token, result, status := s.authority(ctx, candidates)
	if rc == nil {
		return candidates[0].Spec.Type, result, status
	}
	result, status = s.read(ctx, rc, token, r.Header, body)
	return rc.Spec.Type, result, status
}

// authority is the Receiver of candidates (those whose status has the
// path) whose token, read now, makes that path, and the token: a Receiver
// whose token changed takes notifications at its new path only. Otherwise
// the result and status to answer.
func (s *server) authority(ctx context.Context, candidates []*v1alpha1.Receiver) (*v1alpha1.Receiver, []byte, string, int) {
	result, status := resultNotFound, http.StatusNotFound
	for _, rc := range candidates {
		token, err := readToken(ctx, s.secrets, rc)
		if f, ok := failure.As(err); err != nil && (!ok || f.Class == failure.Transient) {
			// Not the sender's doing (the API server, a Secret watch
			// limit): it may send again.
			logging.FromContext(ctx).Warnw("receiver: reading the token: "+err.Error(), "receiver", describe(rc))
			result, status = resultBusy, http.StatusServiceUnavailable
			continue
		}
		if err == nil && receiver.WebhookPath(token, rc.Name, rc.Namespace) == rc.Status.WebhookPath {
			return rc, token, "", 0
		}
	}
	return nil, nil, result, status
}

// read authenticates and reads the notification for rc, and records the
// repositories it names that something in rc's reach reads.
func (s *server) read(ctx context.Context, rc *v1alpha1.Receiver, token []byte, header http.Header, body []byte) (string, int) {
	pushes, err := receiver.Read(rc.Spec.Type, token, header, body)
	switch {
	case errors.Is(err, receiver.ErrUnauthorized):
		return resultUnauthorized, http.StatusUnauthorized
	case err != nil:
		return resultMalformed, http.StatusBadRequest
	case len(pushes) == 0:
		return resultIgnored, http.StatusAccepted
	}
	var repositories []string
	for _, p := range pushes {
		if !slices.Contains(repositories, p.Repository) {
			repositories = append(repositories, p.Repository)
		}
	}
	found, matched := targets(s.kinds, rc, s.systemNamespace, repositories)
	if len(found) == 0 {
		return resultUnmatched, http.StatusAccepted
	}
	now := s.now()
	key := coalescingKey(pushes, matched)
	if s.coalesced(rc.UID, key, now) {
		return resultWoken, http.StatusAccepted
	}
	if !s.rates.allow(rc.Namespace, now) {
		return resultRateLimited, http.StatusTooManyRequests
	}
	n := v1alpha1.ReceiverNotification{ReceivedAt: metav1.NewMicroTime(now), Repositories: matched}
	if err := s.record(ctx, rc, n); err != nil {
		logging.FromContext(ctx).Warnw("receiver: recording a notification: "+err.Error(), "receiver", describe(rc))
		return resultFailed, http.StatusServiceUnavailable
	}
	s.remember(rc.UID, key, now)
	logging.FromContext(ctx).Infow("receiver: notification recorded", "receiver", describe(rc),
		"repositories", matched, "objects", len(found))
	return resultWoken, http.StatusAccepted
}

// receiversAt are the Ready Receivers whose status has path.
func (s *server) receiversAt(path string) []*v1alpha1.Receiver {
	found, _ := s.receivers.ByIndex(webhookIndex, path) // the index is there: added before the informer started
	var out []*v1alpha1.Receiver
	for _, obj := range found {
		if rc, ok := obj.(*v1alpha1.Receiver); ok && rc.Status.IsReady() {
			out = append(out, rc)
		}
	}
	return out
}

// coalescingKey is what a notification names of the matched
// repositories: each with its tag. A multi-platform push notifies each
// platform's manifest (by digest, no tag) before the index under its tag:
// the first wakes objects too early to see the tag move, so the second,
// naming the tag, must wake them again.
func coalescingKey(pushes []receiver.Push, matched []string) string {
	var named []string
	for _, p := range pushes {
		if slices.Contains(matched, p.Repository) {
			named = append(named, p.Repository+":"+p.Tag)
		}
	}
	slices.Sort(named)
	return strings.Join(named, " ")
}

// coalesced reports whether the Receiver of uid recorded a notification
// of the same key less than coalesceWindow before now.
func (s *server) coalesced(uid types.UID, key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	last, ok := s.recent[uid]
	return ok && last.key == key && now.Sub(last.at) < coalesceWindow
}

// remember records that the Receiver of uid recorded a notification of
// key at now.
func (s *server) remember(uid types.UID, key string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.recent) >= maxRemembered {
		for k, last := range s.recent {
			if now.Sub(last.at) >= coalesceWindow {
				delete(s.recent, k)
			}
		}
	}
	s.recent[uid] = recorded{at: now, key: key}
}

// maxRemembered is how many Receivers' (or namespaces') entries the
// server's maps hold before it drops those no longer needed.
const maxRemembered = 1024

// slots bound the notifications read at once: in all, and of one
// namespace's Receivers.
type slots struct {
	mu                  sync.Mutex
	total, perNamespace int
	inUse               int
	byNamespace         map[string]int
}

func newSlots(total, perNamespace int) *slots {
	return &slots{total: max(total, 1), perNamespace: max(perNamespace, 1), byNamespace: map[string]int{}}
}

// take takes a slot for a notification to namespace, and returns what
// gives it back; false when none is free.
func (s *slots) take(namespace string) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUse >= s.total || s.byNamespace[namespace] >= s.perNamespace {
		return nil, false
	}
	s.inUse++
	s.byNamespace[namespace]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.inUse--
		if s.byNamespace[namespace]--; s.byNamespace[namespace] == 0 {
			delete(s.byNamespace, namespace)
		}
	}, true
}

// namespaceRates are a token bucket for each namespace's Receivers.
type namespaceRates struct {
	mu      sync.Mutex
	limit   rate.Limit
	burst   int
	buckets map[string]*bucket
}

type bucket struct {
	limiter  *rate.Limiter
	lastUsed time.Time
}

func newNamespaceRates(perSecond float64, burst int) *namespaceRates {
	return &namespaceRates{limit: rate.Limit(perSecond), burst: max(burst, 1), buckets: map[string]*bucket{}}
}

// allow takes a token of namespace's bucket at now. Buckets idle long
// enough to be full again are dropped once there are many: one made anew
// is full too.
func (n *namespaceRates) allow(namespace string, now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	b, ok := n.buckets[namespace]
	if !ok {
		if len(n.buckets) >= maxRemembered {
			full := time.Duration(float64(n.burst) / float64(n.limit) * float64(time.Second))
			for ns, other := range n.buckets {
				if now.Sub(other.lastUsed) > full {
					delete(n.buckets, ns)
				}
			}
		}
		b = &bucket{limiter: rate.NewLimiter(n.limit, n.burst)}
		n.buckets[namespace] = b
	}
	b.lastUsed = now
	return b.limiter.AllowN(now, 1)
}
