package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// dashboard is as much of a Grafana dashboard as the checks here read.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// grafanaVariables are the variables the dashboard's queries may hold, with
// values that make them PromQL for the checks.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h",
	"${namespace}", ".*", "$namespace", ".*")

// podMetrics are the series beside the controller's own that the dashboard's
// pod panels read: the kubelet's cAdvisor and kube-state-metrics (both
// scraped by kube-prometheus-stack), and the Go runtime's, which knative's
// sharedmain exports with the controller's (test/e2e TestPrometheusMetrics
// scrapes them from the real controller).
var podMetrics = map[string]bool{
	"container_cpu_usage_seconds_total": true, "container_memory_working_set_bytes": true,
	"kube_pod_container_resource_limits": true, "kube_pod_container_status_restarts_total": true,
	"go_memory_used_bytes": true, "go_goroutine_count": true,
}

var labelValues = regexp.MustCompile(`^label_values\(\s*([^,()]+?)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)$`)

// TestGrafanaDashboard: the dashboard the chart ships (files/, and the copy
// in docs/) parses, each of its panels queries the controller's metrics —
// every name one the controller exports, every query PromQL that promtool
// accepts — and together they show every metric the controller exports.
func TestGrafanaDashboard(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "charts", "buildsmith", "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if docs, err := os.ReadFile(filepath.Join(root, "docs", "grafana-dashboard.json")); err != nil || !bytes.Equal(docs, raw) {
		t.Errorf("docs/grafana-dashboard.json is not charts/buildsmith/files/grafana-dashboard.json (%v): copy it", err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("the dashboard: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("the dashboard's title %q, uid %q: want both", d.Title, d.UID)
	}
	variables := map[string]bool{}
	for _, v := range d.Templating.List {
		variables[v.Name] = true
	}
	if !variables["datasource"] || !variables["namespace"] {
		t.Errorf("the dashboard's variables %v, want datasource and namespace", variables)
	}

	names := exported(t)
	shown := map[string]bool{} // instruments shown
	check := func(where, expr string) {
		t.Helper()
		used := metricNames(expr)
		if len(used) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, name := range used {
			in, ok := names[name]
			if !ok && podMetrics[name] {
				continue
			}
			if !ok {
				t.Errorf("%s: %s, which the controller does not export (it exports %v)", where, name, sorted(names))
				continue
			}
			shown[in.name] = true
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		query, _ := v.Query.(string)
		if q, ok := v.Query.(map[string]any); ok {
			query, _ = q["query"].(string)
		}
		m := labelValues.FindStringSubmatch(query)
		if m == nil {
			t.Errorf("variable %s: query %q, want label_values(METRIC, LABEL)", v.Name, query)
			continue
		}
		check("variable "+v.Name, m[1])
	}

	// Every query as a recording rule, for promtool's parser.
	var records strings.Builder
	records.WriteString("groups:\n- name: dashboard\n  rules:\n")
	var panels []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			panels = append(panels, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	queries := 0
	for _, p := range panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: %d queries, data source %+v; want queries of ${datasource}", p.Title, len(p.Targets), p.Datasource)
		}
		for _, target := range p.Targets {
			where := fmt.Sprintf("panel %q, query %s", p.Title, target.RefID)
			expr := grafanaVariables.Replace(target.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("%s: a variable this test does not know in %q", where, target.Expr)
				continue
			}
			check(where, expr)
			queries++
			rule, err := yaml.Marshal([]map[string]string{{"record": fmt.Sprintf("dashboard:query_%d", queries), "expr": expr}})
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.SplitAfter(strings.TrimSpace(string(rule)), "\n") {
				records.WriteString("  " + strings.TrimRight(line, "\n") + "\n")
			}
		}
	}
	if queries < 10 {
		t.Fatalf("%d queries in the dashboard, want the panels the README names", queries)
	}
	for _, in := range instruments(t) {
		if !shown[in.name] {
			t.Errorf("no panel shows %s (%s): add one to charts/buildsmith/files/grafana-dashboard.json", in.name, in.at)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yaml"), []byte(records.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, dir, "check", "rules", "dashboard.yaml"); err != nil {
		t.Errorf("promtool check rules of the dashboard's queries: %v\n%s\n%s", err, out, records.String())
	}
}

// TestDashboardConfigMap: metrics.dashboard.enabled renders the dashboard
// file, as it is, in a ConfigMap with the Grafana sidecar's label (and the
// labels, annotations and namespace given); nothing by default.
func TestDashboardConfigMap(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "buildsmith", "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--set", "metrics.enabled=false", "--set", "metrics.dashboard.enabled=true"}} {
		if cm, ok := render(t, args...)["ConfigMap/buildsmith-controller-dashboard"]; ok {
			t.Errorf("helm template %q: the dashboard's ConfigMap rendered in %s", args, cm.GetNamespace())
		}
	}
	for _, tc := range []struct {
		args              []string
		namespace, folder string
		labels            map[string]string
	}{
		{[]string{"--set", "metrics.dashboard.enabled=true"}, "buildsmith", "", map[string]string{"grafana_dashboard": "1"}},
		{[]string{"--set", "metrics.dashboard.enabled=true", "--set", "metrics.dashboard.namespace=monitoring",
			"--set", "metrics.dashboard.annotations.grafana_folder=Platform", "--set", "metrics.dashboard.labels.team=platform"},
			"monitoring", "Platform", map[string]string{"grafana_dashboard": "1", "team": "platform"}},
	} {
		cm, ok := render(t, tc.args...)["ConfigMap/buildsmith-controller-dashboard"]
		if !ok {
			t.Errorf("helm template %q: no ConfigMap buildsmith-controller-dashboard", tc.args)
			continue
		}
		if cm.GetNamespace() != tc.namespace || cm.GetAnnotations()["grafana_folder"] != tc.folder {
			t.Errorf("helm template %q: ConfigMap in %q, annotations %v; want %q, folder %q", tc.args, cm.GetNamespace(), cm.GetAnnotations(), tc.namespace, tc.folder)
		}
		for k, v := range tc.labels {
			if cm.GetLabels()[k] != v {
				t.Errorf("helm template %q: ConfigMap labels %v, want %s=%s", tc.args, cm.GetLabels(), k, v)
			}
		}
		data, _ := cm.Object["data"].(map[string]any)
		if got, _ := data["buildsmith.json"].(string); got != strings.TrimRight(string(raw), "\n") {
			t.Errorf("helm template %q: the ConfigMap's buildsmith.json is not files/grafana-dashboard.json (%d bytes, want %d)", tc.args, len(got), len(raw))
		}
	}
}
