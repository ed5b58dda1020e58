package cli

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/model"
)

// The benchmark measures the machine's ceilings and the engine in the same
// run, so that the ratios it prints hold on a shared, noisy machine.

type benchFlags struct {
	model, preset string
	what          []string
	decodeTokens  int
	prefillTokens int
	contextTokens int
	prefixTokens  int
	seconds       float64
	bandwidthMB   int
	cpuProfile    string
	serveSeconds  float64
	judge         bool
	rounds        int
	train         bool
	gpu           int    // model: the GPU to load the model onto (-1: the CPU)
	batch         string // model: decode batch sizes
	jsonOut       string
	versionCopy   bool
}

func (a *app) benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the machine's peak and the engine against it (GEMM, decode, prefill)",
		Long: `bench measures, in one run: the CPU's FP32 FMA peak and, where the
products use it, the BF16 dot-product instruction's (register-only loops),
and memory bandwidth; matrix multiply GFLOP/s at 512, 1024 and 2048 and a
BF16 matrix-vector product's GB/s; and decode (batch 1 and 8, --batch) and prefill
tokens/s of a model, against the limit that memory bandwidth sets for decode
(bytes of weights read per token / copy bandwidth).

The memory bandwidth of a shared machine changes from one second to the
next, so the measurements that are compared with each other alternate in
--rounds rounds and each ratio is taken within a round, reported as the
median over the rounds with its range: the copy bandwidth and the batch-1
decode; with --what serve, 1, 8 and 32 streaming clients.

The model is --model DIR, or a random-weight checkpoint of --preset written to
a temporary directory first.

With --gpu N (or, without the flag, the first GPU of devices.rollout.gpus)
the model section runs on that GPU, loaded through the engine as a serving
replica is: decode at batch 1 is compared with the GPU's own copy bandwidth
(measured in the same rounds), prefill reports TFLOP/s, and a last row times
the copy of a new weight version from the CPU onto the GPU. --gpu -1 keeps
the CPU. The host's ceilings are measured only for the sections that use
them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("gpu") && len(a.cfg.Devices.Rollout.GPUs) > 0 {
				f.gpu = a.cfg.Devices.Rollout.GPUs[0]
			}
			return a.runBench(cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "checkpoint directory or GGUF file to benchmark (default: a random --preset)")
	fl.StringVar(&f.preset, "preset", "20m", "random checkpoint shape when --model is not given: "+presetNames())
	fl.StringSliceVar(&f.what, "what", []string{"machine", "gemm", "model"}, "sections to run: machine, gemm, model, serve (streaming HTTP clients)")
	fl.IntVar(&f.prefixTokens, "prefix-tokens", 16000, "serve: length of the shared system prompt for the prefix-cache TTFT test (0 = skip)")
	fl.IntVar(&f.decodeTokens, "decode-tokens", 64, "tokens to decode per measurement")
	fl.IntVar(&f.prefillTokens, "prefill-tokens", 512, "prompt length for the prefill measurement")
	fl.IntVar(&f.contextTokens, "context-tokens", 0, "model: also decode after a prompt of this many tokens, an agent's context (0 = skip; e.g. 16384)")
	fl.Float64Var(&f.seconds, "seconds", 1, "duration of each machine measurement")
	fl.IntVar(&f.rounds, "rounds", 5, "model, serve: alternating rounds of the measurements compared with each other (see above)")
	fl.BoolVar(&f.judge, "judge", false, "serve: also measure 8 and 32 clients while the local judge scores turns without pause (reward.workers workers, as the daemon's), against idle: judge turns/s and users refused with 429")
	fl.BoolVar(&f.train, "train", false, "serve: also measure 8 and 32 clients while the trainer steps without pause on synthetic samples, against idle, in alternating rounds")
	fl.Float64Var(&f.serveSeconds, "serve-seconds", 15, "serve: how long each client count keeps sending requests, over all rounds")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the engine sections (gemm, model, serve) to this file")
	fl.IntVar(&f.bandwidthMB, "bandwidth-mb", engine.DefaultBandwidthBytes>>20, "buffer for the bandwidth measurements (well above the L3 cache)")
	fl.IntVar(&f.gpu, "gpu", -1, "model: run on this GPU (default: the first of devices.rollout.gpus, else the CPU; -1: the CPU)")
	fl.StringVar(&f.batch, "batch", "1,8", "model: decode batch sizes, comma-separated (batch 1 is measured in rounds against the copy bandwidth; 0: no decode)")
	fl.StringVar(&f.jsonOut, "json", "", "also write the result rows to this file as JSON (measurement, value, unit, note)")
	fl.BoolVar(&f.versionCopy, "version-copy", true, "model on a GPU: also time the copy of a new weight version from the CPU onto the GPU (loads the model on the CPU too)")
	cmd.AddCommand(a.benchSoakCmd(), a.benchLearnCmd(), a.benchLogitsCmd())
	return cmd
}

// ceilings are the host's limits the ratios divide by.
type ceilings engine.Ceilings

func (a *app) runBench(out io.Writer, f benchFlags) error {
	if t := max(a.cfg.Model.Threads, a.cfg.Devices.Rollout.Threads); t > 0 {
		engine.SetThreads(t)
	}
	for _, w := range f.what {
		switch w {
		case "machine", "gemm", "model", "serve":
		default:
			return fmt.Errorf("unknown --what section %q (machine, gemm, model, serve)", w)
		}
	}
	if _, err := parseBatches(f.batch); err != nil {
		return err
	}
	fmt.Fprintf(out, "clawrl bench: %s kernels, %d threads\n\n", engine.Kernels(), engine.Threads())
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	defer tw.Flush()
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t") }

	// The ceilings are always measured (every ratio needs them), before and
	// after the engine runs; the larger of the two counts, since a neighbour
	// on a shared machine can only lower a measurement.
	d := time.Duration(f.seconds * float64(time.Second))
	// A model on a GPU compares itself with the GPU's ceilings: the host's
	// are measured only when another section needs them.
	hostCeilings := f.gpu < 0 || slices.ContainsFunc(f.what, func(w string) bool { return w != "model" })
	measure := func() ceilings {
		if !hostCeilings {
			return ceilings{}
		}
		return ceilings(engine.MeasureCeilings(f.bandwidthMB<<20, d))
	}
	c := measure()
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return err
		}
	}
	var rows [][]string
	add := func(cells ...string) { rows = append(rows, cells) }
	var err error
	if slices.Contains(f.what, "gemm") {
		engine.BenchGEMM(engine.BF16Precision(a.cfg), add)
	}
	if slices.Contains(f.what, "model") {
		err = a.benchModel(add, f)
	}
	if err == nil && slices.Contains(f.what, "serve") {
		err = a.benchServe(add, f)
	}
	if f.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	c2 := measure()
	c.Peak, c.Read, c.Copy, c.Dot = max(c.Peak, c2.Peak), max(c.Read, c2.Read), max(c.Copy, c2.Copy), max(c.Dot, c2.Dot)

	var printed [][]string
	emit := func(cells ...string) {
		printed = append(printed, cells)
		row(cells...)
	}
	row("measurement", "value", "unit", "of ceiling")
	if slices.Contains(f.what, "machine") {
		emit("FP32 FMA peak", fmt.Sprintf("%.1f", c.Peak), "GFLOP/s", "")
		if c.Dot > 0 {
			emit("BF16 dot peak (VDPBF16PS)", fmt.Sprintf("%.1f", c.Dot), "GFLOP/s", fmt.Sprintf("%.2f× FMA peak", c.Dot/c.Peak))
		}
		emit("memory read", fmt.Sprintf("%.1f", c.Read), "GB/s", "")
		emit("memory copy (read+write)", fmt.Sprintf("%.1f", c.Copy), "GB/s", "")
	}
	for _, r := range rows {
		emit(r[0], r[1], r[2], ratio(r, c))
	}
	if f.jsonOut != "" {
		if jerr := writeBenchJSON(f.jsonOut, printed); jerr != nil && err == nil {
			err = jerr
		}
	}
	return err
}

// writeBenchJSON writes result rows as a JSON array of objects
// (measurement, value: a number or null, unit, note), for scripts.
func writeBenchJSON(path string, rows [][]string) error {
	type jsonRow struct {
		Measurement string   `json:"measurement"`
		Value       *float64 `json:"value"`
		Unit        string   `json:"unit"`
		Note        string   `json:"note"`
	}
	out := []jsonRow{}
	for _, r := range rows {
		j := jsonRow{Measurement: strings.TrimSpace(r[0]), Unit: r[2], Note: r[3]}
		if v, err := strconv.ParseFloat(r[1], 64); err == nil {
			j.Value = &v
		}
		out = append(out, j)
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: --json: %w", err)
	}
	return nil
}

// parseBatches reads --batch: batch sizes, comma-separated, none for "0"
// or "".
func parseBatches(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--batch %q: want batch sizes such as 1,8 (0: no decode)", s)
		}
		if n > 0 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// dotPeak is the BF16 dot-product peak the ratios use: measured where the
// products run on the instruction (rows marked ":bf16" only come from such
// runs); twice the FMA peak, its nominal rate, should it not be.
func (c ceilings) dotPeak() float64 {
	if c.Dot > 0 {
		return c.Dot
	}
	return 2 * c.Peak
}

// ratio fills a result row's last column: the row names its ceiling as
// "peak", "read" or "flops:<per token>", the first and the last with
// ":bf16" when the products ran on the BF16 dot-product instruction (its
// peak measured beside the FMA's), or gives its own text (the decode rows,
// whose ceiling is measured in rounds beside them).
func ratio(r []string, c ceilings) string {
	var v float64
	fmt.Sscan(r[1], &v)
	switch {
	case r[3] == "peak":
		return pct(v, c.Peak) + " of FMA peak"
	case r[3] == "peak:bf16":
		return pct(v, c.dotPeak()) + " of BF16 dot peak"
	case r[3] == "read":
		return pct(v, c.Read) + " of read bandwidth"
	case strings.HasPrefix(r[3], "flops:"):
		var flops float64
		spec, bf16 := strings.CutSuffix(strings.TrimPrefix(r[3], "flops:"), ":bf16")
		fmt.Sscan(spec, &flops)
		if bf16 {
			return pct(v*flops/1e9, c.dotPeak()) + " of BF16 dot peak"
		}
		return pct(v*flops/1e9, c.Peak) + " of FMA peak"
	}
	return r[3]
}

// median returns the median of v (the mean of the middle two for an even
// length); v is sorted in place.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func pct(x, of float64) string {
	if of <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*x/of)
}

// weightBytesPerToken is what one decode step reads from the weights: every
// matrix once, the LM head whole, the embedding only one row.
func weightBytesPerToken(c *model.Config) float64 {
	size := 4.0
	if c.TorchDType == "bfloat16" {
		size = 2
	}
	params := float64(c.NumParams())
	if !c.TieWordEmbeddings {
		params -= float64(c.VocabSize * c.HiddenSize)
	}
	return params * size
}

// decodeBytes is what one decode step of m reads from its weights as
// loaded (quantized or not): every tensor once, except an input embedding
// that is not also the output projection, of which it reads one row.
func decodeBytes(m *model.Model) float64 {
	var n float64
	for _, p := range m.Weights().Params() {
		if p.Name == "model.embed_tokens.weight" && !m.Config.TieWordEmbeddings {
			continue
		}
		n += float64(p.T.DType().Bytes(compute.Len(p.T)))
	}
	return n
}

// quantTypes names the block-quantized types among m's weights as loaded
// ("Q8_0", "Q4_0", "Q8_0+Q4_0"), or "" when there are none.
func quantTypes(m *model.Model) string {
	var names []string
	for _, p := range m.Weights().Params() {
		if dt := p.T.DType(); dt.Quantized() && !slices.Contains(names, dt.String()) {
			names = append(names, dt.String())
		}
	}
	slices.Sort(names)
	slices.Reverse(names)
	return strings.Join(names, "+")
}

// prefillFlops counts the floating-point operations of a prefill of n
// tokens: the layers' matrix products for every token (2 per weight), the
// attention's two products under the causal mask (each token sees its
// position + 1 keys: 2·2·qdim per key), and the output projection for the
// last token only (LastLogits). Norms, rotations and the softmax are left
// out; the input embedding is a lookup.
func prefillFlops(c *model.Config, n int) float64 {
	h, q, kv, in := float64(c.HiddenSize), float64(c.QDim()), float64(c.KVDim()), float64(c.IntermediateSize)
	layer := h*q + 2*h*kv + q*h + 3*h*in
	keys := float64(n) * float64(n+1) / 2
	return float64(c.NumLayers)*(2*layer*float64(n)+4*q*keys) + 2*float64(c.VocabSize)*h
}

func (a *app) benchModel(row func(...string), f benchFlags) error {
	dir := f.model
	if dir == "" {
		spec, ok := presets()[f.preset]
		if !ok {
			return fmt.Errorf("unknown --preset %q (known: %s)", f.preset, presetNames())
		}
		tmp, err := os.MkdirTemp("", "clawrl-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		fmt.Fprintf(a.stderr, "writing a random %s checkpoint to %s...\n", f.preset, tmp)
		if err := model.WriteRandomCheckpoint(tmp, spec); err != nil {
			return err
		}
		dir = tmp
	}
	batches, err := parseBatches(f.batch)
	if err != nil {
		return err
	}
	onGPU := f.gpu >= 0
	var m *model.Model
	var requantized string
	if onGPU {
		var closeModel func()
		if m, closeModel, err = engine.LoadModelGPU(dir, f.gpu); err != nil {
			return err
		}
		defer closeModel()
	} else {
		if m, requantized, err = engine.LoadModelNoting(a.cfg, dir); err != nil {
			return err
		}
		defer m.Close()
	}
	cfg := m.Config
	prefillN := min(f.prefillTokens, cfg.MaxPositions-1)
	decodeN := min(f.decodeTokens, cfg.MaxPositions-17)
	const bs = 16
	maxBatch := 8
	for _, b := range batches {
		maxBatch = max(maxBatch, b)
	}
	blocks := maxBatch*((16+decodeN+bs)/bs) + (prefillN+bs-1)/bs + 4
	kvdt := engine.KVDType(a.cfg, cfg)
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: bs, Budget: cfg.KVBytesPerToken(kvdt) * bs * int64(blocks), DType: kvdt})
	if err != nil {
		return err
	}
	defer kv.Close()
	name := fmt.Sprintf("%s %.0fM %s", cfg.Architecture, float64(cfg.NumParams())/1e6, cfg.TorchDType)
	bf16Dot := !onGPU && cfg.TorchDType == "bfloat16" && engine.BF16Precision(a.cfg)
	if onGPU {
		name += " on " + m.Backend().Name()
	}
	if bf16Dot {
		name += ", BF16 products (model.precision)"
	}
	if kvdt == compute.BF16 || kvdt == compute.Q8_0 {
		name += fmt.Sprintf(", %v KV cache", kvdt)
	}
	quant := quantTypes(m)
	if quant != "" && !onGPU {
		from := "from the file"
		switch {
		case a.cfg.Model.QuantizesOnLoad():
			from = "model.quantize"
		case requantized != "":
			from = "model.quantize: auto, " + requantized
		}
		name += fmt.Sprintf(", %s weights (%s, %.0f MB read per token)", quant, from, decodeBytes(m)/1e6)
	}
	row(name, "", "", "")

	r := rand.New(rand.NewPCG(3, 4))
	tokens := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(r.IntN(cfg.VocabSize))
		}
		return t
	}
	// decode runs batch sequences of a 16-token prompt for decodeN greedy
	// tokens at a time, at least minTime in all, each chunk starting again
	// from the prompt (so that the context stays short), and returns the
	// tokens per second of the decode steps.
	decode := func(batch int, minTime time.Duration) (float64, error) {
		seqs := make([]*model.Sequence, batch)
		steps := make([]model.Step, batch)
		prompts := make([][]int32, batch)
		for i := range seqs {
			seqs[i] = kv.NewSequence()
			defer seqs[i].Free()
			prompts[i] = tokens(16)
		}
		var el time.Duration
		n := 0
		for n == 0 || el < minTime {
			for i := range steps {
				if err := seqs[i].Truncate(0); err != nil {
					return 0, err
				}
				steps[i] = model.Step{Seq: seqs[i], Tokens: prompts[i]}
			}
			logits, err := m.Forward(steps, model.LastLogits, nil)
			if err != nil {
				return 0, err
			}
			start := time.Now()
			for range decodeN {
				for i := range steps {
					row := logits[i*cfg.VocabSize : (i+1)*cfg.VocabSize]
					steps[i].Tokens = []int32{int32(slices.Index(row, slices.Max(row)))}
				}
				if logits, err = m.Forward(steps, model.LastLogits, logits); err != nil {
					return 0, err
				}
			}
			el += time.Since(start)
			n += decodeN * batch
		}
		return float64(n) / el.Seconds(), nil
	}

	d := time.Duration(f.seconds * float64(time.Second))
	tps := 0.0 // batch 1
	if slices.Contains(batches, 1) {
		if _, err := decode(1, 0); err != nil { // warm-up
			return err
		}
		if onGPU {
			if tps, err = benchDecodeGPU(m, f.bandwidthMB<<20, d, f.rounds, decode, row); err != nil {
				return err
			}
		} else {
			tps, err = benchDecodeCPU(decodeBytes(m), f.bandwidthMB<<20, d, f.rounds, decode, row)
			if err != nil {
				return err
			}
		}
	}
	for _, b := range batches {
		if b == 1 {
			continue
		}
		tpsB, err := decode(b, d)
		if err != nil {
			return err
		}
		note := ""
		if tps > 0 {
			note = fmt.Sprintf("%.1f× batch 1", tpsB/tps)
		}
		row(fmt.Sprintf("  decode, batch %d", b), fmt.Sprintf("%.1f", tpsB), "tok/s", note)
	}
	seq := kv.NewSequence()
	prompt := tokens(prefillN)
	if onGPU { // warm-up: the prefill kernels' first launches
		if _, err := m.Forward([]model.Step{{Seq: seq, Tokens: prompt[:min(prefillN, 64)]}}, model.LastLogits, nil); err != nil {
			return err
		}
		if err := seq.Truncate(0); err != nil {
			return err
		}
	}
	start := time.Now()
	if _, err := m.Forward([]model.Step{{Seq: seq, Tokens: prompt}}, model.LastLogits, nil); err != nil {
		return err
	}
	el := time.Since(start)
	seq.Free()
	ptps := float64(prefillN) / el.Seconds()
	flops := prefillFlops(cfg, prefillN)
	ceil := fmt.Sprintf("flops:%.0f", flops/float64(prefillN))
	if bf16Dot && engine.HasBF16Dot() {
		ceil += ":bf16" // VDPBF16PS: twice the FMA's flops per instruction
	}
	if quant != "" { // int8 products, whose peak bench does not measure
		ceil = fmt.Sprintf("%.0f GFLOP/s, %s products in int8", flops/el.Seconds()/1e9, quant)
	}
	if onGPU {
		ceil = fmt.Sprintf("%.1f TFLOP/s", flops/el.Seconds()/1e12)
	}
	row(fmt.Sprintf("  prefill, %d tokens", prefillN), fmt.Sprintf("%.1f", ptps), "tok/s", ceil)
	if f.contextTokens > 0 {
		if err := benchLongContext(m, kvdt, min(f.contextTokens, cfg.MaxPositions-decodeN-1), decodeN, tokens, row, onGPU); err != nil {
			return err
		}
	}
	if onGPU && f.versionCopy {
		return a.benchVersionCopy(m, dir, row)
	}
	return nil
}

// benchDecodeCPU measures decode at batch 1 against the host's memory.
// The copy bandwidth, the read bandwidth and the decode speed are measured
// in alternating rounds and compared within each round, because the
// bandwidth of the shared machines this runs on changes from one second
// to the next (by up to 2× here, as neighbours come and go); a ceiling
// measured before or after the decode may belong to another regime. The
// decode of each round lasts as long as a bandwidth measurement (d) or
// decodes --decode-tokens, whichever is longer. The copy bandwidth sets
// the limit the goal names; the read loop (loads only, as decode
// does) is the second row, with its own ratio to the copy: a decode that
// streams its weights cannot pass the read loop, so read/copy bounds the
// first ratio on this machine. It returns the median tokens per second.
func benchDecodeCPU(wbytes float64, bwBytes int, d time.Duration, rounds int, decode func(int, time.Duration) (float64, error), row func(...string)) (float64, error) {
	meter := engine.NewBandwidthMeter(bwBytes)
	defer meter.Free()
	var tpsR, bwR, ratioR, rdR, rdRatioR, rdCopyR []float64
	for range max(1, rounds) {
		bw := meter.Copy(d)
		rd := meter.Read(d)
		tps, err := decode(1, d)
		if err != nil {
			return 0, err
		}
		tpsR, bwR, ratioR = append(tpsR, tps), append(bwR, bw), append(ratioR, tps*wbytes/(bw*1e9))
		rdR, rdRatioR, rdCopyR = append(rdR, rd), append(rdRatioR, tps*wbytes/(rd*1e9)), append(rdCopyR, rd/bw)
	}
	tps, bw, rat := median(tpsR), median(bwR), median(ratioR)
	row("  decode, batch 1", fmt.Sprintf("%.1f", tps), "tok/s",
		fmt.Sprintf("%.0f%% of limit (median of %d rounds: %.0f–%.0f%%; limit %.0f tok/s = copy BW %.1f GB/s / %.1f MB of weights)",
			100*rat, len(ratioR), 100*slices.Min(ratioR), 100*slices.Max(ratioR), bw*1e9/wbytes, bw, wbytes/1e6))
	row("  decode, batch 1, vs read loop", fmt.Sprintf("%.1f", tps*wbytes/1e9), "GB/s",
		fmt.Sprintf("%.0f%% of the read loop (rounds %.0f–%.0f%%; read %.1f GB/s, %.0f%% of copy BW, rounds %.0f–%.0f%%)",
			100*median(rdRatioR), 100*slices.Min(rdRatioR), 100*slices.Max(rdRatioR), median(rdR),
			100*median(rdCopyR), 100*slices.Min(rdCopyR), 100*slices.Max(rdCopyR)))
	return tps, nil
}

// benchDecodeGPU measures decode at batch 1 against the GPU's copy
// bandwidth (engine.MeasureDeviceCopy), in alternating rounds as on the
// CPU, and returns the median tokens per second.
func benchDecodeGPU(m *model.Model, bwBytes int, d time.Duration, rounds int, decode func(int, time.Duration) (float64, error), row func(...string)) (float64, error) {
	wbytes := weightBytesPerToken(m.Config)
	var tpsR, bwR, ratioR []float64
	for range max(1, rounds) {
		bw, err := engine.MeasureDeviceCopy(m.Backend(), bwBytes, d)
		if err != nil {
			return 0, err
		}
		tps, err := decode(1, d)
		if err != nil {
			return 0, err
		}
		tpsR, bwR, ratioR = append(tpsR, tps), append(bwR, bw), append(ratioR, tps*wbytes/(bw*1e9))
	}
	tps, bw, rat := median(tpsR), median(bwR), median(ratioR)
	row("  device copy (read+write)", fmt.Sprintf("%.1f", bw), "GB/s", fmt.Sprintf("median of %d rounds, %.1f–%.1f", len(bwR), slices.Min(bwR), slices.Max(bwR)))
	row("  decode, batch 1", fmt.Sprintf("%.1f", tps), "tok/s",
		fmt.Sprintf("%.0f%% of limit (median of %d rounds: %.0f–%.0f%%; limit %.0f tok/s = device copy BW %.1f GB/s / %.1f MB of weights)",
			100*rat, len(ratioR), 100*slices.Min(ratioR), 100*slices.Max(ratioR), bw*1e9/wbytes, bw, wbytes/1e6))
	return tps, nil
}

// benchVersionCopy times the copy of a new weight version onto the GPU
// model m as a serving replica makes it: the checkpoint loaded on the CPU
// (where the trainer runs) is cloned whole and mirrored onto the GPU
// (engine.MeasureVersionCopy).
func (a *app) benchVersionCopy(m *model.Model, dir string, row func(...string)) error {
	src, err := engine.LoadModel(a.cfg, dir)
	if err != nil {
		return err
	}
	defer src.Close()
	took, bytes, err := engine.MeasureVersionCopy(src, m)
	if err != nil {
		return err
	}
	row("  version copy, CPU to GPU", fmt.Sprintf("%.3f", took.Seconds()), "s",
		fmt.Sprintf("%.0f MB of weights (every tensor changed), %.1f GB/s, through the replica's mirror", float64(bytes)/1e6, float64(bytes)/took.Seconds()/1e9))
	return nil
}

// benchLongContext prefills a prompt of ctx tokens (in chunks of 512, as
// the scheduler does) into a cache of dtype dt, then decodes decodeN tokens
// after it: the shape of an agent's turn, where each token reads the whole
// cache besides the weights. With flopRate, the prefill's row says its
// TFLOP/s (prefillFlops).
func benchLongContext(m *model.Model, dt compute.DType, ctx, decodeN int, tokens func(int) []int32, row func(...string), flopRate bool) error {
	cfg := m.Config
	const bs, chunk = 16, 512
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: bs, Budget: cfg.KVBytesPerToken(dt) * int64(ctx+decodeN+2*bs), DType: dt})
	if err != nil {
		return err
	}
	defer kv.Close()
	seq := kv.NewSequence()
	defer seq.Free()
	prompt := tokens(ctx)
	start := time.Now()
	var logits []float32
	for i := 0; i < ctx; i += chunk {
		if logits, err = m.Forward([]model.Step{{Seq: seq, Tokens: prompt[i:min(ctx, i+chunk)]}}, model.LastLogits, logits); err != nil {
			return err
		}
	}
	pel := time.Since(start)
	start = time.Now()
	for range decodeN {
		next := int32(slices.Index(logits, slices.Max(logits)))
		if logits, err = m.Forward([]model.Step{{Seq: seq, Tokens: []int32{next}}}, model.LastLogits, logits); err != nil {
			return err
		}
	}
	tps := float64(decodeN) / time.Since(start).Seconds()
	kvMB := float64(cfg.KVBytesPerToken(dt)) * float64(ctx) / 1e6
	note := "in chunks of 512"
	if flopRate {
		note += fmt.Sprintf(", %.1f TFLOP/s", prefillFlops(cfg, ctx)/pel.Seconds()/1e12)
	}
	row(fmt.Sprintf("  prefill, %d-token context", ctx), fmt.Sprintf("%.1f", float64(ctx)/pel.Seconds()), "tok/s", note)
	row(fmt.Sprintf("  decode after %d tokens", ctx), fmt.Sprintf("%.1f", tps), "tok/s",
		fmt.Sprintf("reads %.0f MB of %v keys and values and %.0f MB of weights per token (%.1f GB/s)", kvMB, dt, decodeBytes(m)/1e6, tps*(kvMB*1e6+decodeBytes(m))/1e9))
	return nil
}

// benchLogitsCmd is `clawrl bench logits`, hidden: a model's logits for a
// prompt and its greedy continuation, written as files for a reference
// implementation to compare (scripts/gpu-check compares them with Hugging
// Face transformers on a GPU box).
func (a *app) benchLogitsCmd() *cobra.Command {
	var dir, promptFile, out string
	var gpu, greedy int
	cmd := &cobra.Command{
		Use:    "logits --model DIR --prompt FILE --out DIR",
		Hidden: true,
		Short:  "Write a model's logits for a prompt and its greedy continuation (for scripts/gpu-check)",
		Long: `logits loads --model on --gpu N (through the engine, as serving does) or on
the CPU (-1, at model.precision), prefills the token ids of --prompt (a text
file of integers) in one forward pass, then decodes --greedy tokens greedily
(argmax, the first on ties), one step at a time, and writes to --out:

  prefill.f32  the logits after each prompt token (float32, little-endian,
               rows of vocab_size)
  decode.f32   the logits of each decode step (greedy − 1 rows: the step
               that feeds greedy token i gives the row that chose token i+1)
  greedy.txt   the greedy tokens, one line
  logits.json  vocab_size, the counts, the backend, the KV cache's dtype
               and the times of the prefill and of the decode steps`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || promptFile == "" || out == "" {
				return errors.New("bench logits: --model, --prompt and --out are required")
			}
			return a.writeLogits(cmd.OutOrStdout(), dir, gpu, promptFile, greedy, out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "model", "", "checkpoint directory or GGUF file")
	f.IntVar(&gpu, "gpu", -1, "GPU to run on (-1: the CPU)")
	f.StringVar(&promptFile, "prompt", "", "file of prompt token ids (integers separated by white space)")
	f.IntVar(&greedy, "greedy", 256, "greedy tokens to generate after the prompt (at least 1)")
	f.StringVar(&out, "out", "", "directory for the files (created)")
	return cmd
}

func (a *app) writeLogits(w io.Writer, dir string, gpu int, promptFile string, greedy int, out string) error {
	data, err := os.ReadFile(promptFile)
	if err != nil {
		return fmt.Errorf("bench logits: %w", err)
	}
	var prompt []int32
	for _, s := range strings.Fields(string(data)) {
		id, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return fmt.Errorf("bench logits: %s: %q is not a token id", promptFile, s)
		}
		prompt = append(prompt, int32(id))
	}
	if len(prompt) == 0 || greedy < 1 {
		return fmt.Errorf("bench logits: need a prompt of at least one token (%s has %d) and --greedy ≥ 1", promptFile, len(prompt))
	}
	var m *model.Model
	if gpu >= 0 {
		var closeModel func()
		if m, closeModel, err = engine.LoadModelGPU(dir, gpu); err != nil {
			return err
		}
		defer closeModel()
	} else {
		if m, err = engine.LoadModel(a.cfg, dir); err != nil {
			return err
		}
		defer m.Close()
	}
	cfg := m.Config
	vocab := cfg.VocabSize
	for _, id := range prompt {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("bench logits: token id %d outside the vocabulary (%d)", id, vocab)
		}
	}
	if len(prompt)+greedy > cfg.MaxPositions {
		return fmt.Errorf("bench logits: %d prompt + %d greedy tokens pass max_position_embeddings %d", len(prompt), greedy, cfg.MaxPositions)
	}
	kvdt := engine.KVDType(a.cfg, cfg)
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: 16, Budget: cfg.KVBytesPerToken(kvdt) * int64(len(prompt)+greedy+32), DType: kvdt})
	if err != nil {
		return err
	}
	defer kv.Close()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("bench logits: %w", err)
	}
	seq := kv.NewSequence()
	defer seq.Free()
	start := time.Now()
	logits, err := m.Forward([]model.Step{{Seq: seq, Tokens: prompt}}, model.AllLogits, nil)
	if err != nil {
		return err
	}
	prefillTime := time.Since(start)
	if err := writeFloats(filepath.Join(out, "prefill.f32"), logits); err != nil {
		return err
	}
	argmax := func(row []float32) int32 {
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		return int32(best)
	}
	tokens := []int32{argmax(logits[(len(prompt)-1)*vocab:])}
	decoded := make([]float32, 0, (greedy-1)*vocab)
	var row []float32
	start = time.Now()
	for len(tokens) < greedy {
		if row, err = m.Forward([]model.Step{{Seq: seq, Tokens: tokens[len(tokens)-1:]}}, model.LastLogits, row); err != nil {
			return err
		}
		decoded = append(decoded, row...)
		tokens = append(tokens, argmax(row))
	}
	decodeTime := time.Since(start)
	if err := writeFloats(filepath.Join(out, "decode.f32"), decoded); err != nil {
		return err
	}
	ids := make([]string, len(tokens))
	for i, t := range tokens {
		ids[i] = strconv.Itoa(int(t))
	}
	if err := os.WriteFile(filepath.Join(out, "greedy.txt"), []byte(strings.Join(ids, " ")+"\n"), 0o644); err != nil {
		return fmt.Errorf("bench logits: %w", err)
	}
	meta, err := json.MarshalIndent(map[string]any{
		"vocab_size": vocab, "prompt_tokens": len(prompt), "greedy_tokens": len(tokens), "backend": m.Backend().Name(),
		"kv_dtype": kvdt.String(), "torch_dtype": cfg.TorchDType, "prefill_seconds": prefillTime.Seconds(), "decode_seconds": decodeTime.Seconds(),
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "logits.json"), append(meta, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench logits: %w", err)
	}
	fmt.Fprintf(w, "%s on %s: prefill of %d tokens %.3f s, %d greedy tokens %.3f s (%.1f tok/s); wrote %s\n",
		filepath.Base(filepath.Clean(dir)), m.Backend().Name(), len(prompt), prefillTime.Seconds(), len(tokens), decodeTime.Seconds(),
		float64(len(tokens)-1)/max(decodeTime.Seconds(), 1e-9), out)
	return nil
}

// writeFloats writes v to path as little-endian float32.
func writeFloats(path string, v []float32) error {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		return fmt.Errorf("bench logits: %w", err)
	}
	return nil
}
