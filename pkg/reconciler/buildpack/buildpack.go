// Package buildpack reconciles Buildpacks: a namespace's own buildpackage,
// read with its own credentials, whose buildpacks it lists as a
// ClusterStore lists its sources'.
package buildpack

import (
	"context"

	pkgreconciler "knative.dev/pkg/reconciler"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/cnb"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/pkg/reconciler/clusterstore"
)

// Reconciler reconciles Buildpacks.
type Reconciler struct{ reconciler.Base }

// ReconcileKind implements the generated reconciler's Interface.
func (r *Reconciler) ReconcileKind(ctx context.Context, bp *v1alpha1.Buildpack) pkgreconciler.Event {
	return r.Policy.Reconcile(ctx, bp, func(ctx context.Context) error { return r.reconcile(ctx, bp) })
}

// reconcile reads the image and replaces the status lists only when it
// was read whole: a failure keeps the last good lists.
func (r *Reconciler) reconcile(ctx context.Context, bp *v1alpha1.Buildpack) error {
	if err := reconciler.Validate(ctx, bp); err != nil {
		return err
	}
	account := &v1alpha1.ServiceAccountRef{Namespace: bp.Namespace, Name: bp.Spec.ServiceAccountName}
	if account.Name == "" {
		account.Name = v1alpha1.DefaultServiceAccountName
	}
	keychain, err := r.Credentials.ForServiceAccount(ctx, bp, account)
	if err != nil {
		return err
	}
	reg := r.Registry.As(keychain)
	chosen := reconciler.NewChosenTags(bp.Status.ChosenTags)
	src, err := chosen.Choose(ctx, reg, "spec.image", bp.Spec.Image, bp.Spec.Policy)
	if err != nil {
		return err
	}
	pkg, err := clusterstore.ReadPackage(ctx, reg, src.Ref)
	if err != nil {
		return err
	}
	// As a store of one source: sorted, and bounded alike.
	buildpacks, err := cnb.MergeBuildpacks(pkg.Buildpacks)
	if err != nil {
		return err
	}
	extensions, err := cnb.MergeExtensions(pkg.Extensions)
	if err != nil {
		return err
	}
	if err := cnb.CheckStoreSize(buildpacks, extensions); err != nil {
		return err
	}
	bp.Status.Buildpacks, bp.Status.Extensions = buildpacks, extensions
	bp.Status.ChosenTags = chosen.Status()
	return nil
}
