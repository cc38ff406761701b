package e2e

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartReceiver: the chart serves the Receivers' webhooks by default —
// the controller's port 9292 behind the Service buildsmith-controller-receiver, the
// flags from receiver's values, and no more RBAC than the status of
// Receivers — and none of it with receiver.enabled=false; receiver.ingress routes
// /hook/ alone to a host it requires; the NetworkPolicy lets notifications
// in from receiverFrom, or from anywhere on that port alone; the schema
// refuses bad values.
func TestChartReceiver(t *testing.T) {
	on := renderObjects(t, "--set-json", "receiver.eventsPerSecond=2.5", "--set", "receiver.burst=7")
	var deployment appsv1.Deployment
	decodeAs(t, on["Deployment/buildsmith-controller"], &deployment)
	container := deployment.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"--receiver-port=9292", "--receiver-events-per-second=2.5", "--receiver-burst=7"} {
		if !slices.Contains(container.Args, arg) {
			t.Errorf("the controller's args %q lack %s", container.Args, arg)
		}
	}
	if !slices.ContainsFunc(container.Ports, func(p corev1.ContainerPort) bool { return p.Name == "receiver" && p.ContainerPort == 9292 }) {
		t.Errorf("the controller's ports %+v lack receiver 9292", container.Ports)
	}
	var service corev1.Service
	decodeAs(t, on["Service/buildsmith-controller-receiver"], &service)
	if len(service.Spec.Ports) != 1 || service.Spec.Ports[0].Port != 80 || service.Spec.Ports[0].TargetPort.StrVal != "receiver" ||
		service.Spec.Selector["app.kubernetes.io/component"] != "controller" {
		t.Errorf("Service buildsmith-controller-receiver: %+v, want port 80 to the pods' receiver port", service.Spec)
	}
	if writesObjects(t, on) {
		t.Error("the ClusterRole lets the controller write buildsmith objects, not only their status")
	}
	if _, ok := on["Ingress/buildsmith-controller-receiver"]; ok {
		t.Error("an Ingress by default")
	}

	off := renderObjects(t, "--set", "receiver.enabled=false")
	decodeAs(t, off["Deployment/buildsmith-controller"], &deployment)
	if !slices.Contains(deployment.Spec.Template.Spec.Containers[0].Args, "--receiver-port=0") {
		t.Errorf("receiver.enabled=false: args %q, want --receiver-port=0", deployment.Spec.Template.Spec.Containers[0].Args)
	}
	if _, ok := off["Service/buildsmith-controller-receiver"]; ok {
		t.Error("receiver.enabled=false: the Service rendered")
	}

	ingress := renderObjects(t, "--set", "receiver.ingress.enabled=true", "--set", "receiver.ingress.host=hooks.example.com",
		"--set", "receiver.ingress.className=nginx")
	var ing networkingv1.Ingress
	decodeAs(t, ingress["Ingress/buildsmith-controller-receiver"], &ing)
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "hooks.example.com" || len(ing.Spec.Rules[0].HTTP.Paths) != 1 ||
		ing.Spec.Rules[0].HTTP.Paths[0].Path != "/hook/" || ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name != "buildsmith-controller-receiver" ||
		ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
		t.Errorf("the receiver's Ingress: %+v, want hooks.example.com/hook/ to buildsmith-controller-receiver, class nginx", ing.Spec)
	}
	if out, err := helm("template", "buildsmith", "charts/buildsmith", "--set", "receiver.ingress.enabled=true").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "receiver.ingress.host") {
		t.Errorf("an Ingress without a host: %v, want a failure naming receiver.ingress.host:\n%s", err, out)
	}

	for _, tc := range []struct {
		args []string
		from bool // the receiver's rule has peers
	}{
		{[]string{"--set", "networkPolicy.enabled=true"}, false},
		{[]string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.receiverFrom[0].namespaceSelector.matchLabels.app=registry"}, true},
	} {
		var policy networkingv1.NetworkPolicy
		decodeAs(t, renderObjects(t, tc.args...)["NetworkPolicy/buildsmith-controller"], &policy)
		i := slices.IndexFunc(policy.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
			return len(r.Ports) == 1 && r.Ports[0].Port.StrVal == "receiver"
		})
		if i < 0 || (len(policy.Spec.Ingress[i].From) > 0) != tc.from {
			t.Errorf("%q: ingress %+v, want a rule for the receiver port (peers: %v)", tc.args, policy.Spec.Ingress, tc.from)
		}
	}

	for _, bad := range []struct{ set, mentions string }{
		{"receiver.eventsPerSecond=0", "eventsPerSecond"},
		{"receiver.burst=0", "burst"},
		{"receiver.service.type=ExternalName", "type"},
		{"receiver.port=80", "port"},
	} {
		out, err := helm("template", "buildsmith", "charts/buildsmith", "--set", bad.set).CombinedOutput()
		if err == nil || !strings.Contains(string(out), bad.mentions) {
			t.Errorf("--set %s: %v, want a schema error naming %s:\n%s", bad.set, err, bad.mentions, out)
		}
	}
}

// writesObjects reports whether the rendered ClusterRole lets the
// controller write buildsmith objects other than through their status.
func writesObjects(t *testing.T, rendered map[string]unstructured.Unstructured) bool {
	t.Helper()
	var role rbacv1.ClusterRole
	decodeAs(t, rendered["ClusterRole/buildsmith-controller"], &role)
	return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
		written := slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" })
		return slices.Contains(r.APIGroups, "buildsmith.dev") && written &&
			slices.ContainsFunc(r.Resources, func(res string) bool { return !strings.HasSuffix(res, "/status") })
	})
}
