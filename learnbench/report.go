package learnbench

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Table writes the results of one scenario as the OpenClaw-RL paper's
// Table 3 has them: a row per method, the probe satisfaction at every
// measurement, held-out skills before and after, and the training steps
// taken (weight versions published).
func Table(w io.Writer, sc Scenario, results []*Result) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(w, "\nscenario %s: %s\n", sc.Name, sc.Note)
	var prefs []string
	for _, p := range sc.Phases {
		prefs = append(prefs, p.Pref.String())
	}
	fmt.Fprintf(w, "preference %s; satisfaction = share of held-out probes (X-No-Train, temperature 0) that follow it\n\n", strings.Join(prefs, " → "))
	var b strings.Builder
	b.WriteString("| method | ")
	for _, p := range results[0].Points {
		fmt.Fprintf(&b, "turn %d | ", p.Turn)
	}
	b.WriteString("skills before → after | chat replies satisfied | steps | time |\n|---|")
	for range results[0].Points {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | ", r.Method)
		for _, p := range r.Points {
			fmt.Fprintf(&b, "%.2f", p.Satisfaction)
			if p.Previous >= 0 {
				fmt.Fprintf(&b, " (old %.2f)", p.Previous)
			}
			b.WriteString(" | ")
		}
		first, last := r.Points[0], r.Points[len(r.Points)-1]
		fmt.Fprintf(&b, "%s → %s | %d/%d | %d | %s |\n", pct(first.Skills), pct(last.Skills), r.Satisfied, r.Turns,
			r.LastVersion-r.FirstVersion, r.Duration.Round(1e9))
	}
	io.WriteString(w, b.String())
	for _, r := range results {
		fmt.Fprintf(w, "\n%s: daemon counters:", r.Method)
		keys := make([]string, 0, len(r.Daemon))
		for k := range r.Daemon {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, " %s %g;", strings.TrimPrefix(k, "clawrl_"), r.Daemon[k])
		}
		fmt.Fprintln(w)
	}
}

func pct(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

// Plot draws satisfaction against user turns, a line per method (dashed:
// the earlier preference of a switch scenario), as a PNG.
func Plot(sc Scenario, results []*Result) ([]byte, error) {
	p := plot.New()
	p.Title.Text = "clawrl bench learn: " + sc.Name
	p.X.Label.Text = "user turns"
	p.Y.Label.Text = "probe satisfaction"
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	palette := []color.Color{
		color.RGBA{31, 119, 180, 255}, color.RGBA{255, 127, 14, 255}, color.RGBA{44, 160, 44, 255},
		color.RGBA{214, 39, 40, 255}, color.RGBA{148, 103, 189, 255}, color.RGBA{140, 86, 75, 255},
	}
	for i, r := range results {
		col := palette[i%len(palette)]
		var cur, prev plotter.XYs
		for _, pt := range r.Points {
			cur = append(cur, plotter.XY{X: float64(pt.Turn), Y: pt.Satisfaction})
			if pt.Previous >= 0 {
				prev = append(prev, plotter.XY{X: float64(pt.Turn), Y: pt.Previous})
			}
		}
		l, s, err := plotter.NewLinePoints(cur)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = col, vg.Points(2)
		s.Color, s.Shape = col, draw.CircleGlyph{}
		p.Add(l, s)
		p.Legend.Add(r.Method, l, s)
		if len(prev) > 0 {
			lp, err := plotter.NewLine(prev)
			if err != nil {
				return nil, err
			}
			lp.Color, lp.Dashes = col, []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(lp)
			p.Legend.Add(r.Method+" (old preference)", lp)
		}
	}
	wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
