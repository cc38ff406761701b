package reconciler

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// SecretLimits bound what one tenant's ServiceAccounts can make the shared
// controller hold: every Secret a ServiceAccount names is read and watched
// (a watch, its goroutines and a copy of the Secret each), so without them
// a ServiceAccount listing thousands of names, or naming Secrets of a MiB,
// runs the controller out of memory for every tenant (issue 27).
type SecretLimits struct {
	// PerServiceAccount is the most Secrets (imagePullSecrets and secrets
	// together) a ServiceAccount may name for the controller to read it.
	PerServiceAccount int
	// WatchesPerNamespace and Watches bound the Secrets watched at once, in
	// one namespace and in all: one tenant reaching its bound waits, the
	// others are untouched (as long as the total is not reached, which the
	// per-namespace bound makes take many tenants).
	WatchesPerNamespace int
	Watches             int
	// Size is the largest Secret (its data and annotations, in bytes) the
	// controller keeps: registry credentials and cosign keys are a few KiB.
	// A larger one is kept without them and reading it fails. Its labels,
	// which nothing reads, are never kept (trimSecret).
	Size int
	// Namespaces, when set, are the only namespaces whose Secrets the
	// controller reads (--secret-namespaces): a Secret elsewhere is refused
	// before any request, as the RBAC the chart then grants (a Role in each
	// of them, no cluster-wide rule) would refuse it. Empty: any namespace.
	Namespaces []string
}

// DefaultSecretLimits: 32 Secrets a ServiceAccount, 64 watched in a
// namespace, 2,048 in all, 64 KiB each — at most 128 MiB of Secrets for the
// whole cluster, 4 MiB for one tenant.
func DefaultSecretLimits() SecretLimits {
	return SecretLimits{PerServiceAccount: 32, WatchesPerNamespace: 64, Watches: 2048, Size: 64 << 10}
}

// AddFlags registers the limits as flags, with l's values as defaults.
func (l *SecretLimits) AddFlags(fs *flag.FlagSet) {
	fs.Func("max-service-account-secrets",
		fmt.Sprintf("most Secrets (imagePullSecrets and secrets) a ServiceAccount may name, at most %d; one naming more is refused (%s) (default %d)",
			maxKeptSecretReferences, registry.ReasonTooManySecrets, l.PerServiceAccount),
		func(v string) error {
			n, err := strconv.Atoi(v)
			if err == nil && (n < 1 || n > maxKeptSecretReferences) {
				err = fmt.Errorf("must be between 1 and %d", maxKeptSecretReferences)
			}
			l.PerServiceAccount = n
			return err
		})
	fs.IntVar(&l.WatchesPerNamespace, "max-secret-watches-per-namespace", l.WatchesPerNamespace,
		"most Secrets of one namespace read and watched at once; objects needing more wait (SecretWatchLimit)")
	fs.IntVar(&l.Watches, "max-secret-watches", l.Watches, "most Secrets read and watched at once in all namespaces")
	fs.IntVar(&l.Size, "max-secret-size", l.Size, "largest Secret (bytes of data and annotations) the controller reads; a larger one is refused (SecretTooLarge)")
	fs.Func("secret-namespaces", "comma-separated namespaces whose Secrets the controller may read (registry credentials, signing keys); repeatable (default: any). "+
		"A Secret elsewhere is refused before any request ("+ReasonSecretNamespaceNotAllowed+"); grant get and watch on Secrets in exactly these namespaces",
		namespaceList(&l.Namespaces))
}

// Reasons of the limits.
const (
	ReasonSecretWatchLimit = "SecretWatchLimit"
	ReasonSecretTooLarge   = "SecretTooLarge"
	// ReasonSecretNamespaceNotAllowed: a Secret outside --secret-namespaces.
	ReasonSecretNamespaceNotAllowed = "SecretNamespaceNotAllowed"
	// ReasonSecretForbidden: the API server refused to let the controller
	// read a Secret (its RBAC is narrower than the namespaces it was told).
	ReasonSecretForbidden = "SecretForbidden"
)

// checkNamespace refuses key's Secret when it is outside Namespaces: a
// permanent error naming the flag and the namespaces. Only the operator
// can change it, and changing the flag restarts the controller, which
// reconciles everything anew.
func (l SecretLimits) checkNamespace(key types.NamespacedName) error {
	if len(l.Namespaces) == 0 || slices.Contains(l.Namespaces, key.Namespace) {
		return nil
	}
	return failure.Permanentf(ReasonSecretNamespaceNotAllowed,
		"secret %s not read: the controller reads Secrets of the namespaces %s only (--secret-namespaces)",
		key, strings.Join(l.Namespaces, ", "))
}

// forbiddenError says that the API server refused the read of key's
// Secret: waiting, as an operator fixes RBAC without touching the object
// (it is read again at the next poll).
func forbiddenError(key types.NamespacedName, err error) error {
	return failure.Waitingf(ReasonSecretForbidden,
		"secret %s: the API server refused the controller's read; it needs get and watch on Secrets in namespace %s "+
			"(the chart grants them in every namespace, or with secretNamespaces set in those listed only): %w",
		key, key.Namespace, err)
}

// watchLimitError says that key's Secret is not watched: its namespace, or
// the controller, has as many Secrets watched as it may.
func (l SecretLimits) watchLimitError(key types.NamespacedName, inNamespace, total int) error {
	if l.WatchesPerNamespace > 0 && inNamespace >= l.WatchesPerNamespace {
		return failure.Waitingf(ReasonSecretWatchLimit,
			"secret %s not read: %d Secrets of namespace %s are watched, the most for one namespace (--max-secret-watches-per-namespace); those unused for a while are released",
			key, inNamespace, key.Namespace)
	}
	return failure.Waitingf(ReasonSecretWatchLimit,
		"secret %s not read: %d Secrets are watched, the most the controller watches (--max-secret-watches); those unused for a while are released",
		key, total)
}

// sizeOf is the bytes of a Secret's data and annotations: what the
// controller keeps of it (trimSecret) but its names. Annotations count, as
// a tenant could otherwise make a kept Secret as large as the API server
// allows (256 KiB of annotations) with a byte of data.
func sizeOf(secret *corev1.Secret) int {
	n := 0
	for k, v := range secret.Data {
		n += len(k) + len(v)
	}
	for k, v := range secret.StringData {
		n += len(k) + len(v)
	}
	for k, v := range secret.Annotations {
		n += len(k) + len(v)
	}
	return n
}

// droppedAnnotation marks a Secret kept without its data and annotations,
// too large; its value is their size.
const droppedAnnotation = "buildsmith.dev/secret-data-dropped"

// tooLargeError says that a Secret was not read for its size.
func (l SecretLimits) tooLargeError(secret *corev1.Secret) error {
	return failure.Permanentf(ReasonSecretTooLarge,
		"secret %s/%s holds %s bytes of data and annotations; the controller reads Secrets of at most %d (--max-secret-size)",
		secret.Namespace, secret.Name, secret.Annotations[droppedAnnotation], l.Size)
}
