package export

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/weights"
)

// GGUF exports checkpoint c as one GGUF file at out, the format llama.cpp
// and Ollama load: the checkpoint's merged weights with matrices in the
// types of mix (one type, bf16, f16, f32, q8_0, q4_0 or any other package
// gguf writes, or llama-quantize's Q4_K_M or Q5_K_M mix; vectors stay
// F32), llama's query and key projections permuted as llama.cpp's
// converter does, and the tokenizer (the checkpoint's, else opts.BaseDir's)
// as GGUF vocabulary and chat template (gguf.WriteModel). The weights are
// checked against the checkpoint's manifest (size and SHA-256) before they
// are read, and the file appears whole or not at all. An existing out is
// replaced only with opts.Force, and only if it is a GGUF file.
func GGUF(c *weights.Checkpoint, out string, mix gguf.Mix, opts Options) (Result, error) {
	abs, err := filepath.Abs(out)
	if err != nil {
		return Result{}, fmt.Errorf("export: %s: %w", out, err)
	}
	ckpt, _ := filepath.Abs(c.Dir())
	if within(resolve(abs), resolve(ckpt)) {
		return Result{}, fmt.Errorf("export: %s is inside the checkpoint %s; write the file elsewhere", out, c.Dir())
	}
	if err := checkGGUFDest(abs, opts.Force); err != nil {
		return Result{}, err
	}
	if err := verifyWeights(c); err != nil {
		return Result{}, err
	}
	tok, err := exportTokenizer(c, opts.BaseDir)
	if err != nil {
		return Result{}, err
	}
	var src model.Source
	if c.AdaptersOnly() {
		x := &exporter{c: c, opts: opts}
		src, err = x.merged()
	} else if src, err = model.OpenDir(c.Dir()); err != nil {
		err = fmt.Errorf("export: %w", err)
	}
	if err != nil {
		return Result{}, err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return Result{}, fmt.Errorf("export: %w", err)
	}
	name := opts.BaseName
	if name == "" && opts.BaseDir != "" {
		name = gguf.ModelName(opts.BaseDir)
	}
	if name == "" {
		name = gguf.ModelName(src.String())
	}
	if err := gguf.WriteModelAs(abs, name, src, tok, mix); err != nil {
		return Result{}, fmt.Errorf("export: %w", err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return Result{}, fmt.Errorf("export: %w", err)
	}
	return Result{Dir: abs, Version: c.Manifest.Version, Files: []string{filepath.Base(abs)}, Bytes: st.Size(), DType: mix.String()}, nil
}

// ggufMagic opens every GGUF file.
var ggufMagic = []byte("GGUF")

// checkGGUFDest refuses an existing destination unless force is set and it
// is a GGUF file (never a directory or a file of another kind).
func checkGGUFDest(path string, force bool) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("export: %s: %w", path, err)
	}
	if !force {
		return fmt.Errorf("export: %s exists; pass --force to replace an earlier GGUF export", path)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("export: %s is not a regular file; --force replaces only an earlier GGUF export", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("export: %s: %w", path, err)
	}
	defer f.Close()
	head := make([]byte, len(ggufMagic))
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, ggufMagic) {
		return fmt.Errorf("export: %s is not a GGUF file; --force replaces only an earlier GGUF export", path)
	}
	return nil
}

// verifyWeights checks the checkpoint's weight files against its manifest
// again (they are read in place, not copied: a file changed since the
// checkpoint was opened is refused with its path).
func verifyWeights(c *weights.Checkpoint) error {
	for _, e := range c.Manifest.Files {
		if filepath.Ext(e.Name) != ".safetensors" && e.Name != "config.json" {
			continue
		}
		if err := weights.VerifyFile(c.Path(e.Name), e); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	return nil
}

// exportTokenizer loads the tokenizer of checkpoint c, or of the base
// directory when the checkpoint has none.
func exportTokenizer(c *weights.Checkpoint, baseDir string) (*tokenizer.Tokenizer, error) {
	dir := c.Dir()
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		if baseDir == "" {
			return nil, fmt.Errorf("export: checkpoint %s has no tokenizer.json and no base model is configured to take it from", c.Dir())
		}
		dir = baseDir
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("export: the tokenizer: %w", err)
	}
	return tok, nil
}
