package reconciler

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	kubeclient "knative.dev/pkg/client/injection/kube/client"
	serviceaccountinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/serviceaccount"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/kmeta"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// Credentials finds the registry credentials of an object and tracks the
// ServiceAccount and Secrets they come from, so that creating or fixing any
// of them reconciles the object at once instead of at its next poll.
type Credentials struct {
	Keychains registry.Keychains
	Tracker   tracker.Interface
	// ClusterNamespaces, when set, are the only namespaces whose
	// ServiceAccounts cluster-scoped objects may use (Options.CredentialNamespaces).
	ClusterNamespaces []string
}

// ReasonServiceAccountNotAllowed: a cluster kind names a ServiceAccount in
// a namespace the operator did not open to cluster kinds.
const ReasonServiceAccountNotAllowed = "ServiceAccountNotAllowed"

// NewCredentials wires Credentials to the ServiceAccount informer and the
// process's SecretWatches (WithSecretWatches); enqueue is the controller's
// EnqueueKey.
func NewCredentials(ctx context.Context, enqueue func(types.NamespacedName), opts Options) Credentials {
	saInformer := serviceaccountinformer.Get(ctx)
	t := tracker.New(enqueue, controller.GetTrackerLease(ctx))
	saInformer.Informer().AddEventHandler(controller.HandleAll(
		controller.EnsureTypeMeta(t.OnChanged, corev1.SchemeGroupVersion.WithKind("ServiceAccount"))))
	secrets := secretWatchesFrom(ctx).get(ctx, opts.Secrets)
	secrets.Subscribe(controller.EnsureTypeMeta(t.OnChanged, corev1.SchemeGroupVersion.WithKind("Secret")))
	return NewCredentialsFrom(saInformer.Lister(), secrets, t, opts)
}

// sharedSecretWatches is the process's SecretWatches, shared by its
// controllers like an informer: made by the first controller that reads
// credentials, of its context's kube client and tracker lease and its
// options' limits (every controller is given the same).
type sharedSecretWatches struct {
	mu      sync.Mutex
	watches *SecretWatches
}

type secretWatchesKey struct{}

// WithSecretWatches returns ctx carrying the Secret watches that the
// controllers made from it share: one per process (see SecretWatches).
func WithSecretWatches(ctx context.Context) context.Context {
	return context.WithValue(ctx, secretWatchesKey{}, &sharedSecretWatches{})
}

func secretWatchesFrom(ctx context.Context) *sharedSecretWatches {
	shared, ok := ctx.Value(secretWatchesKey{}).(*sharedSecretWatches)
	if !ok {
		panic("reconciler: the context carries no Secret watches; make it with WithSecretWatches")
	}
	return shared
}

// get returns the shared SecretWatches, made on the first call with the
// kube client of ctx, living until ctx ends (and made anew by a call after
// that).
func (s *sharedSecretWatches) get(ctx context.Context, limits SecretLimits) *SecretWatches {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches == nil || s.watches.lifetime.Err() != nil {
		s.watches = NewSecretWatches(ctx, kubeclient.Get(ctx), controller.GetTrackerLease(ctx), limits)
	}
	return s.watches
}

// NewCredentialsFrom is Credentials over the given ServiceAccounts, Secrets
// and tracker.
func NewCredentialsFrom(accounts corev1listers.ServiceAccountLister, secrets registry.SecretReader,
	t tracker.Interface, opts Options) Credentials {
	return Credentials{
		Keychains:         registry.Keychains{ServiceAccounts: accounts, Secrets: secrets, MaxSecrets: opts.Secrets.PerServiceAccount},
		Tracker:           t,
		ClusterNamespaces: opts.CredentialNamespaces,
	}
}

// ForServiceAccount returns the keychain of the named ServiceAccount, or the
// anonymous one when ref is nil; obj is the object that depends on it.
func (c Credentials) ForServiceAccount(ctx context.Context, obj kmeta.Accessor, ref *v1alpha1.ServiceAccountRef) (authn.Keychain, error) {
	if ref == nil {
		return registry.Anonymous, nil
	}
	if err := c.allowed(obj, ref); err != nil {
		return nil, err
	}
	return c.Keychains.ForServiceAccount(ctx, ref.Namespace, ref.Name, func(kind, namespace, name string) {
		// A failed track only costs the immediate retry; the poll remains.
		_ = c.Tracker.TrackReference(tracker.Reference{APIVersion: "v1", Kind: kind, Namespace: namespace, Name: name}, obj)
	})
}

// allowed refuses a cluster-scoped obj's ServiceAccount in a namespace the
// operator did not open to cluster kinds. Every path that reads an
// account's credentials or keys checks it itself.
func (c Credentials) allowed(obj kmeta.Accessor, ref *v1alpha1.ServiceAccountRef) error {
	if obj.GetNamespace() == "" && len(c.ClusterNamespaces) > 0 && !slices.Contains(c.ClusterNamespaces, ref.Namespace) {
		return failure.Permanentf(ReasonServiceAccountNotAllowed,
			"serviceAccountRef %s/%s: cluster kinds may use ServiceAccounts of the namespaces %s only (--cluster-credential-namespaces)",
			ref.Namespace, ref.Name, strings.Join(c.ClusterNamespaces, ", "))
	}
	return nil
}

// EnqueueOnChange is the event handler of a controller's own kind: it
// enqueues objects that are new, deleted, or changed in what a person
// changes (generation, labels, annotations, deletion), and not those whose
// only change is the status the controller just wrote — that echo would
// requeue the object at once and defeat the backoff it was given.
func EnqueueOnChange(enqueue func(any)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(oldObj, newObj any) {
			before, ok1 := oldObj.(metav1.Object)
			after, ok2 := newObj.(metav1.Object)
			if !ok1 || !ok2 || before.GetGeneration() != after.GetGeneration() ||
				!maps.Equal(before.GetLabels(), after.GetLabels()) ||
				!maps.Equal(before.GetAnnotations(), after.GetAnnotations()) ||
				!before.GetDeletionTimestamp().Equal(after.GetDeletionTimestamp()) {
				enqueue(newObj)
			}
		},
		DeleteFunc: enqueue,
	}
}

// SigningSecrets returns the Secrets of the named ServiceAccount's
// secrets (not its imagePullSecrets, as kpack reads them) that hold a
// cosign key pair, i.e. have the data keys hasKeys names; none when ref is
// nil. Missing Secrets are skipped; each is tracked, so that adding or
// changing one reconciles obj.
func (c Credentials) SigningSecrets(ctx context.Context, obj kmeta.Accessor, ref *v1alpha1.ServiceAccountRef, hasKeys ...string) ([]*corev1.Secret, error) {
	if ref == nil {
		return nil, nil
	}
	track := func(kind, name string) {
		_ = c.Tracker.TrackReference(tracker.Reference{APIVersion: "v1", Kind: kind, Namespace: ref.Namespace, Name: name}, obj)
	}
	if err := c.allowed(obj, ref); err != nil {
		return nil, err
	}
	track("ServiceAccount", ref.Name)
	sa, err := c.Keychains.ServiceAccounts.ServiceAccounts(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil // ForServiceAccount reports it
	} else if err != nil {
		return nil, err
	}
	if err := c.Keychains.CheckSecretCount(sa); err != nil {
		return nil, err
	}
	var out []*corev1.Secret
	seen := map[string]bool{}
	for _, s := range sa.Secrets {
		if seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		track("Secret", s.Name)
		secret, err := c.Keychains.Secrets.Get(ctx, ref.Namespace, s.Name)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(hasKeys, func(k string) bool { _, ok := secret.Data[k]; return !ok }) {
			out = append(out, secret)
		}
	}
	return out, nil
}
