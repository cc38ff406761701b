// Package e2e tests buildsmith from the outside: the controller binary, run
// as users run it outside a cluster (--kubeconfig), against a real
// kube-apiserver and etcd and a real registry.
package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/buildsmith/buildsmith/pkg/client/clientset/versioned"
	"github.com/buildsmith/buildsmith/pkg/reconciler/builder"
	"github.com/buildsmith/buildsmith/test/controllertest"
	"github.com/buildsmith/buildsmith/test/envtest"
	"github.com/buildsmith/buildsmith/test/localhost"
)

const systemNamespace = "buildsmith-system"

var (
	env        *envtest.Env
	client     versioned.Interface
	kube       kubernetes.Interface
	controller string // path of the built controller binary
)

func TestMain(m *testing.M) {
	os.Exit(envtest.Main(func(e *envtest.Env) (int, error) {
		env = e
		c, err := controllertest.Setup(env, env.Config, systemNamespace)
		if err != nil {
			return 0, err
		}
		client, kube, controller = c.Client, c.Kube, c.Binary
		return m.Run(), nil
	}))
}

// startController runs the controller binary until the test ends; its log is
// printed when the test fails.
func startController(t *testing.T, args ...string) {
	t.Helper()
	startControllerWith(t, env.Kubeconfig, systemNamespace, true, args...)
}

// startStoppableController runs the controller and returns a function that
// kills it (SIGKILL: no graceful shutdown, as when a node dies).
func startStoppableController(t *testing.T, args ...string) (kill func()) {
	t.Helper()
	return startControllerWith(t, env.Kubeconfig, systemNamespace, true, args...)
}

// startControllerWith runs the controller with a kubeconfig, a system
// namespace and leader election on or off, and returns a function that
// kills it.
func startControllerWith(t *testing.T, kubeconfig, namespace string, disableHA bool, args ...string) (kill func()) {
	t.Helper()
	p := controllertest.Start(t, controller, controllertest.Options{
		Kubeconfig: kubeconfig, Namespace: namespace, DisableHA: disableHA, Args: args})
	return p.Kill
}

// eventually polls cond every 100ms until it returns true or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	took, err := localhost.Poll(context.Background(), timeout, 100*time.Millisecond, what, cond)
	if err != nil {
		t.Fatal(err)
	}
	return took
}

// useLifecycleImage points the controller at a lifecycle image through the
// lifecycle-image ConfigMap of its namespace, until the test ends.
func useLifecycleImage(t *testing.T, image string) {
	t.Helper()
	ctx := context.Background()
	cms := kube.CoreV1().ConfigMaps(systemNamespace)
	_ = cms.Delete(ctx, builder.LifecycleConfigMap, metav1.DeleteOptions{})
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: builder.LifecycleConfigMap},
		Data: map[string]string{builder.LifecycleImageKey: image}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(ctx, builder.LifecycleConfigMap, metav1.DeleteOptions{}) })
}
