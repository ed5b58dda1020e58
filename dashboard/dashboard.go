// Package dashboard is the daemon's web page: what the model is learning,
// seen in a browser at http://host:port/dashboard.
//
// The page (GET /dashboard, with its script at /dashboard/app.js) is
// static and holds no data, so it needs no key; it polls GET
// /dashboard/state, which the server mounts behind the API keys, and asks
// for a key (kept in the browser's localStorage) when that answers 401.
// The state is the served model and version, the store's counts (dropped
// samples by reason, hints), the newest steps (loss, mean reward, samples
// and the trainer's numbers: KL, entropy, gradient norm, learning rate,
// ...), weight versions (a rollback's note says why) and scored turns,
// and the daemon's own clawrl_* metrics summed over their labels. The page
// charts the steps with axes (numbers, step numbers and times) and marks
// the steps a rollback undid. The state holds no conversation text: a
// dashboard left open on a shared screen shows how the model learns, not
// what people said.
//
// The page draws its charts itself (inline SVG, no external script or
// font), so it works on a machine without internet, and the strict
// Content-Security-Policy it is served with allows nothing else.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/clawrl/clawrl/store"
)

//go:embed page.html app.js
var assets embed.FS

// Store is what the dashboard reads from the durable store.
type Store interface {
	Stats() (store.Stats, error)
	History(limit int) (store.History, error)
}

// Options configure a Dashboard.
type Options struct {
	// ModelID is the served model's name.
	ModelID string
	// Version returns the weight version being served.
	Version func() uint64
	// Training says whether the daemon trains (trainer.enabled).
	Training bool
	// Store is the durable store; nil shows no history.
	Store Store
	// Gatherer holds the daemon's metrics; nil shows none.
	Gatherer prometheus.Gatherer
	// Limit bounds each history series (default 200).
	Limit int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Dashboard serves the page and its state.
type Dashboard struct {
	opts    Options
	started time.Time
}

// New returns a dashboard started now.
func New(opts Options) *Dashboard {
	if opts.Limit <= 0 {
		opts.Limit = 200
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Version == nil {
		opts.Version = func() uint64 { return 0 }
	}
	return &Dashboard{opts: opts, started: opts.Now()}
}

// State is the JSON of GET /dashboard/state.
type State struct {
	Model    string             `json:"model"`
	Version  uint64             `json:"weight_version"`
	Training bool               `json:"training"`
	Started  time.Time          `json:"started"`
	Uptime   float64            `json:"uptime_s"`
	Now      time.Time          `json:"now"`
	Stats    *store.Stats       `json:"stats,omitempty"`
	History  *store.History     `json:"history,omitempty"`
	Metrics  map[string]float64 `json:"metrics"`
	// Errors names the parts that could not be read (the rest is shown).
	Errors []string `json:"errors,omitempty"`
}

// Snapshot assembles the state.
func (d *Dashboard) Snapshot(ctx context.Context) State {
	now := d.opts.Now()
	st := State{
		Model: d.opts.ModelID, Version: d.opts.Version(), Training: d.opts.Training,
		Started: d.started.UTC(), Uptime: now.Sub(d.started).Seconds(), Now: now.UTC(),
		Metrics: map[string]float64{},
	}
	if s := d.opts.Store; s != nil {
		if stats, err := s.Stats(); err != nil {
			st.Errors = append(st.Errors, "stats: "+err.Error())
		} else {
			stats.Path = "" // a file path is no business of a browser
			stats.Dropped = byReason(stats.Dropped)
			st.Stats = &stats
		}
		if ctx.Err() == nil {
			if h, err := s.History(d.opts.Limit); err != nil {
				st.Errors = append(st.Errors, "history: "+err.Error())
			} else {
				st.History = &h
			}
		}
	}
	if g := d.opts.Gatherer; g != nil {
		fams, err := g.Gather()
		if err != nil {
			st.Errors = append(st.Errors, "metrics: "+err.Error())
		}
		addMetrics(st.Metrics, fams)
	}
	return st
}

// byReason sums dropped samples by the first word of their reason: the
// store keeps "error: " and "nonfinite: " with the error's text, which
// says nothing a chart needs and may name paths.
func byReason(dropped map[string]int) map[string]int {
	out := make(map[string]int, len(dropped))
	for r, n := range dropped {
		k, _, _ := strings.Cut(r, ":")
		if k = strings.TrimSpace(k); k == "" {
			k = "unknown"
		}
		out[k] += n
	}
	return out
}

// maxSeries is the most labelled series of a family listed one by one
// (beside their sum).
const maxSeries = 16

// addMetrics lists the clawrl_* metrics: counters summed over their labels
// as name, histograms and summaries as name_count and name_sum, unlabelled
// gauges as name; and, for a family of at most maxSeries series, each
// labelled counter or gauge series as name{label="value",...}.
func addMetrics(into map[string]float64, fams []*dto.MetricFamily) {
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "clawrl_") {
			continue
		}
		each := len(f.GetMetric()) <= maxSeries
		for _, m := range f.GetMetric() {
			series := name
			if len(m.GetLabel()) > 0 {
				var b strings.Builder
				b.WriteString(name + "{")
				for i, l := range m.GetLabel() {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, "%s=%q", l.GetName(), l.GetValue())
				}
				b.WriteByte('}')
				series = b.String()
			}
			switch {
			case m.Counter != nil:
				into[name] += m.Counter.GetValue()
				if each && series != name {
					into[series] = m.Counter.GetValue()
				}
			case m.Gauge != nil: // a labelled gauge's sum means nothing (free + used + total blocks)
				if series == name {
					into[name] = m.Gauge.GetValue()
				} else if each {
					into[series] = m.Gauge.GetValue()
				}
			case m.Histogram != nil:
				into[name+"_count"] += float64(m.Histogram.GetSampleCount())
				into[name+"_sum"] += m.Histogram.GetSampleSum()
			case m.Summary != nil:
				into[name+"_count"] += float64(m.Summary.GetSampleCount())
				into[name+"_sum"] += m.Summary.GetSampleSum()
			}
		}
	}
	for k, v := range into {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			delete(into, k) // JSON has no NaN
		}
	}
}

// csp allows the page its own script and inline styles, and nothing from
// elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"

// ServePage serves the page (GET /dashboard).
func (d *Dashboard) ServePage(w http.ResponseWriter, r *http.Request) {
	d.asset(w, "page.html", "text/html; charset=utf-8")
}

// ServeScript serves the page's script (GET /dashboard/app.js).
func (d *Dashboard) ServeScript(w http.ResponseWriter, r *http.Request) {
	d.asset(w, "app.js", "text/javascript; charset=utf-8")
}

func (d *Dashboard) asset(w http.ResponseWriter, name, ctype string) {
	b, err := assets.ReadFile(name)
	if err != nil { // embedded: cannot happen
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// ServeState serves the state as JSON (GET /dashboard/state; mount it
// behind the API keys).
func (d *Dashboard) ServeState(w http.ResponseWriter, r *http.Request) {
	st := d.Snapshot(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	_ = enc.Encode(st)
}
