package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ruleGroups is the rule file format (and a PrometheusRule's spec).
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Record      string            `json:"record"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// unitTests is promtool's unit test file, as much as the checks here read.
type unitTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name        string `json:"name"`
		InputSeries []struct {
			Series string `json:"series"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// prometheusRule is the PrometheusRule the chart renders with args (and
// metrics.prometheusRule.enabled), and its spec as a rule file.
func prometheusRule(t *testing.T, args ...string) (unstructured.Unstructured, []byte) {
	t.Helper()
	rendered := ofKind(render(t, append([]string{"--set", "metrics.prometheusRule.enabled=true"}, args...)...), "PrometheusRule")
	if len(rendered) != 1 {
		t.Fatalf("helm template %q: %d PrometheusRules, want 1", args, len(rendered))
	}
	u := rendered[0]
	spec, ok := u.Object["spec"]
	if !ok {
		t.Fatal("the PrometheusRule has no spec")
	}
	raw, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return u, raw
}

func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tool(t, "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestPrometheusRules: the alerts the chart ships, as `helm template`
// renders them into the PrometheusRule, pass `promtool check rules`, and
// `promtool test rules` with testdata/rules_test.yaml, in which each alert
// fires and stays silent; they select only series the controller exports,
// and each links its runbook, a section of docs/runbooks.md.
func TestPrometheusRules(t *testing.T) {
	u, rules := prometheusRule(t, "--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack")
	if u.GetAPIVersion() != "monitoring.coreos.com/v1" || u.GetNamespace() != "buildsmith" ||
		u.GetLabels()["release"] != "kube-prometheus-stack" || u.GetLabels()["app.kubernetes.io/instance"] != "buildsmith" {
		t.Errorf("PrometheusRule %s %s/%s labels %v, want monitoring.coreos.com/v1 in buildsmith with the chart's labels and release=kube-prometheus-stack",
			u.GetAPIVersion(), u.GetNamespace(), u.GetName(), u.GetLabels())
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, dir, "check", "rules", "--lint=all", "--lint-fatal", "rules.yaml"); err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, out, rules)
	}

	var groups ruleGroups
	if err := yaml.UnmarshalStrict(rules, &groups); err != nil {
		t.Fatalf("the rendered rules: %v", err)
	}
	names := exported(t)
	runbooks := runbookAnchors(t)
	alerts := map[string]rule{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert (%s)", g.Name, r.Record)
				continue
			}
			alerts[r.Alert] = r
			used := metricNames(r.Expr)
			if len(used) == 0 {
				t.Errorf("%s: no metric in %q", r.Alert, r.Expr)
			}
			for _, name := range used {
				if _, ok := names[name]; !ok {
					t.Errorf("%s selects %s, which the controller does not export (it exports %v)", r.Alert, name, sorted(names))
				}
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: annotations %v, want a summary and a description", r.Alert, r.Annotations)
			}
			url := r.Annotations["runbook_url"]
			page, anchor, _ := strings.Cut(url, "#")
			if page != "https://github.com/buildsmith/buildsmith/blob/main/docs/runbooks.md" || !runbooks[anchor] {
				t.Errorf("%s: runbook_url %q, want docs/runbooks.md# and one of its sections %v", r.Alert, url, sorted(runbooks))
			}
		}
	}
	if len(alerts) < 5 {
		t.Fatalf("%d alerts rendered, want at least 5", len(alerts))
	}

	// Each alert fires in some test and stays silent in another, on series
	// the controller exports.
	raw, err := os.ReadFile("testdata/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests unitTests
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatal(err)
	}
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != "rules.yaml" {
		t.Fatalf("testdata/rules_test.yaml: rule_files %v, want [rules.yaml] (the rendered rules)", tests.RuleFiles)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, s := range tc.InputSeries {
			name, _, _ := strings.Cut(s.Series, "{")
			if _, ok := names[name]; !ok && name != "up" {
				t.Errorf("test %q: input series %s, which the controller does not export", tc.Name, name)
			}
		}
		for _, a := range tc.AlertRuleTest {
			if _, ok := alerts[a.Alertname]; !ok {
				t.Errorf("test %q: alert %s is not among the rendered rules", tc.Name, a.Alertname)
			}
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, name := range sorted(alerts) {
		if !fires[name] || !silent[name] {
			t.Errorf("alert %s: firing in a test %v, silent in a test %v; want both in testdata/rules_test.yaml", name, fires[name], silent[name])
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, dir, "test", "rules", "rules_test.yaml"); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	} else {
		t.Logf("promtool test rules:\n%s", out)
	}
}

// TestPrometheusRuleValues: no PrometheusRule unless asked, none without
// metrics, and runbookURL moves every alert's link to another page, keeping
// its section.
func TestPrometheusRuleValues(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "metrics.enabled=false", "--set", "metrics.prometheusRule.enabled=true"}} {
		if got := ofKind(render(t, args...), "PrometheusRule"); len(got) != 0 {
			t.Errorf("helm template %q: a PrometheusRule rendered", args)
		}
	}
	_, rules := prometheusRule(t, "--set", "metrics.prometheusRule.runbookURL=https://wiki.example.com/platform/buildsmith-runbooks")
	var groups ruleGroups
	if err := yaml.UnmarshalStrict(rules, &groups); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			want := "https://wiki.example.com/platform/buildsmith-runbooks#" + strings.ToLower(r.Alert)
			if got := r.Annotations["runbook_url"]; got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
		}
	}
}

var heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)

// runbookAnchors are the anchors GitHub gives the headings of
// docs/runbooks.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(string(raw), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	return anchors
}

// githubAnchor is GitHub's anchor for a heading: lower case, punctuation
// but hyphens and underscores dropped, spaces made hyphens.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"BuildsmithObjectsNotReady":                       "buildsmithobjectsnotready",
		"Before an alert: `kubectl buildsmith status -A`": "before-an-alert-kubectl-buildsmith-status--a",
	} {
		if got := githubAnchor(heading); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestMonitoringValuesSchema: the values schema refuses bad
// metrics.prometheusRule and metrics.dashboard values, naming them.
func TestMonitoringValuesSchema(t *testing.T) {
	root := repoRoot(t)
	tmp := t.TempDir()
	for _, bad := range []struct{ set, mentions string }{
		{"metrics.prometheusRule.enabled=yes", "enabled"},
		{"metrics.prometheusRule.runbookURL=docs/runbooks.md", "runbookURL"},
		{"metrics.prometheusRule.interval=30s", "interval"},
		{"metrics.dashboard.namespace=Not_A_Namespace", "namespace"},
		{"metrics.dashboard.folder=Platform", "folder"},
	} {
		cmd := exec.Command(tool(t, "helm"), "lint", "charts/buildsmith", "--set", bad.set)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+tmp, "HELM_CONFIG_HOME="+tmp, "HELM_DATA_HOME="+tmp)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), bad.mentions) {
			t.Errorf("helm lint --set %s: %v, want a schema error naming %s:\n%s", bad.set, err, bad.mentions, out)
		}
	}
}
