package pretrain

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/clawrl/clawrl/atomicfile"
	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/safetensors"
)

// Report describes a finished run: what was trained, on what, how long,
// and how well.
type Report struct {
	Command      string   `json:"command,omitempty"`
	Params       int64    `json:"params"`
	Shape        Shape    `json:"shape"`
	VocabSize    int      `json:"vocab_size"`
	Context      int      `json:"context"`
	Steps        int      `json:"steps"`
	SeqLen       int      `json:"seq_len"`
	Batch        int      `json:"batch"`
	LR           float64  `json:"lr"`
	Seed         uint64   `json:"seed"`
	Tokens       int64    `json:"tokens"`  // positions run through the model in training
	Targets      int64    `json:"targets"` // of them, trained tokens (assistant replies)
	TrainSeconds float64  `json:"train_seconds"`
	TrainLoss    float64  `json:"train_loss"`    // mean of the last steps
	HeldOutLoss  float64  `json:"held_out_loss"` // at the last step
	WeightsBytes int64    `json:"weights_bytes"`
	Threads      int      `json:"threads"`
	CPU          string   `json:"cpu"`
	Texts        []string `json:"texts"`
	Eval         *Eval    `json:"eval"`
	Train        []Point  `json:"-"`
	HeldOut      []Point  `json:"held_out_curve"`
}

// report evaluates the exported model and writes report.json, TRAINING.md
// and loss.png into Out.
func (r *run) report(ctx context.Context, wall time.Duration) (*Report, error) {
	o := r.o
	ev, err := Evaluate(ctx, o.Out, EvalOptions{Seed: o.Seed, Arithmetic: o.EvalArithmetic, Tools: o.EvalTools, Judge: o.EvalJudge, Follow: o.EvalFollow, Texts: r.texts})
	if err != nil {
		return nil, fmt.Errorf("pretrain: evaluation: %w", err)
	}
	rep := &Report{
		Params: r.m.Config.NumParams(), Shape: o.Shape, VocabSize: r.m.Config.VocabSize, Context: r.m.Config.MaxPositions,
		Steps: r.st.Step, SeqLen: o.SeqLen, Batch: o.Batch, LR: o.LR, Seed: o.Seed,
		Tokens: r.st.Tokens, Targets: r.st.Targets, TrainSeconds: r.st.Seconds,
		Threads: engine.Threads(), CPU: fmt.Sprintf("%s/%s, kernels %s", runtime.GOOS, runtime.GOARCH, engine.Kernels()),
		Texts: r.st.Texts, Eval: ev, Train: r.st.Train, HeldOut: r.st.HeldOut,
	}
	n := min(len(r.st.Train), 50)
	for _, p := range r.st.Train[len(r.st.Train)-n:] {
		rep.TrainLoss += p.Loss / float64(n)
	}
	rep.HeldOutLoss = r.lastHeldOut()
	if fi, err := os.Stat(filepath.Join(o.Out, safetensors.SingleFile)); err == nil {
		rep.WeightsBytes = fi.Size()
	}
	if err := rep.Write(o.Out); err != nil {
		return nil, err
	}
	return rep, nil
}

// Write writes report.json, TRAINING.md and loss.png into dir.
func (rep *Report) Write(dir string) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	png, err := LossPlot(rep.Train, rep.HeldOut)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"report.json": append(js, '\n'), "TRAINING.md": []byte(rep.Markdown()), "loss.png": png} {
		if err := atomicfile.WriteBytes(filepath.Join(dir, name), 0o644, data); err != nil {
			return fmt.Errorf("pretrain: %w", err)
		}
	}
	return nil
}

func pct(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

// Markdown renders the report as TRAINING.md.
func (rep *Report) Markdown() string {
	var b strings.Builder
	s := rep.Shape
	fmt.Fprintf(&b, "# The bundled model: how it was trained\n\n")
	if rep.Command != "" {
		fmt.Fprintf(&b, "Reproduce with:\n\n```\n%s\n```\n\n", rep.Command)
	}
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| architecture | Llama: %d layers, hidden %d, MLP %d, %d query / %d key-value heads, RoPE θ %g, context %d |\n",
		s.Layers, s.Hidden, s.Intermediate, s.Heads, s.KVHeads, s.RopeTheta, rep.Context)
	fmt.Fprintf(&b, "| parameters | %d (%.2fM); weights file %.1f MB (BF16) |\n", rep.Params, float64(rep.Params)/1e6, float64(rep.WeightsBytes)/1e6)
	fmt.Fprintf(&b, "| vocabulary | %d tokens, byte-level BPE trained on the generated corpus and public-domain text |\n", rep.VocabSize)
	fmt.Fprintf(&b, "| training | %d steps of ≤ %d tokens (%d × %d), AdamW, peak lr %g, warm-up and cosine decay, seed %d |\n",
		rep.Steps, rep.Batch*rep.SeqLen, rep.Batch, rep.SeqLen, rep.LR, rep.Seed)
	fmt.Fprintf(&b, "| tokens | %d positions, of which %d trained targets (assistant replies) |\n", rep.Tokens, rep.Targets)
	fmt.Fprintf(&b, "| time | %s of training on %d CPU threads (%s) |\n", (time.Duration(rep.TrainSeconds) * time.Second).String(), rep.Threads, rep.CPU)
	fmt.Fprintf(&b, "| final train loss | %.3f (mean of the last steps) |\n", rep.TrainLoss)
	fmt.Fprintf(&b, "| held-out loss | %.3f |\n", rep.HeldOutLoss)
	if e := rep.Eval; e != nil {
		fmt.Fprintf(&b, "| arithmetic (held-out, greedy) | %s of %d", pct(e.Arithmetic.Rate), e.Arithmetic.N)
		for _, op := range []string{"add", "sub", "mul"} {
			if x, ok := e.ArithmeticBy[op]; ok {
				fmt.Fprintf(&b, "; %s %s of %d", op, pct(x.Rate), x.N)
			}
		}
		fmt.Fprintf(&b, " |\n")
		fmt.Fprintf(&b, "| tool calls (held-out) | %d prompts: %s parse as a JSON call, %s name the right function, %s with exactly the right arguments |\n",
			e.Tools.N, pct(e.Tools.ParseRate), pct(e.Tools.NameRate), pct(e.Tools.ArgsRate))
		fmt.Fprintf(&b, "| judge votes (held-out) | %s of %d match the reference verdict |\n", pct(e.Judge.Rate), e.Judge.N)
	}
	if len(rep.Texts) > 0 {
		fmt.Fprintf(&b, "| public-domain text | %s |\n", strings.Join(rep.Texts, "; "))
	} else {
		fmt.Fprintf(&b, "| public-domain text | none was installed |\n")
	}
	fmt.Fprintf(&b, "\n![loss](loss.png)\n")
	b.WriteString(rep.followMarkdown())
	if e := rep.Eval; e != nil && len(e.Samples) > 0 {
		fmt.Fprintf(&b, "\n## Sample replies (greedy)\n")
		for _, sm := range e.Samples {
			fmt.Fprintf(&b, "\n")
			if len(sm.Tools) > 0 {
				fmt.Fprintf(&b, "*tools: %s*\n\n", strings.Join(sm.Tools, ", "))
			}
			for _, m := range sm.Messages {
				text := m.Content
				for _, c := range m.ToolCalls {
					text += fmt.Sprintf("<tool_call>{\"name\": %q, \"arguments\": %s}</tool_call>", c.Function.Name, c.Function.Arguments)
				}
				if m.Role == "system" {
					text = firstLine(text) + " …"
				}
				if len(text) > 300 {
					text = text[:200] + " … " + text[len(text)-80:]
				}
				fmt.Fprintf(&b, "> **%s:** %s\n>\n", m.Role, quote(text))
			}
			fmt.Fprintf(&b, "> **model:** %s\n", quote(sm.Reply))
		}
	}
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func quote(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n> ")
}

// EvalMarkdown is the evaluation's part of TRAINING.md alone.
func (rep *Report) EvalMarkdown() string {
	var b strings.Builder
	if e := rep.Eval; e != nil {
		fmt.Fprintf(&b, "| | |\n|---|---|\n")
		fmt.Fprintf(&b, "| arithmetic (held-out, greedy) | %s of %d |\n", pct(e.Arithmetic.Rate), e.Arithmetic.N)
		fmt.Fprintf(&b, "| tool calls (held-out) | %d prompts: %s parse as a JSON call, %s name the right function, %s with exactly the right arguments |\n",
			e.Tools.N, pct(e.Tools.ParseRate), pct(e.Tools.NameRate), pct(e.Tools.ArgsRate))
		fmt.Fprintf(&b, "| judge votes (held-out) | %s of %d match the reference verdict |\n", pct(e.Judge.Rate), e.Judge.N)
	}
	b.WriteString(rep.followMarkdown())
	return b.String()
}

// followMarkdown renders the judge's classes, the hints and instruction
// following.
func (rep *Report) followMarkdown() string {
	e := rep.Eval
	if e == nil {
		return ""
	}
	var b strings.Builder
	if len(e.JudgeBy) > 0 {
		fmt.Fprintf(&b, "\n## The judge (held-out, greedy)\n\n| what happened next | votes matching the reference |\n|---|---|\n")
		for _, c := range slices.Sorted(maps.Keys(e.JudgeBy)) {
			fmt.Fprintf(&b, "| %s | %s of %d |\n", c, pct(e.JudgeBy[c].Rate), e.JudgeBy[c].N)
		}
		fmt.Fprintf(&b, "\nHints from held-out corrections of a reply's form: %s of %d parse, %s state exactly the instruction the user gave.\n",
			pct(e.Hints.Rate), e.Hints.N, pct(e.Hints.Exacts))
		if e.SessionHints.N > 0 {
			fmt.Fprintf(&b, "\nTurns of sessions with a lasting preference, corrected in held-out phrasings (as `clawrl bench learn` does): "+
				"votes %s of %d match the reference; after a correction, %s of %d hints parse and %s state the preference's canonical instruction.\n",
				pct(e.SessionVotes.Rate), e.SessionVotes.N, pct(e.SessionHints.Rate), e.SessionHints.N, pct(e.SessionHints.Exacts))
		}
	}
	if len(e.Follow) > 0 {
		fmt.Fprintf(&b, "\n## Instruction following (held-out questions, phrasings and arguments; greedy)\n\n")
		fmt.Fprintf(&b, "| kind | trained | without the instruction | in the system prompt | as a hint |\n|---|---|---|---|---|\n")
		for _, k := range instruct.Kinds() {
			m, ok := e.Follow[string(k)]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %v | %s | %s | %s |\n", k, instruct.Constraint{Kind: k}.IsTrained(),
				pct(m[PlaceNone].Rate), pct(m[PlaceSystem].Rate), pct(m[PlaceHint].Rate))
		}
	}
	return b.String()
}
