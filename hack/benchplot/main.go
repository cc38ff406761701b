// Command benchplot draws docs/bench-metrics.png: three of the dashboard's
// panels (docs/grafana-dashboard.json) as the bench's runs measured them,
// read from bench/results.md — the stale objects falling after a registry
// fault (§ 14), registry requests per second during faults (§ 6), and how
// long a stack patch's rebuilds took (§ 12). It is no screenshot of Grafana:
// the bench keeps figures, not time series, so each panel plots the points
// results.md has.
//
//	cd hack/benchplot && go run . ../../bench/results.md ../../docs/bench-metrics.png
package main

import (
	"fmt"
	"image/color"
	"log"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: benchplot bench/results.md out.png")
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	results := string(raw)
	panels := []*plot.Plot{
		must(staleAfterBlip(section(results, "14."))),
		must(requestsDuringFaults(section(results, "6."))),
		must(stackPatch(section(results, "12."))),
	}
	img := vgimg.New(vg.Points(1500), vg.Points(430))
	dc := draw.New(img)
	white := color.White
	dc.SetColor(white)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 3,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	out, err := os.Create(os.Args[2])
	if err != nil {
		log.Fatal(err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
		log.Fatal(err)
	}
	if err := out.Close(); err != nil {
		log.Fatal(err)
	}
}

func must(p *plot.Plot, err error) *plot.Plot {
	if err != nil {
		log.Fatal(err)
	}
	return p
}

// section is the text of results.md's section "## N. …".
func section(results, number string) string {
	for _, s := range strings.Split(results, "\n## ") {
		if strings.HasPrefix(s, number+" ") {
			return s
		}
	}
	return ""
}

// table is the first Markdown table of a section whose header has every
// column named, as rows of cells by column name.
func table(text string, columns ...string) ([]map[string]string, error) {
	var header []string
	var rows []map[string]string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") {
			if header != nil {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case header == nil:
			has := 0
			for _, c := range cells {
				for _, want := range columns {
					if c == want {
						has++
					}
				}
			}
			if has == len(columns) {
				header = cells
			}
		case strings.HasPrefix(cells[0], "---"):
		default:
			row := map[string]string{}
			for i, c := range cells {
				if i < len(header) {
					row[header[i]] = c
				}
			}
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no table with columns %q", columns)
	}
	return rows, nil
}

// seconds reads "9.1s", "200ms" or "3m12.4s".
func seconds(s string) (float64, error) {
	s = strings.Fields(s)[0]
	total := 0.0
	for _, m := range regexp.MustCompile(`([\d.]+)(ms|m|s)`).FindAllStringSubmatch(s, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return 0, err
		}
		total += v * map[string]float64{"ms": 0.001, "s": 1, "m": 60}[m[2]]
	}
	if total == 0 && s != "0s" {
		return 0, fmt.Errorf("not a duration: %q", s)
	}
	return total, nil
}

var recovery = regexp.MustCompile(`(?m)^- (\S+), run \d+: .*?UpToDate=True again: 10 % by ([\d.]+)s, 50 % by ([\d.]+)s, 90 % by ([\d.]+)s`)

// staleAfterBlip: § 14's objects UpToDate=False from the
// fault's end until all are re-checked, for each fault: all of them at the
// end, 90 %, 50 %, 10 % left at the times the bench read, none at the last.
func staleAfterBlip(text string) (*plot.Plot, error) {
	rows, err := table(text, "fault, run", "objects", "all UpToDate=True after the fault")
	if err != nil {
		return nil, fmt.Errorf("§ 14: %w", err)
	}
	p := plot.New()
	p.Title.Text = "Ready but stale (UpToDate=False) after a 1-minute\nregistry fault, 1,000 builders (bench § 14)"
	p.X.Label.Text = "seconds after the registry answers again"
	p.Y.Label.Text = "objects (UpToDate=False)"
	p.Add(plotter.NewGrid())
	found := recovery.FindAllStringSubmatch(text, -1)
	if len(found) == 0 {
		return nil, fmt.Errorf("§ 14: no recovery figures")
	}
	for i, m := range found {
		var row map[string]string
		for _, r := range rows {
			if strings.HasPrefix(r["fault, run"], m[1]+",") {
				row = r
			}
		}
		if row == nil {
			return nil, fmt.Errorf("§ 14: no row for %s", m[1])
		}
		n, err := strconv.ParseFloat(row["objects"], 64)
		if err != nil {
			return nil, err
		}
		all, err := seconds(row["all UpToDate=True after the fault"])
		if err != nil {
			return nil, err
		}
		pts := plotter.XYs{{X: 0, Y: n}}
		for j, left := range []float64{0.9, 0.5, 0.1} {
			t, _ := strconv.ParseFloat(m[2+j], 64)
			pts = append(pts, plotter.XY{X: t, Y: n * left})
		}
		pts = append(pts, plotter.XY{X: all, Y: 0})
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = palette[i], palette[i]
		line.Width = vg.Points(2)
		p.Add(line, points)
		p.Legend.Add(m[1], line, points)
	}
	p.Legend.Top = true
	p.Y.Min = 0
	return p, nil
}

// requestsDuringFaults: § 6's registry requests per second during each
// fault (buildsmith_registry_requests_total's rate), the mean of its runs.
func requestsDuringFaults(text string) (*plot.Plot, error) {
	rows, err := table(text, "fault", "requests/s during")
	if err != nil {
		return nil, fmt.Errorf("§ 6: %w", err)
	}
	sum, count := map[string]float64{}, map[string]int{}
	var faults []string
	for _, r := range rows {
		v, err := strconv.ParseFloat(r["requests/s during"], 64)
		if err != nil {
			return nil, fmt.Errorf("§ 6: %w", err)
		}
		if count[r["fault"]] == 0 {
			faults = append(faults, r["fault"])
		}
		sum[r["fault"]] += v
		count[r["fault"]]++
	}
	values := plotter.Values{}
	names := []string{}
	for _, f := range faults {
		values = append(values, sum[f]/float64(count[f]))
		names = append(names, shortFault(f))
	}
	p := plot.New()
	p.Title.Text = "Registry requests while the registry fails,\n200 builders created meanwhile (bench § 6)"
	p.Y.Label.Text = "requests/s (all hosts and statuses)"
	p.Add(plotter.NewGrid())
	bars, err := plotter.NewBarChart(values, vg.Points(40))
	if err != nil {
		return nil, err
	}
	bars.Color = palette[0]
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	p.Y.Min = 0
	return p, nil
}

func shortFault(f string) string {
	f = strings.ReplaceAll(f, "503 on the builders' repositories only", "503, builders'\nrepositories")
	return strings.ReplaceAll(f, ", Retry-After: ", "\nRetry-After ")
}

var patchPuts = regexp.MustCompile(`(?m)^- N=(\d+): .*?patch: .*?PUT manifest (\d+)`)

// stackPatch: § 12's stack patch — how long until every builder was rebuilt,
// and the manifest PUTs (the dashboard's rebuilds panel) it took, by N.
func stackPatch(text string) (*plot.Plot, error) {
	rows, err := table(text, "N", "patch: all rebuilt")
	if err != nil {
		return nil, fmt.Errorf("§ 12: %w", err)
	}
	puts := map[string]string{}
	for _, m := range patchPuts.FindAllStringSubmatch(text, -1) {
		puts[m[1]] = m[2]
	}
	type point struct {
		n    float64
		took float64
		puts string
	}
	var pts []point
	for _, r := range rows {
		if strings.Contains(r["N"], "(") && !strings.Contains(r["N"], "no managedFields") {
			continue // an earlier run of the same N
		}
		n, err := strconv.ParseFloat(strings.Fields(r["N"])[0], 64)
		if err != nil {
			return nil, fmt.Errorf("§ 12: %w", err)
		}
		took, err := seconds(r["patch: all rebuilt"])
		if err != nil {
			return nil, fmt.Errorf("§ 12: %w", err)
		}
		pts = append(pts, point{n, took, puts[strings.Fields(r["N"])[0]]})
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].n < pts[j].n })
	values := plotter.Values{}
	names := []string{}
	for _, pt := range pts {
		values = append(values, pt.took)
		names = append(names, fmt.Sprintf("%.0f builders\n%s manifest PUTs", pt.n, pt.puts))
	}
	p := plot.New()
	p.Title.Text = "Rebuilds after a stack patch:\nuntil every builder was pushed again (bench § 12)"
	p.Y.Label.Text = "seconds"
	p.Add(plotter.NewGrid())
	bars, err := plotter.NewBarChart(values, vg.Points(40))
	if err != nil {
		return nil, err
	}
	bars.Color = palette[1]
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	p.Y.Min = 0
	return p, nil
}

// palette: Grafana's first series colours.
var palette = []color.Color{
	color.RGBA{R: 0x73, G: 0xbf, B: 0x69, A: 0xff},
	color.RGBA{R: 0xf2, G: 0xcc, B: 0x0c, A: 0xff},
	color.RGBA{R: 0x8a, G: 0xb8, B: 0xff, A: 0xff},
}
