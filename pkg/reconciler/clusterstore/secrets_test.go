package clusterstore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
	"github.com/buildsmith/buildsmith/pkg/registry"
)

// TestSecretsTheControllerMayNotRead: what an object shows when its
// credentials are in a Secret the controller may not read. Outside
// --secret-namespaces: Stalled, reason SecretNamespaceNotAllowed, a
// message naming the flag and the namespaces, a Warning event, and no
// request for the Secret; a store whose account is in a listed namespace
// is read as ever. Inside them, but forbidden by the API server (RBAC
// narrower than the flag): waiting, reason SecretForbidden, polled, not
// retried in a storm.
func TestSecretsTheControllerMayNotRead(t *testing.T) {
	store := func(name, accountNamespace string) *v1alpha1.ClusterStore {
		return &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
			Spec: v1alpha1.ClusterStoreSpec{
				// Never reached: credentials are read first.
				Sources:           []v1alpha1.ImageSource{{Image: "registry.invalid/bp/go:1"}},
				ServiceAccountRef: &v1alpha1.ServiceAccountRef{Namespace: accountNamespace, Name: "reader"}}}
	}
	objects := []runtime.Object{store("outside", "team"), store("inside", "builds"), store("forbidden", "platform")}
	for _, ns := range []string{"team", "builds", "platform"} {
		objects = append(objects,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reader"},
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry"}, Type: corev1.SecretTypeDockerConfigJson,
				Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}})
	}
	ctx, clients := rt.Setup(t, objects...)
	kube := fakekubeclient.Get(ctx)
	kube.PrependReactor("get", "secrets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetNamespace() != "platform" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "registry",
			fmt.Errorf(`User "system:serviceaccount:buildsmith:buildsmith-controller" cannot get resource "secrets" in the namespace "platform"`))
	})
	opts := reconciler.DefaultOptions()
	opts.Secrets.Namespaces = []string{"builds", "platform"}
	impl := rt.Controller(ctx, NewController(registry.New(ctx, registry.Options{}), opts))
	reconcile := func(name string) (*v1alpha1.ClusterStore, error, []string) {
		t.Helper()
		err := rt.Sync(impl).Reconcile(ctx, name)
		got, getErr := clients.Buildsmith.BuildsmithV1alpha1().ClusterStores().Get(ctx, name, metav1.GetOptions{})
		if getErr != nil {
			t.Fatal(getErr)
		}
		return got, err, clients.Events()
	}

	got, err, events := reconcile("outside")
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: reconciler.ReasonSecretNamespaceNotAllowed,
		Stalled: true, Requeue: rt.NoRequeue, EventReasons: []string{reconciler.ReasonSecretNamespaceNotAllowed},
		MessageContains: "secret team/registry not read: the controller reads Secrets of the namespaces builds, platform only (--secret-namespaces)"})
	for _, action := range kube.Actions() {
		if action.GetNamespace() == "team" {
			t.Errorf("a request in the namespace not listed: %v", action)
		}
	}

	got, err, events = reconcile("forbidden")
	rt.Check(t, got, err, events, rt.Outcome{Ready: corev1.ConditionFalse, Reason: reconciler.ReasonSecretForbidden,
		Reconciling: true, Requeue: rt.Poll, MinDelay: 48 * time.Second, MaxDelay: 72 * time.Second,
		EventReasons: []string{reconciler.ReasonSecretForbidden}, MessageContains: "get and watch on Secrets in namespace platform"})

	// The other tenant: its Secret is read, and the store goes on to its
	// sources (whatever they answer).
	got, _, _ = reconcile("inside")
	if c := got.Status.GetCondition(v1alpha1.ConditionReady); c == nil || strings.HasPrefix(c.Reason, "Secret") {
		t.Errorf("the store of a listed namespace: Ready %+v, want its Secret read", c)
	}
	read := false
	for _, action := range kube.Actions() {
		if get, ok := action.(k8stesting.GetAction); ok && get.GetNamespace() == "builds" && get.GetName() == "registry" {
			read = true
		}
	}
	if !read {
		t.Error("the Secret of a listed namespace was not read")
	}
}
