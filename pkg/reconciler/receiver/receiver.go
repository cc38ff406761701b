// Package receiver reconciles Receivers and serves their webhooks: a
// registry's push notification, once its sender has shown the Receiver's
// token, reconciles now the objects that read the pushed repository.
package receiver

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/tracker"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/failure"
	"github.com/buildsmith/buildsmith/pkg/receiver"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// TokenKey is the key of a Receiver's Secret that holds its token.
const TokenKey = "token"

// ReasonInvalidToken: the Receiver's Secret has no token, or one too short
// to keep its webhook path from being guessed.
const ReasonInvalidToken = "InvalidToken"

// minTokenLength is the shortest token taken: the webhook path is a hash
// of it, a short one could be found from the path.
const minTokenLength = 16

// Reconciler reconciles Receivers: their Secret's token gives their
// webhook path.
type Reconciler struct {
	reconciler.Base
	// systemNamespace is the controller's: its Receivers alone may wake
	// the cluster kinds.
	systemNamespace string
}

// ReconcileKind implements the generated reconciler's Interface.
func (r *Reconciler) ReconcileKind(ctx context.Context, rc *v1alpha1.Receiver) pkgreconciler.Event {
	return r.Policy.Reconcile(ctx, rc, func(ctx context.Context) error { return r.reconcile(ctx, rc) })
}

// reconcile reads the token and records the webhook path it gives; a
// failure keeps the last path, which the server no longer takes (it checks
// the token again at each notification).
func (r *Reconciler) reconcile(ctx context.Context, rc *v1alpha1.Receiver) error {
	if err := reconciler.Validate(ctx, rc); err != nil {
		return err
	}
	if rc.Namespace != r.systemNamespace {
		for _, res := range rc.Spec.Resources {
			if slices.Contains(clusterKinds, res.Kind) {
				return failure.Permanentf(reconciler.ReasonInvalidSpec, "spec.resources names a %s: cluster kinds answer only to Receivers of namespace %s, the controller's",
					res.Kind, r.systemNamespace)
			}
		}
	}
	token, err := r.token(ctx, rc)
	if err != nil {
		return err
	}
	rc.Status.WebhookPath = receiver.WebhookPath(token, rc.Name, rc.Namespace)
	return nil
}

// token reads the Receiver's token from its Secret, which is tracked: a
// Secret created or changed reconciles the Receiver at once.
func (r *Reconciler) token(ctx context.Context, rc *v1alpha1.Receiver) ([]byte, error) {
	ref := tracker.Reference{APIVersion: "v1", Kind: "Secret", Namespace: rc.Namespace, Name: rc.Spec.SecretRef.Name}
	if err := r.Credentials.Tracker.TrackReference(ref, rc); err != nil {
		return nil, err
	}
	return readToken(ctx, r.Credentials.Keychains.Secrets, rc)
}

// readToken reads the token of rc's Secret through secrets (the
// controller's bounded Secret watches).
func readToken(ctx context.Context, secrets registry.SecretReader, rc *v1alpha1.Receiver) ([]byte, error) {
	secret, err := secrets.Get(ctx, rc.Namespace, rc.Spec.SecretRef.Name)
	if apierrors.IsNotFound(err) {
		return nil, failure.Waitingf(registry.ReasonSecretNotFound, "secret %s/%s, the Receiver's token, not found", rc.Namespace, rc.Spec.SecretRef.Name)
	} else if err != nil {
		return nil, err
	}
	token := secret.Data[TokenKey]
	if len(token) < minTokenLength {
		return nil, failure.Permanentf(ReasonInvalidToken, "secret %s/%s has no %q of %d characters or more: it holds the token senders use "+
			"(a random string, e.g. openssl rand -hex 32), from which the webhook path is made", rc.Namespace, rc.Spec.SecretRef.Name, TokenKey, minTokenLength)
	}
	return token, nil
}

// describe is a Receiver for messages: its kind, namespace and name.
func describe(rc *v1alpha1.Receiver) string {
	return fmt.Sprintf("receiver %s/%s", rc.Namespace, rc.Name)
}
