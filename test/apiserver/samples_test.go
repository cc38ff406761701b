package apiserver

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"knative.dev/pkg/apis"
)

// TestKubectlApplySamples applies config/samples with kubectl, as the README
// tells users to once the controller is installed (in namespace buildsmith,
// where the Receiver sample goes), and reads them back by short name and
// category.
func TestKubectlApplySamples(t *testing.T) {
	if _, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "buildsmith"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	out, err := env.Kubectl("apply", "-f", "config/samples/").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -f config/samples/: %v\n%s", err, out)
	}
	for _, want := range []string{
		"clusterstore.buildsmith.dev/demo created",
		"clusterstack.buildsmith.dev/demo created",
		"clusterlifecycle.buildsmith.dev/lifecycle-0-21 created",
		"builder.buildsmith.dev/demo created",
		"builder.buildsmith.dev/demo-system created",
		"builder.buildsmith.dev/demo-extensions created",
		"builder.buildsmith.dev/demo-signed created",
		"serviceaccount/signer created",
		"clusterbuilder.buildsmith.dev/demo created",
		"receiver.buildsmith.dev/registry created",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl apply output lacks %q:\n%s", want, out)
		}
	}

	// Applying again changes nothing.
	out, err = env.Kubectl("apply", "-f", "config/samples/").CombinedOutput()
	if err != nil || strings.Contains(string(out), "configured") {
		t.Errorf("second apply: %v\n%s", err, out)
	}

	// The category lists every kind; short names and printer columns work.
	out, err = env.Kubectl("get", "buildsmith", "--all-namespaces", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get buildsmith: %v\n%s", err, out)
	}
	for _, want := range []string{"clusterstore.buildsmith.dev/demo", "clusterstack.buildsmith.dev/demo", "clusterlifecycle.buildsmith.dev/lifecycle-0-21",
		"builder.buildsmith.dev/demo", "clusterbuilder.buildsmith.dev/demo", "receiver.buildsmith.dev/registry"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl get buildsmith lacks %s:\n%s", want, out)
		}
	}
	out, err = env.Kubectl("get", "bsbldr,cbldr", "--all-namespaces").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get bsbldr,cbldr: %v\n%s", err, out)
	}
	for _, column := range []string{"READY", "REASON", "LATESTIMAGE"} {
		if !strings.Contains(string(out), column) {
			t.Errorf("kubectl get bsbldr,cbldr lacks column %s:\n%s", column, out)
		}
	}
	out, err = env.Kubectl("get", "cstore,cstack,clc").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "READY") || !strings.Contains(string(out), "VERSION") {
		t.Errorf("kubectl get cstore,cstack,clc: %v\n%s", err, out)
	}

	// The samples are valid by the controller's rules too, not just the schema.
	ctx := context.Background()
	bc := client.BuildsmithV1alpha1()
	store, err := bc.ClusterStores().Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stack, err := bc.ClusterStacks().Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lifecycle, err := bc.ClusterLifecycles().Get(ctx, "lifecycle-0-21", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	builder, err := bc.Builders("default").Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	systemBuilder, err := bc.Builders("default").Get(ctx, "demo-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterBuilder, err := bc.ClusterBuilders().Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := bc.Receivers("buildsmith").Get(ctx, "registry", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []*apis.FieldError{store.Validate(ctx), stack.Validate(ctx), lifecycle.Validate(ctx), builder.Validate(ctx),
		systemBuilder.Validate(ctx), clusterBuilder.Validate(ctx), receiver.Validate(ctx)} {
		if err != nil {
			t.Errorf("sample does not validate: %v", err)
		}
	}
}
