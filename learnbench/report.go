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
	fmt.Fprintf(w, "preference %s; satisfaction = share of held-out probes (X-No-Train, temperature 0) that follow it\n", strings.Join(prefs, " → "))
	user := "a user who praises and corrects in words"
	if results[0].User == UserThumbs {
		user = "a thumbs-only user (a thumb on every reply, no words)"
	}
	if results[0].PaceS > 0 {
		user += fmt.Sprintf(", %gs to read and type each message (the bench never waits for training)", results[0].PaceS)
	} else {
		user += ", back only once the daemon has trained each session"
	}
	fmt.Fprintf(w, "user: %s\n\n", user)
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

// Goal is issue 14's bar for one run: satisfaction at least GoalSatisfaction
// at the last measurement, with held-out skills down by at most
// GoalSkillDrop.
const (
	GoalSatisfaction = 0.8
	GoalSkillDrop    = 0.05
)

// SeedSummary is one method's outcome over several seeds of a scenario.
type SeedSummary struct {
	Method string
	// Final and SkillDelta are per seed: the last measurement's
	// satisfaction and skills after minus before (0 when no skill probes
	// ran).
	Final, SkillDelta []float64
	// MedianFinal is the median of Final; Met counts the seeds that meet
	// the goal.
	MedianFinal float64
	Met         int
}

// Summarize reduces the runs of each method (one per seed, in seed order)
// to a SeedSummary, methods in the order given.
func Summarize(methods []string, runs map[string][]*Result) []SeedSummary {
	var out []SeedSummary
	for _, m := range methods {
		s := SeedSummary{Method: m}
		for _, r := range runs[m] {
			if len(r.Points) == 0 {
				continue
			}
			first, last := r.Points[0], r.Points[len(r.Points)-1]
			d := 0.0
			if first.Skills >= 0 && last.Skills >= 0 {
				d = last.Skills - first.Skills
			}
			s.Final = append(s.Final, last.Satisfaction)
			s.SkillDelta = append(s.SkillDelta, d)
			// A hair of slack: 0.8 and 0.05 are not exact in binary.
			if last.Satisfaction >= GoalSatisfaction-1e-9 && d >= -GoalSkillDrop-1e-9 {
				s.Met++
			}
		}
		if n := len(s.Final); n > 0 {
			v := append([]float64(nil), s.Final...)
			sort.Float64s(v)
			s.MedianFinal = v[n/2]
			if n%2 == 0 {
				s.MedianFinal = (v[n/2-1] + v[n/2]) / 2
			}
		}
		out = append(out, s)
	}
	return out
}

// SeedTable writes Summarize's result for one scenario: per method the
// last satisfaction and the skill change of every seed, the median, and
// how many seeds meet the goal.
func SeedTable(w io.Writer, sc Scenario, seeds []uint64, sums []SeedSummary) {
	fmt.Fprintf(w, "\nscenario %s over %d seeds: satisfaction at the last measurement (skills after − before, points)\n\n", sc.Name, len(seeds))
	var b strings.Builder
	b.WriteString("| method | ")
	for _, s := range seeds {
		fmt.Fprintf(&b, "seed %d | ", s)
	}
	fmt.Fprintf(&b, "median | goal met (≥ %.2f, skills ≥ −%.0f points) |\n|---|", GoalSatisfaction, 100*GoalSkillDrop)
	for range seeds {
		b.WriteString("---|")
	}
	b.WriteString("---|---|\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "| %s | ", s.Method)
		for i := range s.Final {
			fmt.Fprintf(&b, "%.2f (%+.0f) | ", s.Final[i], 100*s.SkillDelta[i])
		}
		fmt.Fprintf(&b, "%.2f | %d of %d |\n", s.MedianFinal, s.Met, len(s.Final))
	}
	io.WriteString(w, b.String())
}
