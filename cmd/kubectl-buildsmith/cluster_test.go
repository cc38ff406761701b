package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/client/clientset/versioned"
	"github.com/buildsmith/buildsmith/test/envtest"
)

// TestReconcileAndStatus runs reconcile and status against a real API
// server, with the test in the controller's place: it acts on the request
// by writing status as the controller would.
func TestReconcileAndStatus(t *testing.T) {
	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	const ns = "team"
	if _, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().Namespaces().Create(ctx,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	builders := versioned.NewForConfigOrDie(env.Config).BuildsmithV1alpha1().Builders(ns)
	for _, name := range []string{"ready", "stalled", "ignored"} {
		if _, err := builders.Create(ctx, &v1alpha1.Builder{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{
				Tag: "registry.example.com/team/" + name, Stack: v1alpha1.StackRef{Name: "base"}, Store: v1alpha1.StoreRef{Name: "default"},
				Order: []v1alpha1.OrderEntry{{Group: []v1alpha1.BuildpackRef{{ID: "example/hello"}}}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// act plays the controller for one builder: once the request is set,
	// it records it in status, with the outcome mark gives.
	act := func(name string, mark func(*v1alpha1.BuilderStatus)) {
		go func() {
			for range 100 {
				b, err := builders.Get(ctx, name, metav1.GetOptions{})
				if err == nil && b.Annotations[v1alpha1.ReconcileRequestedAtAnnotation] != "" {
					b.Status.LastHandledReconcileAt = b.Annotations[v1alpha1.ReconcileRequestedAtAnnotation]
					b.Status.ObservedGeneration = b.Generation
					mark(&b.Status)
					if _, err := builders.UpdateStatus(ctx, b, metav1.UpdateOptions{}); err == nil {
						return
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	act("ready", func(s *v1alpha1.BuilderStatus) {
		s.LatestImage = "registry.example.com/team/ready@sha256:" + strings.Repeat("a", 64)
		s.MarkReady()
	})
	act("stalled", func(s *v1alpha1.BuilderStatus) {
		s.MarkStalled("BuildpackNotFound", "the store has no buildpack example/hello")
	})

	kubectl := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(append(args, "--kubeconfig", env.Kubeconfig, "-n", ns), nil, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	for _, tc := range []struct {
		args       []string
		code       int
		out, error string
	}{
		{[]string{"reconcile", "builders/ready", "--wait", "--timeout", "10s"}, 0, "builder/ready: Ready registry.example.com/team/ready@sha256:", ""},
		{[]string{"reconcile", "Builder/stalled", "--wait", "--timeout", "10s"}, 1, "reconcile requested",
			"builder/stalled: not Ready, and will not be without a change: Ready=False BuildpackNotFound: the store has no buildpack example/hello"},
		{[]string{"reconcile", "builder/ignored", "--wait", "--timeout", "1s"}, 1, "reconcile requested",
			"the controller has not acted on the request after 1s (is it running?)"},
		{[]string{"reconcile", "builder/ignored"}, 0, "builder/ignored: reconcile requested at", ""},
		{[]string{"reconcile", "builder/missing"}, 1, "", `"missing" not found`},
		{[]string{"reconcile", "image/ready"}, 1, "", "KIND one of"},
	} {
		code, out, errOut := kubectl(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) || (tc.error != "" && !strings.Contains(errOut, tc.error)) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.args, code, out, errOut, tc.code, tc.out, tc.error)
		}
	}

	// A cluster kind: status shows what it found (a stack's run image).
	stacks := versioned.NewForConfigOrDie(env.Config).BuildsmithV1alpha1().ClusterStacks()
	stack, err := stacks.Create(ctx, &v1alpha1.ClusterStack{ObjectMeta: metav1.ObjectMeta{Name: "base"},
		Spec: v1alpha1.ClusterStackSpec{ID: "io.buildpacks.stacks.test", BuildImage: v1alpha1.ImageSource{Image: "registry.example.com/build"},
			RunImage: v1alpha1.RunImageSource{Image: "registry.example.com/run"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runImage := "registry.example.com/run@sha256:" + strings.Repeat("b", 64)
	stack.Status.RunImage.LatestImage = runImage
	stack.Status.MarkReady()
	// Its last re-check met a registry outage: Ready, not up to date.
	stack.Status.MarkStale("RegistryUnavailable", "GET …: 503 Service Unavailable; retrying in 2s")
	if _, err := stacks.UpdateStatus(ctx, stack, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A ClusterLifecycle: status shows its image by digest.
	lifecycles := versioned.NewForConfigOrDie(env.Config).BuildsmithV1alpha1().ClusterLifecycles()
	lifecycle, err := lifecycles.Create(ctx, &v1alpha1.ClusterLifecycle{ObjectMeta: metav1.ObjectMeta{Name: "lifecycle"},
		Spec: v1alpha1.ClusterLifecycleSpec{ImageSource: v1alpha1.ImageSource{Image: "registry.example.com/lifecycle"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lifecycleImage := "registry.example.com/lifecycle@sha256:" + strings.Repeat("c", 64)
	lifecycle.Status.Image.LatestImage = lifecycleImage
	lifecycle.Status.MarkReady()
	if _, err := lifecycles.UpdateStatus(ctx, lifecycle, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := kubectl("status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"NAMESPACE", "NAME", "READY", "UPTODATE", "REASON", "SINCE", "LATEST"},
		{"-", "clusterlifecycle/lifecycle", "True", "True", "-"},
		{"-", "clusterstack/base", "True", "False", "RegistryUnavailable"},
		{"team", "builder/ignored", "Unknown", "-", "-", "-", "-"},
		{"team", "builder/ready", "True", "True", "-"},
		{"team", "builder/stalled", "False", "False", "BuildpackNotFound"},
	}
	if len(lines) != len(want) {
		t.Fatalf("status printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, fields := range want {
		got := strings.Fields(lines[i])
		if len(got) < len(fields) || !slices.Equal(got[:len(fields)], fields) {
			t.Errorf("status line %d: %q, want it to start with %q", i, lines[i], fields)
		}
	}
	if !strings.HasSuffix(lines[2], runImage) {
		t.Errorf("the stack's line does not end with its run image: %q", lines[2])
	}
	if !strings.HasSuffix(lines[1], lifecycleImage) {
		t.Errorf("the lifecycle's line does not end with its image: %q", lines[1])
	}
	checkStatusOutputs(t, kubectl)
	checkCompletion(t, env.Kubeconfig, ns)
	checkReceivers(t, versioned.NewForConfigOrDie(env.Config), kubectl, ns)
}

// checkReceivers: receivers prints each Receiver's type, Ready, path and
// what it may wake; status lists them with their path.
func checkReceivers(t *testing.T, c versioned.Interface, kubectl func(args ...string) (int, string, string), ns string) {
	t.Helper()
	ctx := context.Background()
	receivers := c.BuildsmithV1alpha1().Receivers(ns)
	rc, err := receivers.Create(ctx, &v1alpha1.Receiver{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
		Spec: v1alpha1.ReceiverSpec{Type: v1alpha1.ReceiverHarbor, SecretRef: v1alpha1.LocalSecretReference{Name: "token"},
			Resources: []v1alpha1.ReceiverResource{{Kind: "Buildpack", Name: "go"}, {Kind: "ClusterStack"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc.Status.WebhookPath = "/hook/" + strings.Repeat("ab", 32)
	rc.Status.MarkReady()
	if _, err := receivers.UpdateStatus(ctx, rc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := kubectl("receivers")
	want := []string{ns, "registry", "harbor", "True", rc.Status.WebhookPath, "Buildpack/go"}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !slices.Equal(strings.Fields(lines[1]), want) {
		t.Errorf("receivers: exit %d, stderr %q:\n%s\nwant a line %q (a ClusterStack is out of a tenant's reach)", code, errOut, out, want)
	}
	code, out, _ = kubectl("status")
	if code != 0 || !strings.Contains(out, "receiver/registry") || !strings.Contains(out, rc.Status.WebhookPath) {
		t.Errorf("status does not list the Receiver with its path:\n%s", out)
	}
}

// checkStatusOutputs: status -o wide adds each object's message on its line;
// -o name, json, yaml and jsonpath print the objects as kubectl get does.
func checkStatusOutputs(t *testing.T, kubectl func(args ...string) (int, string, string)) {
	t.Helper()
	code, out, errOut := kubectl("status", "-o", "wide")
	if code != 0 || !strings.Contains(out, "LATEST") || !strings.Contains(out, "MESSAGE") {
		t.Fatalf("status -o wide: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "builder/stalled") && !strings.HasSuffix(line, "the store has no buildpack example/hello") {
			t.Errorf("status -o wide: the stalled builder's line does not end with its message: %q", line)
		}
	}
	names := []string{"builder.buildsmith.dev/ignored", "builder.buildsmith.dev/ready", "builder.buildsmith.dev/stalled",
		"clusterlifecycle.buildsmith.dev/lifecycle", "clusterstack.buildsmith.dev/base"}
	code, out, errOut = kubectl("status", "-o", "name")
	got := strings.Fields(out)
	slices.Sort(got)
	if code != 0 || !slices.Equal(got, names) {
		t.Errorf("status -o name: exit %d, stderr %q, names %q; want %q", code, errOut, got, names)
	}
	for _, format := range []string{"json", "yaml"} {
		code, out, errOut = kubectl("status", "-o", format)
		var list unstructured.UnstructuredList
		raw, err := yaml.YAMLToJSON([]byte(out))
		if err == nil {
			err = list.UnmarshalJSON(raw)
		}
		var got []string
		for _, u := range list.Items {
			got = append(got, strings.ToLower(u.GetKind())+".buildsmith.dev/"+u.GetName())
		}
		slices.Sort(got)
		if code != 0 || err != nil || list.GetKind() != "List" || !slices.Equal(got, names) {
			t.Errorf("status -o %s: exit %d, stderr %q, %v, a %s of %q; want a List of %q", format, code, errOut, err, list.GetKind(), got, names)
		}
	}
	code, out, errOut = kubectl("status", "-o", `jsonpath={range .items[?(@.kind=="ClusterStack")]}{.metadata.name}:{.status.conditions[?(@.type=="UpToDate")].reason}{end}`)
	if code != 0 || out != "base:RegistryUnavailable" {
		t.Errorf("status -o jsonpath: exit %d, stderr %q, %q; want base:RegistryUnavailable", code, errOut, out)
	}
	if code, _, errOut = kubectl("status", "-o", "table"); code != 1 || !strings.Contains(errOut, `output format "table"`) {
		t.Errorf("status -o table: exit %d, stderr %q; want an error naming the format", code, errOut)
	}
}

// checkCompletion: the shell completion of reconcile's KIND/NAME (kinds,
// then the names of a kind's objects in the namespace) and of -n (the
// cluster's namespaces), as `kubectl buildsmith __complete` answers a
// shell (and kubectl, through a kubectl_complete-buildsmith script); and
// completion scripts for each shell.
func checkCompletion(t *testing.T, kubeconfig, ns string) {
	t.Helper()
	complete := func(args ...string) []string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"__complete"}, args...), nil, &stdout, &stderr); code != 0 {
			t.Fatalf("__complete %q: exit %d: %s", args, code, stderr.String())
		}
		return strings.Split(strings.TrimSpace(stdout.String()), "\n")
	}
	for _, tc := range []struct {
		args []string
		want []string // the completions, then the directive
	}{
		{[]string{"reconcile", ""}, []string{"clusterstore/", "buildpack/", "clusterstack/", "clusterlifecycle/", "clusterbuilder/", "builder/", "receiver/", ":6"}},
		{[]string{"reconcile", "--kubeconfig", kubeconfig, "-n", ns, "builder/"}, []string{"builder/ignored", "builder/ready", "builder/stalled", ":4"}},
		{[]string{"reconcile", "cluster"}, []string{"clusterstore/", "clusterstack/", "clusterlifecycle/", "clusterbuilder/", ":6"}},
		{[]string{"reconcile", "--kubeconfig", kubeconfig, "-n", ns, "builder/st"}, []string{"builder/stalled", ":4"}},
		{[]string{"reconcile", "--kubeconfig", kubeconfig, "ClusterStacks/"}, []string{"ClusterStacks/base", ":4"}},
		{[]string{"reconcile", "builder/ready", ""}, []string{":4"}},
	} {
		if got := complete(tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("__complete %q: %q, want %q", tc.args, got, tc.want)
		}
	}
	if got := complete("status", "--kubeconfig", kubeconfig, "-n", ""); !slices.Contains(got, ns) || !slices.Contains(got, "default") {
		t.Errorf("__complete status -n: %q, want the namespaces, %s among them", got, ns)
	}
	if got := complete("status", "-o", ""); !slices.Contains(got, "wide") || !slices.Contains(got, "json") {
		t.Errorf("__complete status -o: %q, want the output formats", got)
	}
	for shell, want := range map[string]string{"bash": "complete -o default -F __start_kubectl-buildsmith kubectl-buildsmith",
		"zsh": "#compdef kubectl-buildsmith", "fish": "complete -c kubectl-buildsmith", "powershell": "Register-ArgumentCompleter"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"completion", shell}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), want) {
			t.Errorf("completion %s: exit %d, stderr %q; want a script with %q", shell, code, stderr.String(), want)
		}
	}
}
