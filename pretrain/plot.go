package pretrain

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"strings"
)

// LossPlot draws the loss curve as a PNG: the training loss (each step,
// faint, and smoothed) and the held-out loss, against the step.
func LossPlot(train, heldOut []Point) ([]byte, error) {
	const W, H = 900, 520
	const left, right, top, bottom = 70, 20, 30, 50
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	white := color.RGBA{255, 255, 255, 255}
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	_ = white
	axis := color.RGBA{60, 60, 60, 255}
	grid := color.RGBA{225, 225, 225, 255}
	blue := color.RGBA{31, 119, 180, 255}
	faint := color.RGBA{190, 210, 235, 255}
	orange := color.RGBA{230, 110, 20, 255}

	maxStep := 1
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, ps := range [][]Point{train, heldOut} {
		for _, p := range ps {
			maxStep = max(maxStep, p.Step)
			if !math.IsNaN(p.Loss) {
				lo, hi = math.Min(lo, p.Loss), math.Max(hi, p.Loss)
			}
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	// Clip the first steps' very high loss so the rest stays readable.
	if len(train) > 20 {
		var sorted []float64
		for _, p := range train {
			sorted = append(sorted, p.Loss)
		}
		hi = math.Min(hi, quantile(sorted, 0.98)*1.1)
	}
	lo = math.Max(0, lo-0.05*(hi-lo))
	if hi <= lo {
		hi = lo + 1
	}
	pw, ph := W-left-right, H-top-bottom
	x := func(step int) int { return left + int(float64(step)/float64(maxStep)*float64(pw)) }
	y := func(v float64) int {
		v = math.Max(lo, math.Min(hi, v))
		return top + ph - int((v-lo)/(hi-lo)*float64(ph))
	}

	// Grid and ticks.
	for i := 0; i <= 5; i++ {
		v := lo + (hi-lo)*float64(i)/5
		yy := y(v)
		line(img, left, yy, W-right, yy, grid)
		drawText(img, left-8-textWidth(fmt.Sprintf("%.2f", v)), yy-3, fmt.Sprintf("%.2f", v), axis)
	}
	for i := 0; i <= 5; i++ {
		s := maxStep * i / 5
		xx := x(s)
		line(img, xx, top, xx, top+ph, grid)
		lbl := fmt.Sprint(s)
		drawText(img, xx-textWidth(lbl)/2, top+ph+8, lbl, axis)
	}
	line(img, left, top, left, top+ph, axis)
	line(img, left, top+ph, W-right, top+ph, axis)
	drawText(img, left+pw/2-textWidth("step")/2, H-18, "step", axis)
	drawText(img, 8, top-20, "loss", axis)

	// Raw training loss, then smoothed, then held-out.
	for i := 1; i < len(train); i++ {
		line(img, x(train[i-1].Step), y(train[i-1].Loss), x(train[i].Step), y(train[i].Loss), faint)
	}
	var sm float64
	px, py := 0, 0
	for i, p := range train {
		if i == 0 {
			sm = p.Loss
		} else {
			sm = 0.95*sm + 0.05*p.Loss
		}
		cx, cy := x(p.Step), y(sm)
		if i > 0 {
			thick(img, px, py, cx, cy, blue)
		}
		px, py = cx, cy
	}
	for i, p := range heldOut {
		cx, cy := x(p.Step), y(p.Loss)
		if i > 0 {
			thick(img, px, py, cx, cy, orange)
		}
		for dx := -2; dx <= 2; dx++ {
			for dy := -2; dy <= 2; dy++ {
				img.Set(cx+dx, cy+dy, orange)
			}
		}
		px, py = cx, cy
	}
	// Legend.
	lx, ly := W-right-200, top+10
	thick(img, lx, ly+3, lx+25, ly+3, blue)
	drawText(img, lx+32, ly, "train (smoothed)", axis)
	thick(img, lx, ly+21, lx+25, ly+21, orange)
	drawText(img, lx+32, ly+18, "held-out", axis)

	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func quantile(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// line draws a one-pixel line (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	line(img, x0, y0, x1, y1, c)
	line(img, x0, y0+1, x1, y1+1, c)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// font5x7 holds the glyphs the plot writes, five columns by seven rows,
// each row's bits from the left.
var font5x7 = map[rune][7]uint8{
	'0': {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, '1': {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},
	'2': {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, '3': {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},
	'4': {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, '5': {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},
	'6': {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, '7': {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},
	'8': {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, '9': {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},
	'.': {0, 0, 0, 0, 0, 0x0C, 0x0C}, '-': {0, 0, 0, 0x1F, 0, 0, 0}, ' ': {},
	'(': {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}, ')': {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08},
	'a': {0, 0, 0x0E, 0x01, 0x0F, 0x11, 0x0F}, 'd': {0x01, 0x01, 0x0D, 0x13, 0x11, 0x11, 0x0F},
	'e': {0, 0, 0x0E, 0x11, 0x1F, 0x10, 0x0E}, 'h': {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11},
	'i': {0x04, 0, 0x0C, 0x04, 0x04, 0x04, 0x0E}, 'l': {0x0C, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E},
	'm': {0, 0, 0x1A, 0x15, 0x15, 0x11, 0x11}, 'n': {0, 0, 0x16, 0x19, 0x11, 0x11, 0x11},
	'o': {0, 0, 0x0E, 0x11, 0x11, 0x11, 0x0E}, 'p': {0, 0, 0x1E, 0x11, 0x1E, 0x10, 0x10},
	'r': {0, 0, 0x16, 0x19, 0x10, 0x10, 0x10}, 's': {0, 0, 0x0E, 0x10, 0x0E, 0x01, 0x1E},
	't': {0x08, 0x08, 0x1C, 0x08, 0x08, 0x09, 0x06}, 'u': {0, 0, 0x11, 0x11, 0x11, 0x13, 0x0D},
}

func textWidth(s string) int { return 6 * len([]rune(s)) }

func drawText(img *image.RGBA, x, y int, s string, c color.Color) {
	for i, r := range strings.ToLower(s) {
		g, ok := font5x7[r]
		if !ok {
			continue
		}
		for row := 0; row < 7; row++ {
			for col := 0; col < 5; col++ {
				if g[row]&(1<<(4-col)) != 0 {
					img.Set(x+6*i+col, y+row, c)
				}
			}
		}
	}
}
