package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/buildsmith/buildsmith/pkg/apis/build/v1alpha1"
	"github.com/buildsmith/buildsmith/pkg/reconciler"
	"github.com/buildsmith/buildsmith/test/registrytest"
)

func helm(args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(env.Root, "bin", "helm"), args...)
	cmd.Dir = env.Root
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+os.TempDir()+"/buildsmith-helm-cache",
		"HELM_CONFIG_HOME="+os.TempDir()+"/buildsmith-helm-config", "HELM_DATA_HOME="+os.TempDir()+"/buildsmith-helm-data")
	return cmd
}

// TestChartLintAndSchema: the chart lints clean, and its values schema
// refuses bad values with a message naming them.
func TestChartLintAndSchema(t *testing.T) {
	if out, err := helm("lint", "--strict", "charts/buildsmith").CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	for _, bad := range []struct{ set, mentions string }{
		{"replicas=0", "replicas"},
		{"retry.baseDelay=soon", "baseDelay"},
		{"image.pullPolicy=Sometimes", "pullPolicy"},
		{"unknownKnob=1", "unknownKnob"},
		{"clusterCredentialNamespaces={Not_A_Namespace}", "clusterCredentialNamespaces"},
		{"secretNamespaces={Not_A_Namespace}", "secretNamespaces"},
		{"secretNamespaces={team,team}", "secretNamespaces"},
		{"insecureRegistries={http://registry:5000}", "insecureRegistries"},
		{"metrics.serviceMonitor.interval=soon", "interval"},
		{"metrics.podMonitor.port=9090", "port"},
	} {
		out, err := helm("lint", "charts/buildsmith", "--set", bad.set).CombinedOutput()
		if err == nil || !strings.Contains(string(out), bad.mentions) {
			t.Errorf("helm lint --set %s: %v, want a schema error naming %s:\n%s", bad.set, err, bad.mentions, out)
		}
	}
}

// TestChartTenancyValues: the chart passes clusterCredentialNamespaces,
// secretNamespaces, insecureRegistries and registryCA to the controller, and
// nothing when they are empty.
func TestChartTenancyValues(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, ""},
		{[]string{"--set", "clusterCredentialNamespaces={builds,platform}"}, "--cluster-credential-namespaces=builds,platform"},
		{[]string{"--set", "secretNamespaces={team-a,team-b}"}, "--secret-namespaces=team-a,team-b"},
		{[]string{"--set", "insecureRegistries={registry.build-system.svc:5000,10.0.0.9}"},
			"--insecure-registry=registry.build-system.svc:5000 --insecure-registry=10.0.0.9"},
		{[]string{"--set", "registryCA.configMap=harbor-ca"}, "--registry-ca-file=/etc/buildsmith/registry-ca/ca.crt"},
	} {
		out, err := helm(append([]string{"template", "charts/buildsmith"}, tc.set...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm template %q: %v\n%s", tc.set, err, out)
		}
		var args []string
		for _, line := range strings.Split(string(out), "\n") {
			arg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- "))
			if strings.HasPrefix(arg, "--cluster-credential-namespaces") || strings.HasPrefix(arg, "--secret-namespaces") ||
				strings.HasPrefix(arg, "--insecure-registry") || strings.HasPrefix(arg, "--registry-ca-file") {
				args = append(args, arg)
			}
		}
		got := strings.Join(args, " ")
		if got != tc.want {
			t.Errorf("helm template %q: argument %q, want %q", tc.set, got, tc.want)
		}
	}
}

// TestChartReplicas: replicas get a leader-election bucket each (unless
// leaderElection.buckets says otherwise), and more than one a
// PodDisruptionBudget and spreading over nodes.
func TestChartReplicas(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range []struct {
		set     []string
		buckets string
		spread  bool
	}{
		{nil, `buckets: "1"`, false},
		{[]string{"--set", "replicas=3"}, `buckets: "3"`, true},
		{[]string{"--set", "replicas=2", "--set", "leaderElection.buckets=4"}, `buckets: "4"`, true},
	} {
		out, err := helm(append([]string{"template", "charts/buildsmith"}, tc.set...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm template %q: %v\n%s", tc.set, err, out)
		}
		rendered := string(out)
		if !strings.Contains(rendered, tc.buckets) {
			t.Errorf("helm template %q: no %s in config-leader-election", tc.set, tc.buckets)
		}
		for _, part := range []string{"kind: PodDisruptionBudget", "topologySpreadConstraints:"} {
			if strings.Contains(rendered, part) != tc.spread {
				t.Errorf("helm template %q: %q rendered: %v, want %v", tc.set, part, !tc.spread, tc.spread)
			}
		}
		// knative reads the bucket count once: the pods must restart together
		// when it changes, so their template carries its checksum.
		for _, line := range strings.Split(rendered, "\n") {
			if strings.Contains(line, "checksum/leader-election:") {
				checksum := strings.TrimSpace(line)
				if seen[checksum] {
					t.Errorf("helm template %q: the same leader-election checksum as another bucket count", tc.set)
				}
				seen[checksum] = true
			}
		}
	}
	if len(seen) != 3 {
		t.Errorf("%d leader-election checksums rendered for 3 bucket counts", len(seen))
	}
}

// TestChartInstallAndRBAC installs the chart with helm, then runs the
// controller out of cluster as the chart's ServiceAccount (impersonated),
// with leader election on: if the chart's RBAC lacks anything the
// controller needs, nothing gets Ready.
func TestChartInstallAndRBAC(t *testing.T) {
	ctx := context.Background()
	const ns = "buildsmith-chart"
	f := registrytest.New(t)
	objects := storeStack{Addr: f.Addr, Name: "chart", Buildpackages: []string{"buildpacks/hello:1.0.0"}, StackID: "io.buildpacks.stacks.chart"}
	objects.pushSamples(t, func(repo string, img v1.Image, err error) { push(t, f, repo, img, err) })

	out, err := helm("install", "buildsmith", "charts/buildsmith", "--kubeconfig", env.Kubeconfig,
		"--namespace", ns, "--create-namespace", "--set", "crds.enabled=false", "--set", "lifecycleImage="+f.Addr+"/buildsmith/lifecycle:0.21.0",
		"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring").CombinedOutput()
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = helm("uninstall", "buildsmith", "--kubeconfig", env.Kubeconfig, "--namespace", ns).CombinedOutput()
	})

	// A kubeconfig that acts as the chart's ServiceAccount.
	config, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range config.AuthInfos {
		user.Impersonate = "system:serviceaccount:" + ns + ":buildsmith-controller"
	}
	impersonating := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, impersonating); err != nil {
		t.Fatal(err)
	}
	startControllerWith(t, impersonating, ns, false)

	bs := client.BuildsmithV1alpha1()
	// The builder's credentials: read with get and a watch, the only verbs
	// the chart grants on Secrets.
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig(f.Addr, "builder", "unused")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objects.create(t)
	objects.createBuilder(t, ns, "chart", v1alpha1.NamespacedBuilderSpec{BuilderSpec: v1alpha1.BuilderSpec{Order: helloOrder()}})
	wait := env.Kubectl("wait", "--for=condition=Ready", "--timeout=60s", "clusterstore/chart", "clusterstack/chart",
		"-n", ns, "builder/chart")
	if out, err := wait.CombinedOutput(); err != nil {
		b, _ := bs.Builders(ns).Get(ctx, "chart", metav1.GetOptions{})
		t.Fatalf("kubectl wait: %v\n%s\nbuilder: %+v", err, out, b.Status.Conditions)
	}
	// The Secret's watch runs under the chart's RBAC: breaking the Secret
	// reaches the builder at once (not at its next poll, a minute away).
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry", Namespace: ns}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":"not a map"}`)}}
	if _, err := kube.CoreV1().Secrets(ns).Update(ctx, broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the builder to report the broken Secret", func() (bool, string) {
		b, err := bs.Builders(ns).Get(ctx, "chart", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := b.Status.GetCondition(v1alpha1.ConditionReady)
		return c != nil && c.Reason == "InvalidSecret", fmt.Sprintf("%+v", c)
	})

	// And no more than that: what the chart's ServiceAccount may not do.
	// By default (secretNamespaces empty) it may get and watch Secrets in
	// every namespace — a watch of all of them included, which the README
	// and the chart's comments say (TestChartSecretNamespaces narrows it).
	as := "--as=system:serviceaccount:" + ns + ":buildsmith-controller"
	for _, check := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "secrets", "-n", "default"}, "yes"},
		{[]string{"watch", "secrets", "-n", "default"}, "yes"},
		{[]string{"watch", "secrets", "--all-namespaces"}, "yes"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"list", "secrets", "-n", ns}, "no"},
		{[]string{"update", "builders.buildsmith.dev", "-n", ns}, "no"},
		{[]string{"update", "builders.buildsmith.dev", "--subresource=status", "-n", ns}, "yes"},
		{[]string{"delete", "clusterstores.buildsmith.dev"}, "no"},
		{[]string{"create", "pods", "-n", ns}, "no"},
		{[]string{"get", "pods", "-n", ns}, "no"},
		{[]string{"update", "configmaps", "-n", ns}, "no"},
		{[]string{"create", "secrets", "-n", ns}, "no"},
	} {
		out, _ := env.Kubectl(append([]string{"auth", "can-i", as}, check.args...)...).Output()
		if got := strings.TrimSpace(string(out)); got != check.want {
			t.Errorf("kubectl auth can-i %s: %s, want %s", strings.Join(check.args, " "), got, check.want)
		}
	}

	// The pod: the image's fixed user, time to stop, and only metrics reachable.
	deployment, err := kube.AppsV1().Deployments(ns).Get(ctx, "buildsmith-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := deployment.Spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 {
		t.Errorf("pod securityContext %+v, want user and group 65532", sc)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 60 {
		t.Errorf("terminationGracePeriodSeconds %v, want 60", g)
	}
	policy, err := kube.NetworkingV1().NetworkPolicies(ns).Get(ctx, "buildsmith-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the NetworkPolicy: %v", err)
	}
	// The metrics port from the peers given; the receiver port from
	// anywhere (every notification carries a secret path and token).
	if in := policy.Spec.Ingress; len(in) != 2 || len(in[0].Ports) != 1 || in[0].Ports[0].Port.String() != "metrics" || len(in[0].From) != 1 ||
		len(in[1].Ports) != 1 || in[1].Ports[0].Port.String() != "receiver" || len(in[1].From) != 0 {
		t.Errorf("NetworkPolicy ingress %+v, want the metrics port from the peers given and the receiver port", policy.Spec.Ingress)
	}

	// Leader election ran under the chart's Role: the Leases exist.
	eventually(t, 10*time.Second, "leader-election Leases", func() (bool, string) {
		leases, err := kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(leases.Items) > 0, fmt.Sprint(len(leases.Items), " leases")
	})
}

// TestChartSecretNamespaces: with secretNamespaces set, the chart grants
// get and watch on Secrets in those namespaces only (a Role each, no
// cluster-wide rule), and passes them to the controller; the API server
// agrees (kubectl auth can-i as the chart's ServiceAccount). The
// controller, run as that ServiceAccount, refuses a Secret of another
// namespace (SecretNamespaceNotAllowed) and reports the API server's
// refusal of one its flag lists but the RBAC does not (SecretForbidden).
func TestChartSecretNamespaces(t *testing.T) {
	ctx := context.Background()
	// Rendered: by default a cluster-wide rule and no Role; listed, the
	// opposite.
	all := renderRBAC(t)
	if len(all.clusterRoles) != 1 || !slices.Equal(secretVerbs(all.clusterRoles[0].Rules), []string{"get", "watch"}) {
		t.Errorf("default: ClusterRoles %+v, want one granting get and watch on Secrets", all.clusterRoles)
	}
	for _, role := range all.roles {
		if len(secretVerbs(role.Rules)) > 0 {
			t.Errorf("default: Role %s/%s grants %q on Secrets", role.Namespace, role.Name, secretVerbs(role.Rules))
		}
	}
	scoped := renderRBAC(t, "--set", "secretNamespaces={team-a,team-b}")
	for _, role := range scoped.clusterRoles {
		if verbs := secretVerbs(role.Rules); len(verbs) > 0 {
			t.Errorf("secretNamespaces set: ClusterRole %s grants %q on Secrets", role.Name, verbs)
		}
	}
	granted := map[string]bool{}
	for _, role := range scoped.roles {
		if verbs := secretVerbs(role.Rules); len(verbs) > 0 {
			if !slices.Equal(verbs, []string{"get", "watch"}) || len(role.Rules) != 1 || role.Name != "buildsmith-controller-secrets" {
				t.Errorf("Role %s/%s: rules %+v, want get and watch on Secrets alone", role.Namespace, role.Name, role.Rules)
			}
			granted[role.Namespace] = true
		}
	}
	bound := map[string]bool{}
	for _, b := range scoped.bindings {
		if b.Name == "buildsmith-controller-secrets" && b.RoleRef.Kind == "Role" && b.RoleRef.Name == b.Name && len(b.Subjects) == 1 &&
			b.Subjects[0].Kind == "ServiceAccount" && b.Subjects[0].Name == "buildsmith-controller" && b.Subjects[0].Namespace == "buildsmith" {
			bound[b.Namespace] = true
		}
	}
	if want := map[string]bool{"team-a": true, "team-b": true}; !maps.Equal(granted, want) || !maps.Equal(bound, want) {
		t.Errorf("Secrets granted in %v and bound in %v, want team-a and team-b", granted, bound)
	}

	// Installed, as the API server sees it.
	const ns, tenant, other, unbound = "bs-scoped", "bs-scoped-tenant", "bs-scoped-other", "bs-scoped-unbound"
	for _, n := range []string{tenant, other, unbound} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}},
			metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	out, err := helm("install", "scoped", "charts/buildsmith", "--kubeconfig", env.Kubeconfig, "--namespace", ns, "--create-namespace",
		"--set", "crds.enabled=false", "--set", "secretNamespaces={"+tenant+"}").CombinedOutput()
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = helm("uninstall", "scoped", "--kubeconfig", env.Kubeconfig, "--namespace", ns).CombinedOutput()
	})
	as := "--as=system:serviceaccount:" + ns + ":scoped-controller"
	for _, check := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "secrets", "-n", tenant}, "yes"},
		{[]string{"watch", "secrets", "-n", tenant}, "yes"},
		{[]string{"list", "secrets", "-n", tenant}, "no"},
		{[]string{"get", "secrets", "-n", other}, "no"},
		{[]string{"watch", "secrets", "-n", other}, "no"},
		{[]string{"get", "secrets", "-n", ns}, "no"},
		{[]string{"get", "secrets", "-n", "kube-system"}, "no"},
		{[]string{"watch", "secrets", "--all-namespaces"}, "no"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"get", "serviceaccounts", "-n", other}, "yes"},
	} {
		out, _ := env.Kubectl(append([]string{"auth", "can-i", as}, check.args...)...).Output()
		if got := strings.TrimSpace(string(out)); got != check.want {
			t.Errorf("kubectl auth can-i %s: %s, want %s", strings.Join(check.args, " "), got, check.want)
		}
	}

	// The controller as that ServiceAccount, told one namespace more than
	// the chart granted (as when the flag and the RBAC disagree).
	config, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range config.AuthInfos {
		user.Impersonate = "system:serviceaccount:" + ns + ":scoped-controller"
	}
	impersonating := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, impersonating); err != nil {
		t.Fatal(err)
	}
	stores := client.BuildsmithV1alpha1().ClusterStores()
	for _, n := range []string{tenant, other, unbound} {
		if _, err := kube.CoreV1().Secrets(n).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
			Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfig("registry.invalid", "u", "p")}},
			metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := kube.CoreV1().ServiceAccounts(n).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		// The source is never reached when the Secret is refused.
		if _, err := stores.Create(ctx, &v1alpha1.ClusterStore{ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec: v1alpha1.ClusterStoreSpec{ServiceAccountRef: &v1alpha1.ServiceAccountRef{Namespace: n, Name: "reader"},
				Sources: []v1alpha1.ImageSource{{Image: "registry.invalid/bp/go:1"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = stores.Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	startControllerWith(t, impersonating, ns, false, "--secret-namespaces="+tenant+","+unbound)
	ready := func(name string) *apis.Condition {
		s, err := stores.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return s.Status.GetCondition(v1alpha1.ConditionReady)
	}
	eventually(t, 30*time.Second, "the store of an unlisted namespace to be refused", func() (bool, string) {
		c := ready(other)
		return c != nil && c.Reason == reconciler.ReasonSecretNamespaceNotAllowed && strings.Contains(c.Message, "--secret-namespaces"),
			fmt.Sprintf("%+v", c)
	})
	if s, err := stores.Get(ctx, other, metav1.GetOptions{}); err != nil || !s.Status.GetCondition(v1alpha1.ConditionStalled).IsTrue() {
		t.Errorf("the refused store is not Stalled: %v, %+v", err, s.Status.Conditions)
	}
	eventually(t, 30*time.Second, "an event of the refusal", func() (bool, string) {
		events, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + other + ",reason=" + reconciler.ReasonSecretNamespaceNotAllowed})
		if err != nil {
			return false, err.Error()
		}
		return len(events.Items) > 0, fmt.Sprint(len(events.Items), " events")
	})
	eventually(t, 30*time.Second, "the store whose Secret the API server forbids", func() (bool, string) {
		c := ready(unbound)
		return c != nil && c.Reason == reconciler.ReasonSecretForbidden, fmt.Sprintf("%+v", c)
	})
	eventually(t, 30*time.Second, "the store of the listed namespace to read its Secret", func() (bool, string) {
		c := ready(tenant)
		return c != nil && c.Reason != "" && !strings.HasPrefix(c.Reason, "Secret") && c.Reason != "Forbidden", fmt.Sprintf("%+v", c)
	})
}

// rbac is the RBAC a rendering of the chart holds.
type rbac struct {
	clusterRoles []rbacv1.ClusterRole
	roles        []rbacv1.Role
	bindings     []rbacv1.RoleBinding
}

// renderRBAC renders the chart (release buildsmith in namespace
// buildsmith) with args, and reads its RBAC objects.
func renderRBAC(t *testing.T, args ...string) rbac {
	t.Helper()
	out, err := helm(append([]string{"template", "buildsmith", "charts/buildsmith", "--namespace", "buildsmith"}, args...)...).Output()
	if err != nil {
		t.Fatalf("helm template %q: %v", args, err)
	}
	var r rbac
	for _, doc := range strings.Split(strings.TrimPrefix(string(out), "---\n"), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("helm template %q: %v\n%s", args, err, doc)
		}
		var into any
		switch meta.Kind {
		case "ClusterRole":
			r.clusterRoles = append(r.clusterRoles, rbacv1.ClusterRole{})
			into = &r.clusterRoles[len(r.clusterRoles)-1]
		case "Role":
			r.roles = append(r.roles, rbacv1.Role{})
			into = &r.roles[len(r.roles)-1]
		case "RoleBinding":
			r.bindings = append(r.bindings, rbacv1.RoleBinding{})
			into = &r.bindings[len(r.bindings)-1]
		default:
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("helm template %q: a %s: %v", args, meta.Kind, err)
		}
	}
	return r
}

// secretVerbs are the verbs rules grant on Secrets (of the core group,
// named or by a wildcard), sorted.
func secretVerbs(rules []rbacv1.PolicyRule) []string {
	var verbs []string
	for _, rule := range rules {
		if (slices.Contains(rule.APIGroups, "") || slices.Contains(rule.APIGroups, "*")) &&
			(slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*")) {
			verbs = append(verbs, rule.Verbs...)
		}
	}
	slices.Sort(verbs)
	return slices.Compact(verbs)
}

// TestChartImage: the chart's image is the release's (tag = appVersion) unless
// values say otherwise, and image.digest pins it.
func TestChartImage(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "ghcr.io/buildsmith/buildsmith:" + chartAppVersion(t)},
		{[]string{"--set", "image.repository=registry.example/platform/buildsmith", "--set", "image.digest=" + digest},
			"registry.example/platform/buildsmith:" + chartAppVersion(t) + "@" + digest},
		{[]string{"--set", "image.tag=v9.9.9"}, "ghcr.io/buildsmith/buildsmith:v9.9.9"},
	} {
		out, err := helm(append([]string{"template", "charts/buildsmith"}, tc.set...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm template %q: %v\n%s", tc.set, err, out)
		}
		if !strings.Contains(string(out), fmt.Sprintf("image: %q", tc.want)) {
			t.Errorf("helm template %q does not install %s", tc.set, tc.want)
		}
	}
	if out, err := helm("template", "charts/buildsmith", "--set", "image.digest=latest").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "digest") {
		t.Errorf("helm template --set image.digest=latest: %v, want a schema error naming digest:\n%s", err, out)
	}
}

// chartAppVersion reads appVersion from Chart.yaml.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(env.Root, "charts", "buildsmith", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion: "); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatal("Chart.yaml has no appVersion")
	return ""
}
