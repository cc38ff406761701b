package reconciler

import (
	"context"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	serviceaccountinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/serviceaccount"
	"knative.dev/pkg/logging"

	"github.com/buildsmith/buildsmith/pkg/registry"
)

// What the controller's caches keep (issue 37): its informers watch every
// namespace, so whatever a tenant writes into an object they cache — up to
// the API server's 1.5 MiB — would live in the controller's memory, for
// every tenant (managedFields alone were a good part of its memory at
// 10,000 builders, bench § 12). Each cache drops what the controller
// neither reads nor writes back as the object arrives (client-go's
// transform, run before the object is stored or handed to any handler).

// TrimCaches sets the transforms of the informers a controller made of ctx
// reads: TrimServiceAccount on the ServiceAccounts' and TrimObject on
// kinds, informers of buildsmith's kinds. The informers are shared: every
// controller sets the same transforms on those it reads, so none depends on
// another controller being built. It must run before the informers start,
// as controller constructors do (sharedmain starts the informers once every
// controller is built); an informer already running keeps its whole
// objects, which costs memory only, and is logged.
func TrimCaches(ctx context.Context, kinds ...cache.SharedIndexInformer) {
	setTransform(ctx, serviceaccountinformer.Get(ctx).Informer(), TrimServiceAccount)
	for _, informer := range kinds {
		setTransform(ctx, informer, TrimObject)
	}
}

func setTransform(ctx context.Context, informer cache.SharedIndexInformer, transform cache.TransformFunc) {
	if err := informer.SetTransform(transform); err != nil {
		logging.FromContext(ctx).Warnw("the informer's cache keeps whole objects", "error", err)
	}
}

// TrimObject is the transform of buildsmith's kinds: the object less its
// managedFields, which the controller never reads. All else stays: spec,
// status, finalizers, ownerReferences, labels and annotations — the
// last-applied-configuration too, though unread. The generated reconcilers
// write status with UpdateStatus from a copy of the cached object: the API
// server keeps the stored metadata there, and the stored managedFields when
// the request carries none, but it still counts an annotation missing from
// the request as removed by the writer and takes it out of its owner's
// managedFields entry (kubectl's, for last-applied; its value stays).
// Dropping it would rewrite every kubectl-applied object's managedFields at
// each status write (test/apiserver checks that they stay). Anything but a
// metav1.Object (a cache.DeletedFinalStateUnknown, whose object was trimmed
// when it was stored) is returned as it is.
func TrimObject(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// dropLastApplied removes o's last-applied-configuration annotation, in
// place: a transform is handed the object before anyone else sees it.
func dropLastApplied(o metav1.Object) {
	annotations := o.GetAnnotations()
	if _, ok := annotations[corev1.LastAppliedConfigAnnotation]; !ok {
		return
	}
	delete(annotations, corev1.LastAppliedConfigAnnotation)
	if len(annotations) == 0 {
		o.SetAnnotations(nil)
	}
}

// maxKeptSecretReferences bounds the Secret names kept of each list of a
// ServiceAccount (--max-service-account-secrets may be at most this): a
// 1.5 MiB account may name 90,000, each an ObjectReference of some 100
// bytes in memory.
const maxKeptSecretReferences = 128

// TrimServiceAccount is the transform of the ServiceAccounts: of all a
// tenant may write on one, the controller reads the names of its secrets
// and imagePullSecrets (registry.Keychains, Credentials.SigningSecrets) and
// nothing else — no label or annotation (the kpack.io/cosign annotations are
// on the Secrets). The copy kept has those names and the identity of the
// account (name, namespace, uid, resourceVersion, generation), which
// listers and trackers key on.
func TrimServiceAccount(obj any) (any, error) {
	sa, ok := obj.(*corev1.ServiceAccount)
	if !ok {
		return obj, nil
	}
	kept := &corev1.ServiceAccount{
		TypeMeta: sa.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: sa.Name, Namespace: sa.Namespace, UID: sa.UID,
			ResourceVersion: sa.ResourceVersion, Generation: sa.Generation},
		// A copy: a slice of the list would keep all of it.
		ImagePullSecrets: slices.Clone(sa.ImagePullSecrets[:min(len(sa.ImagePullSecrets), maxKeptSecretReferences)]),
	}
	if len(sa.Secrets) > 0 {
		kept.Secrets = make([]corev1.ObjectReference, min(len(sa.Secrets), maxKeptSecretReferences))
		for i := range kept.Secrets {
			kept.Secrets[i].Name = sa.Secrets[i].Name
		}
	}
	// Far more than any account may name (--max-service-account-secrets):
	// the count is kept, for TooManySecrets to say.
	if n := len(sa.ImagePullSecrets) + len(sa.Secrets); n > len(kept.ImagePullSecrets)+len(kept.Secrets) {
		kept.Annotations = map[string]string{registry.AnnotationSecretReferences: strconv.Itoa(n)}
	} else if n, err := strconv.Atoi(sa.Annotations[registry.AnnotationSecretReferences]); err == nil {
		kept.Annotations = map[string]string{registry.AnnotationSecretReferences: strconv.Itoa(n)} // trimmed before
	}
	return kept, nil
}

// trimSecret is the transform of each Secret watch (SecretWatches): the
// Secret's identity, type, data and annotations (kpack.io/cosign.* are
// read), less the last-applied-configuration annotation, which would hold
// a second copy of the data of a Secret made by kubectl apply. A Secret
// whose data and annotations together exceed l.Size is kept without them,
// marked with droppedAnnotation: its watch still says when it changes (or
// shrinks), and SecretWatches.Get refuses it.
func (l SecretLimits) trimSecret(obj any) (any, error) {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	kept := &corev1.Secret{
		TypeMeta: secret.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: secret.Name, Namespace: secret.Namespace, UID: secret.UID,
			ResourceVersion: secret.ResourceVersion, Generation: secret.Generation, Annotations: secret.Annotations},
		Type: secret.Type, Data: secret.Data, StringData: secret.StringData,
	}
	dropLastApplied(kept)
	if size := sizeOf(kept); l.Size > 0 && size > l.Size {
		kept.Data, kept.StringData = nil, nil
		kept.Annotations = map[string]string{droppedAnnotation: strconv.Itoa(size)}
	}
	return kept, nil
}
