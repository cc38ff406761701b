package registry

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	k8schain "github.com/google/go-containerregistry/pkg/authn/kubernetes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/buildsmith/buildsmith/pkg/failure"
)

// Anonymous is the keychain without credentials.
var Anonymous authn.Keychain = anonymous{}

type anonymous struct{}

func (anonymous) Resolve(authn.Resource) (authn.Authenticator, error) { return authn.Anonymous, nil }
func (anonymous) CacheKey() string                                    { return "anonymous" }

// Keychains builds keychains from ServiceAccounts, reading them and their
// Secrets from caches: no API request per reconcile.
type Keychains struct {
	ServiceAccounts corev1listers.ServiceAccountLister
	Secrets         SecretReader
	// MaxSecrets is the most Secrets a ServiceAccount may name (0: any):
	// each is read and watched, so a tenant must not choose how many.
	MaxSecrets int
}

// AnnotationSecretReferences marks a ServiceAccount the controller's cache
// keeps only some of the Secret names of (far more than any may name): its
// value is how many it names.
const AnnotationSecretReferences = "buildsmith.dev/secret-references"

// CheckSecretCount refuses a ServiceAccount that names more Secrets
// (imagePullSecrets and secrets together) than MaxSecrets, before any of
// them is read: a permanent TooManySecrets error naming the limit.
func (k Keychains) CheckSecretCount(sa *corev1.ServiceAccount) error {
	if n, trimmed := sa.Annotations[AnnotationSecretReferences]; trimmed {
		return &failure.Error{Class: failure.Permanent, Reason: ReasonTooManySecrets, Err: fmt.Errorf(
			"serviceaccount %s/%s names %s Secrets; the controller reads at most %d of one ServiceAccount (--max-service-account-secrets)",
			sa.Namespace, sa.Name, n, k.MaxSecrets)}
	}
	if k.MaxSecrets <= 0 || len(sa.ImagePullSecrets)+len(sa.Secrets) <= k.MaxSecrets {
		return nil
	}
	names := map[string]bool{}
	for _, ref := range sa.ImagePullSecrets {
		names[ref.Name] = true
	}
	for _, ref := range sa.Secrets {
		names[ref.Name] = true
	}
	if len(names) <= k.MaxSecrets {
		return nil
	}
	return &failure.Error{Class: failure.Permanent, Reason: ReasonTooManySecrets, Err: fmt.Errorf(
		"serviceaccount %s/%s names %d Secrets; the controller reads at most %d of one ServiceAccount (--max-service-account-secrets)",
		sa.Namespace, sa.Name, len(names), k.MaxSecrets)}
}

// SecretReader reads one Secret: a NotFound error when it does not exist.
type SecretReader interface {
	Get(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// ForServiceAccount returns the credentials of a ServiceAccount: its
// imagePullSecrets, then its secrets, of the docker config types
// (kubernetes.io/dockerconfigjson and kubernetes.io/dockercfg; others are
// ignored). ggcr's own constructor only logs a missing ServiceAccount or
// Secret and goes on anonymously, which later shows as a puzzling 401; here
// they are Waiting errors (ServiceAccountNotFound, SecretNotFound) that name
// what is missing. Errors never contain secret data.
//
// observe, when not nil, is called with the kind, namespace and name of the
// ServiceAccount and of every Secret looked up — also missing ones — so that
// callers can watch them and retry when they appear or change.
func (k Keychains) ForServiceAccount(ctx context.Context, namespace, serviceAccount string,
	observe func(kind, namespace, name string)) (authn.Keychain, error) {
	if observe == nil {
		observe = func(string, string, string) {}
	}
	observe("ServiceAccount", namespace, serviceAccount)
	sa, err := k.ServiceAccounts.ServiceAccounts(namespace).Get(serviceAccount)
	if apierrors.IsNotFound(err) {
		return nil, waitingError(ReasonServiceAccountNotFound,
			fmt.Errorf("serviceaccount %s/%s not found", namespace, serviceAccount))
	} else if err != nil {
		return nil, err
	}
	if err := k.CheckSecretCount(sa); err != nil {
		return nil, err
	}
	// imagePullSecrets exist to hold registry credentials: a missing one
	// is an error. secrets often name token Secrets long gone (Kubernetes
	// stopped creating them in 1.24): a missing one is skipped.
	var names []string
	required := map[string]bool{}
	for _, ref := range sa.ImagePullSecrets {
		names = append(names, ref.Name)
		required[ref.Name] = true
	}
	for _, ref := range sa.Secrets {
		names = append(names, ref.Name)
	}

	var secrets []corev1.Secret
	key := []string{"sa", namespace, serviceAccount}
	seen := map[string]bool{}
	for _, secretName := range names {
		if seen[secretName] {
			continue
		}
		seen[secretName] = true
		observe("Secret", namespace, secretName)
		secret, err := k.Secrets.Get(ctx, namespace, secretName)
		if apierrors.IsNotFound(err) && !required[secretName] {
			continue
		} else if apierrors.IsNotFound(err) {
			return nil, waitingError(ReasonSecretNotFound, fmt.Errorf(
				"secret %s/%s, referenced by serviceaccount %s, not found", namespace, secretName, serviceAccount))
		} else if err != nil {
			return nil, err
		}
		if secret.Type != corev1.SecretTypeDockerConfigJson && secret.Type != corev1.SecretTypeDockercfg {
			continue
		}
		// Check each secret alone so that the error can name it; the
		// parse error itself is left out, as it may quote secret data.
		if _, err := k8schain.NewFromPullSecrets(ctx, []corev1.Secret{*secret}); err != nil {
			return nil, &failure.Error{Class: failure.Permanent, Reason: ReasonInvalidSecret, Err: fmt.Errorf(
				"secret %s/%s does not hold a valid docker config of type %s", namespace, secretName, secret.Type)}
		}
		secrets = append(secrets, *secret)
		key = append(key, string(secret.UID)+"@"+secret.ResourceVersion)
	}
	if len(secrets) == 0 {
		return Anonymous, nil
	}
	kc, err := k8schain.NewFromPullSecrets(ctx, secrets)
	if err != nil {
		return nil, &failure.Error{Class: failure.Permanent, Reason: ReasonInvalidSecret, Err: fmt.Errorf(
			"the secrets of serviceaccount %s/%s do not hold valid docker configs", namespace, serviceAccount)}
	}
	return keychain{Keychain: kc, key: strings.Join(key, "/")}, nil
}

// keychain is a keychain with a cache key that changes whenever one of its
// secrets does, so that the Client's cached sessions never outlive the
// credentials they were made with.
type keychain struct {
	authn.Keychain
	key string
}

func (k keychain) CacheKey() string { return k.key }
