// Package export writes one checkpointed weight version as a directory
// that other tools load without clawrl: a Hugging Face model (the merged
// weights, config.json, the tokenizer's files and a model card) or a PEFT
// LoRA adapter (adapter_model.safetensors and adapter_config.json, for a
// lineage trained with LoRA).
//
// A checkpoint of LoRA adapters only (the daemon's, for a LoRA lineage)
// has no weights file: the export merges the adapters into the base the
// checkpoint names (Options.Merged) and writes the weights a whole
// checkpoint would hold.
//
// A whole checkpoint is already a Hugging Face directory, but it is the
// lineage's: pruning deletes it, it carries the
// optimizer's state, and its config.json names the base checkpoint's dtype
// even where the trainer merged LoRA into F32 matrices (a loader that
// honours torch_dtype would round the learning away). An export is a
// standalone copy that fixes that:
//
//   - every file copied is hashed as it is copied and compared with the
//     checkpoint's manifest, so a file pruned, truncated or corrupted after
//     weights.Open verified it fails the export instead of shipping;
//   - config.json's torch_dtype (and dtype, where present) names the
//     narrowest dtype that holds every written value exactly (float32 for
//     LoRA-merged matrices; bfloat16 where every F32 tensor holds BF16
//     numbers, such as norm weights the backend widened);
//   - the directory is built under a temporary name beside the destination
//     and renamed into place (atomicfile.ReplaceDir), so the destination
//     holds either nothing, the old export (with Force) or the whole new
//     one.
//
// The weights are written as the checkpoint holds them (DTypeAuto), all in
// F32 (exact), or all in BF16 (half the size; rounding to nearest even
// loses updates smaller than half a BF16 step of a weight).
package export

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/clawrl/clawrl/atomicfile"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
	"github.com/clawrl/clawrl/weights"
)

// DType is the dtype an export writes its weights in.
type DType string

// The dtypes an export can write.
const (
	// DTypeAuto keeps each tensor's dtype as the checkpoint holds it.
	DTypeAuto DType = "auto"
	// DTypeF32 widens every tensor to F32 (exact).
	DTypeF32 DType = "f32"
	// DTypeBF16 rounds every tensor to BF16 (to nearest even).
	DTypeBF16 DType = "bf16"
)

// ParseDType reads a dtype as the CLI spells it ("" is auto).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return DTypeAuto, nil
	case "f32", "float32", "fp32":
		return DTypeF32, nil
	case "bf16", "bfloat16":
		return DTypeBF16, nil
	}
	return "", fmt.Errorf("export: dtype %q: want auto, f32 or bf16", s)
}

// ParseSize reads a size as transformers' max_shard_size spells it: a
// number with an optional unit, B, KB, MB, GB (powers of 1000) or KiB,
// MiB, GiB (powers of 1024), such as "5GB" or "500MiB"; "0" means no limit.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := 1.0
	upper := strings.ToUpper(t)
	for _, u := range units {
		if strings.HasSuffix(upper, u.suffix) {
			mult, t = u.mult, strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	bad := fmt.Errorf("export: size %q: want a number of bytes with an optional unit (B, KB, MB, GB, KiB, MiB, GiB), such as 5GB", s)
	if n, err := strconv.ParseInt(t, 10, 64); err == nil { // whole numbers exactly
		if n < 0 || n > math.MaxInt64/int64(mult) {
			return 0, bad
		}
		return n * int64(mult), nil
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || v*mult > math.MaxInt64/2 {
		return 0, bad
	}
	return int64(v * mult), nil
}

// Files of an export besides the checkpoint's own.
const (
	CardFile          = "README.md"
	AdapterModelFile  = "adapter_model.safetensors"
	AdapterConfigFile = "adapter_config.json"
)

// tokenizerFiles are the files a loader needs beside the weights; they are
// copied from the checkpoint, or from Options.BaseDir where the checkpoint
// lacks them.
var tokenizerFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
	"vocab.json", "merges.txt", "chat_template.jinja",
}

// Options configure an export.
type Options struct {
	// DType is the dtype of the written weights; "" means DTypeAuto.
	DType DType
	// Force replaces an existing non-empty destination (whole: the old
	// directory is removed once the new one is in place).
	Force bool
	// BaseDir is the base checkpoint's directory: the tokenizer's files
	// come from it where the checkpoint lacks them, and an adapter names
	// it as base_model_name_or_path.
	BaseDir string
	// BaseName names the base model in the model card and, when set, in
	// adapter_config.json instead of BaseDir (a hub id, say).
	BaseName string
	// BaseFingerprint, when set, must equal the checkpoint's recorded base
	// (manifest meta base_model) for an adapter export: an adapter applied
	// to another base is a different model.
	BaseFingerprint string
	// MaxShardBytes splits model weights larger than it into shards of at
	// most this size with an index, as transformers' save_pretrained does
	// (a tensor larger than it gets a shard of its own); 0 writes one
	// model.safetensors whatever its size.
	MaxShardBytes int64
	// Now stamps the model card (zero: time.Now).
	Now time.Time
	// Merged opens the weights of a checkpoint that holds LoRA adapters
	// only (weights.Checkpoint.AdaptersOnly): its base with the adapters
	// applied (engine.OpenAdapted). A merged export of such a checkpoint
	// needs it; the export closes the source.
	Merged func() (model.Source, error)
}

// Result describes a finished export.
type Result struct {
	Dir     string   // the destination
	Version uint64   // the version exported
	Files   []string // the files written, sorted
	Bytes   int64    // their total size
	DType   string   // config.json's torch_dtype (adapter: the tensors' dtype)
}

// Model exports checkpoint c as a Hugging Face model directory at out.
func Model(c *weights.Checkpoint, out string, opts Options) (Result, error) {
	return run(c, out, opts, func(x *exporter) error {
		torchDType, err := x.writeWeights(weights.ModelFile, x.opts.DType)
		if err != nil {
			return err
		}
		x.torchDType = torchDType
		if err := x.writeConfig(torchDType); err != nil {
			return err
		}
		return x.writeCard("model")
	})
}

// Adapter exports checkpoint c's LoRA adapters as a PEFT adapter directory
// at out. It refuses a checkpoint trained without LoRA.
func Adapter(c *weights.Checkpoint, out string, opts Options) (Result, error) {
	return run(c, out, opts, func(x *exporter) error {
		st, err := readState(c)
		if err != nil {
			return err
		}
		if st.LoRA == nil || st.LoRA.Rank <= 0 {
			return fmt.Errorf("export: %s: version %d was trained without LoRA (trainer.lora_rank 0), so it has no adapter; export the merged model instead",
				c.Dir(), c.Manifest.Version)
		}
		if base := c.Manifest.Meta.Base; opts.BaseFingerprint != "" && base != "" && base != opts.BaseFingerprint {
			return fmt.Errorf("export: %s: the adapter was trained on base %s, the configured model is %s; an adapter applies only to its own base",
				c.Dir(), base, opts.BaseFingerprint)
		}
		if err := fusedTargets(c, st.LoRA.Targets); err != nil {
			return err
		}
		dt, err := x.writeAdapter(st)
		if err != nil {
			return err
		}
		x.torchDType = dt
		if err := x.writeAdapterConfig(st); err != nil {
			return err
		}
		return x.writeCard("adapter")
	})
}

// fusedTargets refuses a PEFT export of adapters on matrices that the
// model's own checkpoints hold fused (Phi-3's qkv_proj and gate_up_proj):
// PEFT would look for modules the model does not have.
func fusedTargets(c *weights.Checkpoint, targets []string) error {
	raw, err := c.ReadFile(weights.ConfigFile)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	cfg, err := model.ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("export: %s: %w", c.Path(weights.ConfigFile), err)
	}
	if cfg.Architecture != model.ArchPhi3 {
		return nil
	}
	for _, t := range targets {
		switch moduleName(t) {
		case "q_proj", "k_proj", "v_proj", "gate_proj", "up_proj":
			return fmt.Errorf("export: %s: the adapter adapts %s, which %s holds inside a fused matrix (qkv_proj, gate_up_proj) that PEFT would adapt as one; export the merged model instead (--format hf or gguf)",
				c.Dir(), moduleName(t), cfg.Architecture)
		}
	}
	return nil
}

// exporter builds one export in its temporary directory.
type exporter struct {
	c          *weights.Checkpoint
	opts       Options
	tmp        string
	written    []string
	bytes      int64
	torchDType string
}

// run prepares the destination, has fill write the export into a temporary
// directory beside it, copies the tokenizer's files and renames the
// directory into place.
func run(c *weights.Checkpoint, out string, opts Options, fill func(*exporter) error) (Result, error) {
	if opts.DType == "" {
		opts.DType = DTypeAuto
	}
	if _, err := ParseDType(string(opts.DType)); err != nil {
		return Result{}, err
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return Result{}, fmt.Errorf("export: %s: %w", out, err)
	}
	ckpt, _ := filepath.Abs(c.Dir())
	ckpt, real := resolve(ckpt), resolve(abs)
	if within(real, ckpt) {
		return Result{}, fmt.Errorf("export: %s is inside the checkpoint %s; export to a directory of its own", out, c.Dir())
	}
	if within(ckpt, real) {
		return Result{}, fmt.Errorf("export: %s holds the checkpoint %s; export to a directory of its own", out, c.Dir())
	}
	if err := checkDest(abs, opts.Force); err != nil {
		return Result{}, err
	}
	parent := filepath.Dir(abs)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Result{}, fmt.Errorf("export: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(abs)+".export-*")
	if err != nil {
		return Result{}, fmt.Errorf("export: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	x := &exporter{c: c, opts: opts, tmp: tmp}
	if err := x.copyTokenizer(); err != nil {
		return Result{}, err
	}
	if err := fill(x); err != nil {
		return Result{}, err
	}
	aside := ""
	if opts.Force {
		aside = tmp + ".old"
	}
	if err := atomicfile.ReplaceDir(tmp, abs, aside); err != nil {
		return Result{}, fmt.Errorf("export: putting the export at %s: %w", out, err)
	}
	done = true
	slices.Sort(x.written)
	return Result{Dir: abs, Version: c.Manifest.Version, Files: x.written, Bytes: x.bytes, DType: x.torchDType}, nil
}

// resolve returns path with its symbolic links resolved, as far as it
// exists (a destination not made yet resolves through its parent).
func resolve(path string) string {
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	if dir := filepath.Dir(path); dir != path {
		return filepath.Join(resolve(dir), filepath.Base(path))
	}
	return path
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// cardTitle starts the first heading of an export's model card; Force
// replaces only a directory whose README.md has it.
const cardTitle = "# Weight version "

// checkDest refuses a destination that is a file, or a non-empty directory
// unless force and it holds an earlier export (its model card says so):
// --force never deletes a directory of other files.
func checkDest(out string, force bool) error {
	st, err := os.Stat(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("export: %s exists and is not a directory", out)
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if len(ents) == 0 {
		return nil
	}
	if !force {
		return fmt.Errorf("export: %s exists and is not empty; pass --force to replace it", out)
	}
	card, err := os.ReadFile(filepath.Join(out, CardFile))
	if err != nil || !strings.Contains(string(card), "\n"+cardTitle) || !strings.Contains(string(card), ", exported by clawrl") {
		return fmt.Errorf("export: %s holds files that are not a clawrl export; --force replaces only an earlier export (remove them yourself, or pick another --out)", out)
	}
	return nil
}

// copyTokenizer copies the tokenizer's files: each from the checkpoint
// (verified against its manifest) or else from the base directory. A
// model without tokenizer.json cannot be served, so its absence from both
// is an error.
func (x *exporter) copyTokenizer() error {
	for _, name := range tokenizerFiles {
		if x.c.Has(name) {
			if err := x.copyVerified(name); err != nil {
				return err
			}
			continue
		}
		if x.opts.BaseDir == "" {
			continue
		}
		src := filepath.Join(x.opts.BaseDir, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if err := x.copyFile(src, name, nil); err != nil {
			return err
		}
	}
	if !slices.Contains(x.written, "tokenizer.json") {
		where := x.c.Dir()
		if x.opts.BaseDir != "" {
			where += " or " + x.opts.BaseDir
		}
		return fmt.Errorf("export: no tokenizer.json in %s; a model without its tokenizer cannot be loaded", where)
	}
	return nil
}

// copyVerified copies the checkpoint's file name into the export, hashing
// it on the way and comparing size and SHA-256 with the manifest.
func (x *exporter) copyVerified(name string) error {
	var entry weights.FileEntry
	for _, f := range x.c.Manifest.Files {
		if f.Name == name {
			entry = f
		}
	}
	return x.copyFile(x.c.Path(name), name, &entry)
}

// copyFile copies src to name in the export; with want set, the copy must
// have its size and SHA-256.
func (x *exporter) copyFile(src, name string, want *weights.FileEntry) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer in.Close()
	h := sha256.New()
	var n int64
	err = atomicfile.WriteFile(filepath.Join(x.tmp, name), 0o644, func(w io.Writer) error {
		var err error
		n, err = io.Copy(io.MultiWriter(w, h), in)
		if err != nil {
			return fmt.Errorf("reading %s: %w", src, err)
		}
		if want == nil {
			return nil
		}
		if n != want.Size {
			return fmt.Errorf("%s: %d bytes, the manifest says %d (changed since it was verified)", src, n, want.Size)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want.SHA256 {
			return fmt.Errorf("%s: SHA-256 %s, the manifest says %s (changed since it was verified)", src, got, want.SHA256)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	x.note(name, n)
	return nil
}

func (x *exporter) note(name string, n int64) {
	x.written = append(x.written, name)
	x.bytes += n
}

// writeWeights writes the checkpoint's weights as the safetensors file
// name into the export in dtype and returns the torch dtype that names the
// widest dtype written. DTypeAuto copies the checkpoint's file byte for
// byte (verified). A checkpoint of adapters only has no such file: its
// merged weights (Options.Merged) are written as the file it would hold,
// then converted likewise.
func (x *exporter) writeWeights(name string, dtype DType) (string, error) {
	if !x.c.AdaptersOnly() {
		return x.convertWeights(x.c.Path(name), name, dtype, func() error { return x.copyVerified(name) })
	}
	src, err := x.merged()
	if err != nil {
		return "", err
	}
	defer src.Close()
	tmp := filepath.Join(x.tmp, ".merged.safetensors")
	defer os.Remove(tmp)
	if err := writeSource(tmp, src); err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	return x.convertWeights(tmp, name, dtype, func() error {
		if err := os.Rename(tmp, filepath.Join(x.tmp, name)); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		return x.noteFile(name)
	})
}

// merged opens the merged weights of a checkpoint of adapters only.
func (x *exporter) merged() (model.Source, error) {
	if x.opts.Merged == nil {
		return nil, fmt.Errorf("export: %s holds LoRA adapters only, over the base model %s, and nothing was given to merge them", x.c.Dir(), x.c.Manifest.Adapters.Path)
	}
	src, err := x.opts.Merged()
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return src, nil
}

// writeSource writes every tensor src's config implies to the safetensors
// file path, as src holds it: BF16 where it has the bits, else F32. Each
// tensor's values are asked for again as it is written, so that only one
// is in memory at a time.
func writeSource(path string, src model.Source) error {
	specs := src.Config().FileTensorSpecs()
	tensors := make([]safetensors.WriteTensor, 0, len(specs))
	for _, spec := range specs {
		t, err := src.Tensor(spec.Name)
		if err != nil {
			return err
		}
		wt := safetensors.WriteTensor{Name: spec.Name, DType: safetensors.F32, Shape: slices.Clone(t.Shape)}
		if t.BF16 != nil {
			wt.DType = safetensors.BF16
		}
		name, dt := spec.Name, wt.DType
		wt.Stream = func(w io.Writer) error {
			t, err := src.Tensor(name)
			if err != nil {
				return err
			}
			if dt == safetensors.BF16 {
				_, err = w.Write(safetensors.EncodeUint16(t.BF16))
				return err
			}
			vals, _, err := t.Float32()
			if err != nil {
				return err
			}
			_, err = w.Write(safetensors.EncodeFloat32(vals))
			return err
		}
		tensors = append(tensors, wt)
	}
	return safetensors.WriteFile(path, tensors, map[string]string{"format": "pt"})
}

// convertWeights writes the safetensors file src into the export as name
// (or its shards) in dtype and returns the torch dtype that names the
// widest dtype written; keep puts src there as it is, for DTypeAuto
// without shards.
func (x *exporter) convertWeights(src, name string, dtype DType, keep func() error) (string, error) {
	f, err := safetensors.Open(src)
	if err != nil {
		return "", fmt.Errorf("export: %w", err)
	}
	defer f.Close()
	names := f.Names()
	torch := ""
	if dtype == DTypeAuto {
		if torch, err = autoTorchDType(f, names); err != nil {
			return "", err
		}
	} else if torch, err = torchName(target(dtype)); err != nil {
		return "", err
	}
	tensors, err := convertTensors(f, names, names, dtype)
	if err != nil {
		return "", err
	}
	var total int64
	for i := range tensors {
		total += tensors[i].Size()
	}
	if max := x.opts.MaxShardBytes; max > 0 && total > max {
		return torch, x.writeShards(tensors, f.Metadata(), total, max)
	}
	if dtype == DTypeAuto {
		return torch, keep()
	}
	return torch, x.writeSafetensors(name, tensors, f.Metadata())
}

// writeShards writes tensors as shards of at most max bytes each (a
// tensor larger than max gets a shard of its own), in name order, named
// model-0000i-of-0000n.safetensors as transformers names them, and the
// index model.safetensors.index.json that maps each tensor to its shard.
func (x *exporter) writeShards(tensors []safetensors.WriteTensor, meta map[string]string, total, max int64) error {
	var shards [][]safetensors.WriteTensor
	var size int64
	for _, t := range tensors {
		if len(shards) == 0 || (size > 0 && size+t.Size() > max) {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], t)
		size += t.Size()
	}
	weightMap := make(map[string]string, len(tensors))
	for i, shard := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := x.writeSafetensors(name, shard, maps.Clone(meta)); err != nil {
			return err
		}
		for _, t := range shard {
			weightMap[t.Name] = name
		}
	}
	path := filepath.Join(x.tmp, safetensors.IndexFile)
	if err := safetensors.WriteIndex(path, weightMap, total); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return x.noteFile(safetensors.IndexFile)
}

// autoTorchDType is the torch dtype that holds every value of f's tensors
// exactly: the widest dtype among them, except that F32 tensors beside
// BF16 ones whose values are all BF16 numbers (norm weights the backend
// widened, a full fine-tuning rounded back to BF16) leave it bfloat16.
// LoRA-merged F32 matrices are not BF16 numbers, so they make it float32.
func autoTorchDType(f *safetensors.File, names []string) (string, error) {
	widest := safetensors.DType("")
	bf16, exact := false, true
	for _, n := range names {
		info, _ := f.Info(n)
		if widest == "" || info.DType.Size() > widest.Size() || (info.DType == safetensors.BF16 && widest == safetensors.F16) {
			widest = info.DType
		}
		switch info.DType {
		case safetensors.BF16:
			bf16 = true
		case safetensors.F32:
			if exact {
				b, err := f.Bytes(n)
				if err != nil {
					return "", fmt.Errorf("export: %w", err)
				}
				exact = bf16Exact(b)
			}
		}
	}
	if widest == safetensors.F32 && bf16 && exact {
		widest = safetensors.BF16
	}
	return torchName(widest)
}

// bf16Exact reports whether every little-endian float32 in b is a BF16
// number (its low 16 bits are zero).
func bf16Exact(b []byte) bool {
	for i := 0; i+3 < len(b); i += 4 {
		if b[i] != 0 || b[i+1] != 0 {
			return false
		}
	}
	return true
}

// target is the safetensors dtype of an export dtype other than auto.
func target(d DType) safetensors.DType {
	if d == DTypeBF16 {
		return safetensors.BF16
	}
	return safetensors.F32
}

// convertTensors describes the tensors names of f, written under outNames,
// converted to dtype (DTypeAuto: as they are).
func convertTensors(f *safetensors.File, names, outNames []string, dtype DType) ([]safetensors.WriteTensor, error) {
	out := make([]safetensors.WriteTensor, 0, len(names))
	for i, n := range names {
		info, _ := f.Info(n)
		if !info.DType.Supported() {
			return nil, fmt.Errorf("export: %s: tensor %q is %s; only F32, BF16 and F16 convert", f.Path(), n, info.DType)
		}
		to := info.DType
		if dtype != DTypeAuto {
			to = target(dtype)
		}
		out = append(out, safetensors.WriteTensor{
			Name: outNames[i], DType: to, Shape: slices.Clone(info.Shape),
			Stream: func(w io.Writer) error { return writeAs(w, f, n, info.DType, to) },
		})
	}
	return out, nil
}

// writeAs writes tensor name of f, held in from, as to.
func writeAs(w io.Writer, f *safetensors.File, name string, from, to safetensors.DType) error {
	if from == to {
		b, err := f.Bytes(name)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	vals, err := f.Float32(name)
	if err != nil {
		return err
	}
	switch to {
	case safetensors.F32:
		_, err = w.Write(safetensors.EncodeFloat32(vals))
	case safetensors.BF16:
		bits := make([]uint16, len(vals))
		for i, v := range vals {
			bits[i] = safetensors.Float32ToBF16(v)
		}
		_, err = w.Write(safetensors.EncodeUint16(bits))
	default:
		err = fmt.Errorf("cannot write %s", to)
	}
	return err
}

func (x *exporter) writeSafetensors(name string, tensors []safetensors.WriteTensor, meta map[string]string) error {
	path := filepath.Join(x.tmp, name)
	if meta == nil {
		meta = map[string]string{}
	}
	if meta["format"] == "" {
		meta["format"] = "pt"
	}
	if err := safetensors.WriteFile(path, tensors, meta); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return x.noteFile(name)
}

// noteFile notes the export's file name, written by another package.
func (x *exporter) noteFile(name string) error {
	st, err := os.Stat(filepath.Join(x.tmp, name))
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	x.note(name, st.Size())
	return nil
}

// torchName is the torch dtype name of a safetensors dtype.
func torchName(d safetensors.DType) (string, error) {
	switch d {
	case safetensors.F32:
		return "float32", nil
	case safetensors.BF16:
		return "bfloat16", nil
	case safetensors.F16:
		return "float16", nil
	}
	return "", fmt.Errorf("export: weights in dtype %q", d)
}

// writeConfig writes the checkpoint's config.json with torch_dtype (and
// transformers' newer dtype key, where present) set to torchDType. The
// checkpoint's bytes are verified first.
func (x *exporter) writeConfig(torchDType string) error {
	raw, err := x.c.ReadFile(weights.ConfigFile)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	var cfg map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers keep their text (1e-06 stays 1e-06, 1000000.0 stays 1000000.0)
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("export: %s: %w", x.c.Path(weights.ConfigFile), err)
	}
	cfg["torch_dtype"] = torchDType
	if _, ok := cfg["dtype"]; ok {
		cfg["dtype"] = torchDType
	}
	return x.writeJSON(weights.ConfigFile, cfg)
}

func (x *exporter) writeJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("export: %s: %w", name, err)
	}
	return x.writeBytes(name, append(b, '\n'))
}

func (x *exporter) writeBytes(name string, b []byte) error {
	if err := atomicfile.WriteBytes(filepath.Join(x.tmp, name), 0o644, b); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	x.note(name, int64(len(b)))
	return nil
}
