package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// renderedChart is what helm template made of the chart: its Deployment and
// NetworkPolicies.
type renderedChart struct {
	deployment appsv1.Deployment
	policies   map[string]networkingv1.NetworkPolicy
}

func renderChart(t *testing.T, args ...string) renderedChart {
	t.Helper()
	out, err := helm(append([]string{"template", "buildsmith", "charts/buildsmith", "--namespace", "buildsmith"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %q: %v\n%s", args, err, out)
	}
	r := renderedChart{policies: map[string]networkingv1.NetworkPolicy{}}
	for _, doc := range strings.Split(strings.TrimPrefix(string(out), "---\n"), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("helm template %q: %v\n%s", args, err, doc)
		}
		switch meta.Kind {
		case "Deployment":
			if err := yaml.UnmarshalStrict([]byte(doc), &r.deployment); err != nil {
				t.Fatal(err)
			}
		case "NetworkPolicy":
			var p networkingv1.NetworkPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatalf("a NetworkPolicy: %v\n%s", err, doc)
			}
			r.policies[p.Name] = p
		}
	}
	return r
}

// renderObjects is what helm template made of the chart with args, by
// "Kind/name".
func renderObjects(t *testing.T, args ...string) map[string]unstructured.Unstructured {
	t.Helper()
	out, err := helm(append([]string{"template", "buildsmith", "charts/buildsmith", "--namespace", "buildsmith"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %q: %v\n%s", args, err, out)
	}
	byKind := map[string]unstructured.Unstructured{}
	for _, doc := range strings.Split(strings.TrimPrefix(string(out), "---\n"), "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("helm template %q: %v\n%s", args, err, doc)
		}
		if u.GetKind() != "" {
			byKind[u.GetKind()+"/"+u.GetName()] = u
		}
	}
	return byKind
}

// decodeAs decodes u into a typed object, strictly: a field the type does
// not have fails the test.
func decodeAs(t *testing.T, u unstructured.Unstructured, into any) {
	t.Helper()
	raw, _ := yaml.Marshal(u.Object)
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%s/%s: %v", u.GetKind(), u.GetName(), err)
	}
}

// TestChartUntrustedRegistryValues: the chart passes the bounds of what a
// tenant's registry may answer to the controller, sizes the scratch
// emptyDir for the pushes flattening at once at the bound, and on request
// adds an egress policy keeping the controller out of link-local and
// denied networks (IPv4 and IPv6 apart), DNS allowed.
func TestChartUntrustedRegistryValues(t *testing.T) {
	r := renderChart(t, "--set", "flatten.concurrent=3", "--set", "flatten.maxBytes=2097152",
		"--set", "registryLimits.deniedNetworks={10.96.0.0/12,fd00:10::/64}", "--set", "registryMetricHostList={registry.example:5000}",
		"--set", "networkPolicy.egress.enabled=true", "--set", "networkPolicy.egress.except={10.244.0.0/16}")
	args := r.deployment.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--max-concurrent-flattens=3", "--max-flatten-duration=30m", "--max-zstd-window=8388608", "--registry-max-header-bytes=65536",
		"--registry-min-read-rate=262144", "--registry-deny-network=10.96.0.0/12", "--registry-deny-network=fd00:10::/64",
		"--registry-metric-host=registry.example:5000"} {
		if !slices.Contains(args, want) {
			t.Errorf("controller arguments lack %s: %q", want, args)
		}
	}
	for _, v := range r.deployment.Spec.Template.Spec.Volumes {
		if v.Name == "scratch" {
			if got, want := v.EmptyDir.SizeLimit.Value(), int64(2*3*2097152); got != want {
				t.Errorf("scratch sizeLimit %d, want 2 × 3 flattens × 2 MiB = %d", got, want)
			}
		}
	}
	egress, ok := r.policies["buildsmith-controller-egress"]
	if !ok {
		t.Fatalf("no egress policy among %v", r.policies)
	}
	var blocks []string
	for _, rule := range egress.Spec.Egress {
		for _, peer := range rule.To {
			if peer.IPBlock != nil {
				blocks = append(blocks, fmt.Sprintf("%s except %v", peer.IPBlock.CIDR, peer.IPBlock.Except))
			}
		}
	}
	want := []string{"0.0.0.0/0 except [169.254.0.0/16 10.96.0.0/12 10.244.0.0/16]", "::/0 except [fe80::/10 fd00:10::/64]"}
	if !slices.Equal(blocks, want) {
		t.Errorf("egress blocks %q, want %q", blocks, want)
	}
	if len(egress.Spec.Egress) != 2 || len(egress.Spec.Egress[0].Ports) != 2 {
		t.Errorf("egress rules %+v, want DNS and the blocks", egress.Spec.Egress)
	}
	if _, ok := renderChart(t).policies["buildsmith-controller-egress"]; ok {
		t.Error("an egress policy by default")
	}
}
