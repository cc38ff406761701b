package reconciler

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/buildsmith/buildsmith/pkg/worker"
)

// SecretWatches reads the Secrets that the ServiceAccounts in use name, each
// through a watch of its own selected by its name, as the kubelet reads the
// Secrets its pods mount. The controller's memory and its view of Secrets
// then follow the credentials its objects use, not every Secret of the
// cluster (Helm keeps each release in one), and it needs only get and watch
// on Secrets, never list — though RBAC cannot grant those verbs for named
// watches only: a grant of them allows a watch of every Secret, hence
// SecretLimits.Namespaces, which the chart's Roles match. A Secret nobody
// asked for in idle is forgotten and its watch closed.
//
// Changes are handed to the subscribers (trackers), so that fixing a
// Secret reconciles the objects that use it at once.
type SecretWatches struct {
	client   kubernetes.Interface
	lifetime context.Context
	// idle is how long a Secret stays watched after it was last read; the
	// tracker lease is right: an object that read it re-reads it at least
	// every resync, and the tracker forgets it after the same lease.
	idle time.Duration
	// syncTimeout bounds the wait for a new watch's first answer.
	syncTimeout time.Duration
	limits      SecretLimits
	clock       clock.WithTicker

	mu          sync.Mutex
	watches     map[types.NamespacedName]*secretWatch
	inNamespace map[string]int // watches by namespace
	subscribers []func(obj any)
	sweeping    bool
}

type secretWatch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	stopped  chan struct{} // closed once the informer has returned

	mu       sync.Mutex
	lastRead time.Time
	lastErr  error // of the last list or watch that failed, until one works
}

// NewSecretWatches returns SecretWatches over client that live until
// lifetime ends, within limits (the watches and Secret sizes; zero fields
// are unbounded).
func NewSecretWatches(lifetime context.Context, client kubernetes.Interface, idle time.Duration, limits SecretLimits) *SecretWatches {
	return &SecretWatches{client: client, lifetime: lifetime, idle: idle, syncTimeout: 10 * time.Second, limits: limits,
		clock: clock.RealClock{}, watches: map[types.NamespacedName]*secretWatch{}, inNamespace: map[string]int{}}
}

// Subscribe calls f with each Secret watched that is created, changed or
// deleted (as the informer hands it over: a *corev1.Secret or a
// cache.DeletedFinalStateUnknown).
func (s *SecretWatches) Subscribe(f func(obj any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subscribers = append(s.subscribers, f)
}

// Get returns the Secret, watching it from now on; a NotFound error when it
// does not exist. The first read of a Secret waits for its watch to start
// (one GET), at most until ctx ends or syncTimeout passes: a wait on the
// API server, during which the reconcile lends its worker (worker.Wait).
// A Secret beyond the limits is not read: one outside the namespaces
// allowed is a SecretNamespaceNotAllowed error before any request, a new
// watch when its namespace (or the controller) has as many as it may is a
// SecretWatchLimit error, a Secret larger than the limit a SecretTooLarge
// one. A read the API server forbids is a SecretForbidden error.
//
// Every read of a Secret — registry credentials (registry.Keychains) and
// signing keys (Credentials.SigningSecrets) — comes through here: this is
// the one place the namespaces are checked.
func (s *SecretWatches) Get(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if err := s.limits.checkNamespace(key); err != nil {
		return nil, err
	}
	w, err := s.watch(key)
	if err != nil {
		return nil, err
	}
	if err := s.awaitSync(ctx, key, w); err != nil {
		return nil, err
	}
	obj, exists, err := w.informer.GetStore().GetByKey(key.String())
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	secret := obj.(*corev1.Secret)
	if _, dropped := secret.Annotations[droppedAnnotation]; dropped {
		return nil, s.limits.tooLargeError(secret)
	}
	return secret, nil
}

// awaitSync returns once w, key's watch, has its first answer: at once
// when it has, else a wait on the API server, during which the reconcile
// lends its worker, at most until ctx ends or syncTimeout passes.
func (s *SecretWatches) awaitSync(ctx context.Context, key types.NamespacedName, w *secretWatch) error {
	if w.informer.HasSynced() {
		return nil
	}
	defer worker.Wait(ctx)()
	timeout := s.clock.NewTimer(s.syncTimeout)
	defer timeout.Stop()
	// Polled on the wall clock: this waits for the informer's goroutines,
	// which say nothing when they are done, not for time to pass.
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !w.informer.HasSynced() {
		select {
		case <-ctx.Done():
		case <-timeout.C():
		case <-poll.C:
			if err := w.err(); err != nil {
				return s.failed(key, w, err)
			}
			continue
		}
		if err := w.err(); err != nil {
			return s.failed(key, w, err)
		}
		return apierrors.NewTimeoutError(fmt.Sprintf("secret %s: the API server has not answered its read", key), 1)
	}
	return nil
}

// failed is the error of a first read that failed with err. A read the
// API server forbade closes the watch: its reflector would otherwise ask
// again and again (up to every 30 s, for the tracker lease) with nobody
// reading, while the objects that need the Secret wait for their next
// poll, which starts a new watch and asks once.
func (s *SecretWatches) failed(key types.NamespacedName, w *secretWatch, err error) error {
	if !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) {
		return err
	}
	s.mu.Lock()
	if s.watches[key] == w {
		s.remove(key, w)
	}
	s.mu.Unlock()
	if apierrors.IsForbidden(err) {
		return forbiddenError(key, err)
	}
	return err
}

// Watched is how many Secrets are watched.
func (s *SecretWatches) Watched() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

func (w *secretWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

func (w *secretWatch) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr = err
}

// watch returns key's watch, started if new and within the limits, and
// notes the read.
func (s *SecretWatches) watch(key types.NamespacedName) (*secretWatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if w := s.watches[key]; w != nil {
		w.mu.Lock()
		w.lastRead = now
		w.mu.Unlock()
		return w, nil
	}
	if inNamespace := s.inNamespace[key.Namespace]; (s.limits.WatchesPerNamespace > 0 && inNamespace >= s.limits.WatchesPerNamespace) ||
		(s.limits.Watches > 0 && len(s.watches) >= s.limits.Watches) {
		return nil, s.limits.watchLimitError(key, inNamespace, len(s.watches))
	}
	w := s.newWatch(key, now)
	ctx, stop := context.WithCancel(s.lifetime)
	w.stop = stop
	go func() {
		defer close(w.stopped)
		w.informer.RunWithContext(ctx)
	}()
	s.watches[key] = w
	s.inNamespace[key.Namespace]++
	if !s.sweeping {
		s.sweeping = true
		go s.sweep()
	}
	return w, nil
}

// newWatch returns key's watch, not started, read at now: an informer of
// that one Secret, handing its changes to the subscribers.
func (s *SecretWatches) newWatch(key types.NamespacedName, now time.Time) *secretWatch {
	w := &secretWatch{lastRead: now, stopped: make(chan struct{})}
	w.informer = cache.NewSharedIndexInformer(s.listWatch(key), &corev1.Secret{}, 0, cache.Indexers{})
	// What is read of the Secret, and none of it over the size limit.
	_ = w.informer.SetTransform(s.limits.trimSecret)
	_ = w.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		w.setErr(err)
	})
	forward := func(obj any) {
		if !isSecret(obj, key) {
			return
		}
		w.setErr(nil)
		s.mu.Lock()
		subscribers := append([]func(any){}, s.subscribers...)
		s.mu.Unlock()
		for _, f := range subscribers {
			f(obj)
		}
	}
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if initial {
				w.setErr(nil) // the reader that started the watch reads it now
				return
			}
			forward(obj)
		},
		UpdateFunc: func(_, obj any) { forward(obj) },
		DeleteFunc: forward,
	})
	return w
}

// isSecret reports whether obj (or the tombstone of it) is key's Secret: an
// API server must honour the field selector, but a fake need not.
func isSecret(obj any, key types.NamespacedName) bool {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	secret, ok := obj.(*corev1.Secret)
	return ok && secret.Namespace == key.Namespace && secret.Name == key.Name
}

// sweep closes the watches of Secrets not read in idle, until none is left.
func (s *SecretWatches) sweep() {
	tick := s.clock.NewTicker(max(s.idle/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-s.lifetime.Done():
			return
		case <-tick.C():
		}
		if !s.forgetIdle() {
			return
		}
	}
}

// forgetIdle closes the idle watches and reports whether any are left (or
// else that the sweeper stops).
func (s *SecretWatches) forgetIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for key, w := range s.watches {
		w.mu.Lock()
		idle := now.Sub(w.lastRead) >= s.idle
		w.mu.Unlock()
		if idle {
			s.remove(key, w)
		}
	}
	if len(s.watches) == 0 {
		s.sweeping = false
		return false
	}
	return true
}

// remove stops key's watch w and forgets it; s.mu must be held.
func (s *SecretWatches) remove(key types.NamespacedName, w *secretWatch) {
	w.stop()
	delete(s.watches, key)
	if s.inNamespace[key.Namespace]--; s.inNamespace[key.Namespace] == 0 {
		delete(s.inNamespace, key.Namespace)
	}
}

// listWatch lists key's Secret with a GET of it and watches it with a field
// selector on its name: the get and watch verbs, never list.
func (s *SecretWatches) listWatch(key types.NamespacedName) cache.ListerWatcher {
	secrets := s.client.CoreV1().Secrets(key.Namespace)
	return secretListWatch{
		list: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			secret, err := secrets.Get(ctx, key.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				// No version to watch from: the watch starts from now and
				// announces a Secret that exists by then.
				return &corev1.SecretList{}, nil
			}
			if err != nil {
				return nil, err
			}
			return &corev1.SecretList{ListMeta: metav1.ListMeta{ResourceVersion: secret.ResourceVersion},
				Items: []corev1.Secret{*secret}}, nil
		},
		watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", key.Name).String()
			return secrets.Watch(ctx, opts)
		},
	}
}

// secretListWatch is a ListerWatcher of one Secret.
type secretListWatch struct {
	list  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch func(context.Context, metav1.ListOptions) (watch.Interface, error)
}

func (lw secretListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return lw.list(ctx, opts)
}

func (lw secretListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return lw.watch(ctx, opts)
}

// IsWatchListSemanticsUnSupported keeps the reflector on list-then-watch:
// its list is the GET above, and a streaming watch-list would need servers
// (and fakes) to send initial events for a field-selected watch.
func (secretListWatch) IsWatchListSemanticsUnSupported() bool { return true }

// List and Watch are for the informer's older interface.
func (lw secretListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.list(context.Background(), opts)
}

func (lw secretListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.watch(context.Background(), opts)
}
