package pretrain

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
)

// progress draws a one-line progress bar on a terminal, redrawn in place,
// or prints a plain line every few percent elsewhere (a log file).
type progress struct {
	w        io.Writer
	total    int
	tty      bool
	lastLine time.Time
	smooth   float64 // exponential moving average of the loss
	rate     float64 // of tokens/s
	drawn    bool
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, total: total}
	if f, ok := w.(*os.File); ok {
		p.tty = isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
	}
	return p
}

func (p *progress) update(step int, pt Point, heldOut, tokPerSec, seconds float64) {
	if p.w == nil {
		return
	}
	if p.smooth == 0 {
		p.smooth, p.rate = pt.Loss, tokPerSec
	} else {
		p.smooth = 0.95*p.smooth + 0.05*pt.Loss
		p.rate = 0.9*p.rate + 0.1*tokPerSec
	}
	frac := float64(step) / float64(p.total)
	const width = 24
	fill := int(frac * width)
	bar := strings.Repeat("=", fill)
	if fill < width {
		bar += ">" + strings.Repeat(" ", width-fill-1)
	}
	ho := "-"
	if !math.IsNaN(heldOut) {
		ho = fmt.Sprintf("%.3f", heldOut)
	}
	perStep := seconds / float64(max(step, 1))
	eta := time.Duration(perStep*float64(p.total-step)) * time.Second
	line := fmt.Sprintf("step %d/%d [%s] %3.0f%% loss %.3f held-out %s lr %.2e %.0f tok/s eta %s",
		step, p.total, bar, 100*frac, p.smooth, ho, pt.LR, p.rate, eta.Round(time.Second))
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.drawn = true
		return
	}
	if step == 1 || step == p.total || time.Since(p.lastLine) >= 30*time.Second {
		fmt.Fprintln(p.w, line)
		p.lastLine = time.Now()
	}
}

func (p *progress) done() {
	if p.w != nil && p.tty && p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
