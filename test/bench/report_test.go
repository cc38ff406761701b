package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// section is one scenario's part of the report.
type section struct {
	title   string
	run     string     // commit and date of the run
	what    string     // how it was measured
	header  []string   // of the table
	rows    [][]string // of the table
	targets []target
	notes   []string
}

type target struct {
	name, want, got string
	met             bool
}

var (
	reportMu sync.Mutex
	sections []*section
)

func addSection(s *section) {
	reportMu.Lock()
	defer reportMu.Unlock()
	s.run = fmt.Sprintf("run at %s, %s", builtFrom, time.Now().UTC().Format(time.RFC3339))
	sections = append(sections, s)
	fmt.Print(s.markdown()) // shown with go test -v
}

func (s *section) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", s.title)
	if s.run != "" {
		fmt.Fprintf(&b, "_%s_\n\n", s.run)
	}
	if s.what != "" {
		fmt.Fprintf(&b, "%s\n\n", s.what)
	}
	if len(s.header) > 0 {
		fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(s.header, " | "), strings.Repeat("---|", len(s.header)))
		for _, r := range s.rows {
			fmt.Fprintf(&b, "| %s |\n", strings.Join(r, " | "))
		}
		b.WriteString("\n")
	}
	if len(s.targets) > 0 {
		b.WriteString("| target | want | got | |\n|---|---|---|---|\n")
		for _, t := range s.targets {
			verdict := "met"
			if !t.met {
				verdict = "**missed**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.name, t.want, t.got, verdict)
		}
		b.WriteString("\n")
	}
	for _, n := range s.notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(s.notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// writeReport writes bench/results.md.
func writeReport() error {
	reportMu.Lock()
	defer reportMu.Unlock()
	var b strings.Builder
	b.WriteString("# buildsmith benchmarks\n\n")
	b.WriteString("Written by `make bench` (test/bench). Counts and ratios first; seconds are medians of the runs with [min–max].\n\n")
	fmt.Fprintf(&b, "- machine: %s\n", machine())
	fmt.Fprintf(&b, "- commit: %s\n", builtFrom)
	fmt.Fprintf(&b, "- date: %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- go: %s %s/%s\n\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	// Sections of scenarios not run this time (BENCH_RUN, -run) are kept
	// from the previous report.
	byNumber := map[string]string{}
	path := filepath.Join(env.Root, "bench", "results.md")
	if old, err := os.ReadFile(path); err == nil {
		for _, part := range strings.Split(string(old), "\n## ")[1:] {
			if num, _, ok := strings.Cut(part, "."); ok && isNumber(num) {
				byNumber[num] = "## " + strings.TrimRight(part, "\n") + "\n\n"
			} else if strings.HasPrefix(part, "Go micro-benchmarks") {
				byNumber["micro"] = "## " + strings.TrimRight(part, "\n") + "\n"
			}
		}
	}
	for _, s := range sections {
		num, _, _ := strings.Cut(s.title, ".")
		byNumber[num] = s.markdown()
	}
	// Every number up to the largest a section could have: a list of them
	// dropped each newer scenario's section (13 was) until someone added it.
	for num := 1; num < 100; num++ {
		b.WriteString(byNumber[strconv.Itoa(num)])
	}
	micro := ""
	if path := os.Getenv("BENCH_MICRO"); path != "" {
		if raw, err := os.ReadFile(path); err == nil {
			var m strings.Builder
			fmt.Fprintf(&m, "## Go micro-benchmarks (./pkg/...)\n\n_run at %s_\n\n```\n", builtFrom)
			for _, line := range strings.Split(string(raw), "\n") {
				if strings.HasPrefix(line, "Benchmark") || strings.HasPrefix(line, "ok") || strings.HasPrefix(line, "pkg:") {
					m.WriteString(line + "\n")
				}
			}
			m.WriteString("```\n")
			micro = m.String()
		}
	}
	if micro == "" {
		micro = byNumber["micro"]
	}
	b.WriteString(micro)
	dir := filepath.Join(env.Root, "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644)
}

// isNumber reports whether s is a section number.
func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil && len(s) <= 2
}

func machine() string {
	model, cpus := "", 0
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				cpus++
			}
		}
	}
	mem := ""
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return fmt.Sprintf("%d × %s, %s RAM", cpus, model, mem)
}

// builtFrom is the commit the controller and this test were built from,
// taken when the run starts: a section added at the end of a long run is
// stamped with what ran, not with what HEAD became meanwhile.
var builtFrom string

func commit() string {
	cmd := exec.Command("git", "rev-parse", "--short", "HEAD")
	cmd.Dir = env.Root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	st := exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	st.Dir = env.Root
	if dirty, _ := st.Output(); len(strings.TrimSpace(string(dirty))) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// seconds renders durations as "median s [min–max]".
func seconds(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if len(s) == 1 {
		return fmt.Sprintf("%.2f s (1 run)", med.Seconds())
	}
	return fmt.Sprintf("%.2f s [%.2f–%.2f]", med.Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
}

func mib(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func envInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(key string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(key)); err == nil && v > 0 {
		return v
	}
	return def
}

func envInts(key string, def []int) []int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return def
	}
	return out
}
