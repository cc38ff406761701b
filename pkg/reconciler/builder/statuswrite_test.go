package builder

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"knative.dev/pkg/controller"

	rt "github.com/buildsmith/buildsmith/pkg/reconciler/reconcilertest"
)

// TestStatusWriteFailsAfterPush: the API server refuses the status writes
// after a builder was pushed (500 "etcdserver: leader changed", then 429):
// each failure is retried within 2.4 s (not after the workqueue's growing
// global delay), the retries find the pushed image with one HEAD each and
// push nothing, and the status is written once the API server takes it.
func TestStatusWriteFailsAfterPush(t *testing.T) {
	x := newFixture(t)
	b := x.builder(nil)
	ctx, clients := rt.Setup(t, b, x.stack, x.store,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "apps"}})
	rec := rt.Sync(x.builderController(ctx, x.f.Addr+"/lifecycle:0.21.0"))

	refusals := []error{
		apierrors.NewInternalError(errors.New("etcdserver: leader changed")),
		apierrors.NewTooManyRequests("the API server is busy", 1),
	}
	clients.Buildsmith.PrependReactor("update", "builders", func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "status" || len(refusals) == 0 {
			return false, nil, nil
		}
		err := refusals[0]
		refusals = refusals[1:]
		return true, nil, err
	})
	x.f.ForgetRequests()
	for i := range 2 {
		err := rec.Reconcile(ctx, "apps/go")
		if ok, delay := controller.IsRequeueKey(err); !ok || delay > 2400*time.Millisecond || (i == 1 && delay < time.Second) {
			t.Fatalf("reconcile %d with the status write refused: %v, want a requeue within 2.4s (and after the 429's 1s)", i+1, err)
		}
		if i == 0 {
			if n := x.f.Count("PUT", "/builders/go/manifests/latest"); n != 1 {
				t.Fatalf("first reconcile: %d manifest PUTs", n)
			}
			x.f.ForgetRequests()
		}
	}
	if err := rec.Reconcile(ctx, "apps/go"); err != nil {
		if ok, delay := controller.IsRequeueKey(err); !ok || delay < 8*time.Minute {
			t.Fatalf("reconcile 3: %v, want the resync", err)
		}
	}
	retries := x.f.Requests()
	got, err := clients.Buildsmith.BuildsmithV1alpha1().Builders("apps").Get(ctx, "go", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tagged, _ := x.f.Resolve(x.f.Addr + "/builders/go:latest")
	if !got.Status.IsReady() || got.Status.LatestImage != tagged || len(got.Status.Platforms) != 1 {
		t.Errorf("status after the API server answered: %+v", got.Status)
	}
	// After the push: one HEAD of the tag per retry, nothing else.
	if reqs := retries; len(reqs) != 2 || reqs[0] != "HEAD /v2/builders/go/manifests/latest" || reqs[1] != reqs[0] {
		t.Errorf("requests of the two retries: %q, want one HEAD of the tag each", reqs)
	}
}
