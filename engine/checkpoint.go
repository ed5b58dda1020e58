package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/weights"
)

// ModelDir resolves the checkpoint: flag, else model.path, else the
// bundled model, extracted once into the user's cache. A checkpoint is a
// Hugging Face directory or a GGUF file (see IsGGUF).
func ModelDir(cfg *config.Config, flag string, log zerolog.Logger) (string, error) {
	dir := flag
	if dir == "" {
		dir = cfg.Model.Path
	}
	if dir == "" {
		d, err := bundled.Dir()
		if err != nil {
			return "", fmt.Errorf("%w; pass --model DIR or set model.path to a Hugging Face checkpoint directory or a GGUF file", err)
		}
		log.Info().Str("dir", d).Msg("no model configured: using the bundled model")
		return d, nil
	}
	return dir, nil
}

// IsBundled reports whether dir is the bundled model's directory.
func IsBundled(dir string) bool {
	d, err := bundled.Dir()
	return err == nil && filepath.Clean(d) == filepath.Clean(dir)
}

// BaseFingerprint identifies a base checkpoint: the bundled model by its
// embedded hash, a directory by the SHA-256 of its config, the sizes of its
// weight files, their headers and their first and last MiB, a GGUF file
// by its size and its first and last MiB (reading a multi-GB checkpoint
// whole at every start would cost seconds).
func BaseFingerprint(dir string) (string, error) {
	if IsBundled(dir) {
		return bundledFingerprint(), nil
	}
	h := sha256.New()
	if IsGGUF(dir) {
		if err := hashEnds(h, dir); err != nil {
			return "", fmt.Errorf("model %s: %w", dir, err)
		}
		return filepath.Base(filepath.Clean(dir)) + "-" + hex.EncodeToString(h.Sum(nil))[:16], nil
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", fmt.Errorf("model %s: %w", dir, err)
	}
	h.Write(cfg)
	names, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(names) == 0 {
		return "", fmt.Errorf("model %s: no *.safetensors file", dir)
	}
	for _, name := range names {
		if err := hashEnds(h, name); err != nil {
			return "", fmt.Errorf("model %s: %w", dir, err)
		}
	}
	return filepath.Base(filepath.Clean(dir)) + "-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// bundledFingerprint is the bundled model's BaseFingerprint.
func bundledFingerprint() string { return bundled.Name + "-" + bundled.Hash()[:16] }

// hashEnds writes the name and size of a file and its first and last MiB
// into h.
func hashEnds(h io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%s %d\n", filepath.Base(name), st.Size())
	const chunk = 1 << 20
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, chunk)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if st.Size() > chunk {
		if _, err := io.Copy(h, io.NewSectionReader(f, max(chunk, st.Size()-chunk), chunk)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// IsGGUF reports whether path names a model file rather than a checkpoint
// directory: a regular file (or a path ending in .gguf), which the engine
// opens as GGUF.
func IsGGUF(path string) bool {
	if st, err := os.Stat(path); err == nil {
		return st.Mode().IsRegular()
	}
	return filepath.Ext(path) == ".gguf"
}

// sourceFor applies the load-time choices of cfg (nil: none) to src:
// model.long_context runs a LongRoPE model's long factors over its whole
// context.
func sourceFor(cfg *config.Config, src model.Source) model.Source {
	if cfg != nil && cfg.Model.LongContext && src.Config().LongRope != nil {
		return model.WithConfig(src, src.Config().LongContext())
	}
	return src
}

// loadModel loads the checkpoint at path (a directory, a GGUF file, or a
// checkpoint of LoRA adapters only, whose base it loads: OpenAdapted) on
// backend b.
func loadModel(b compute.Backend, path string) (*model.Model, error) {
	return loadQuantized(b, path, 0, nil)
}

// loadQuantized is loadModel with the checkpoint's matrices quantized to
// dt as they are read (model.Quantize; 0 loads them as stored), and the
// load-time choices of cfg (sourceFor; nil: none).
func loadQuantized(b compute.Backend, path string, dt compute.DType, cfg *config.Config) (*model.Model, error) {
	var src, adapted model.Source
	var err error
	switch {
	case IsGGUF(path):
		src, err = gguf.OpenModel(path)
	case weights.IsAdaptersOnly(path):
		src, err = openAdapted(path)
		adapted = src
	default:
		src, err = model.OpenDir(path)
	}
	if err != nil {
		return nil, err
	}
	src = sourceFor(cfg, src)
	if dt != 0 {
		q, err := model.Quantize(src, dt)
		if err != nil {
			src.Close()
			return nil, err
		}
		src = q
	}
	m, err := model.LoadFrom(b, src) // closes src when it fails
	if err == nil && adapted != nil {
		// Its tensors were copies: free the base model and its adapted
		// set now rather than with the model (closing again is a no-op).
		err = adapted.Close()
		if err != nil {
			m.Close()
			m = nil
		}
	}
	return m, err
}

// LoadTokenizer reads the tokenizer of the checkpoint at path: a
// directory's tokenizer.json and tokenizer_config.json, or the vocabulary a
// GGUF file holds (once the file is known to hold a model clawrl runs, so
// that a file of another architecture is refused for that).
func LoadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	if !IsGGUF(path) {
		return tokenizer.Load(path)
	}
	m, err := gguf.OpenModel(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.Tokenizer()
}

// setChatTemplate gives tok the chat template of model.chat_template: a
// file's contents, or the value itself when it reads as a Jinja template
// ("{{" or "{%" in it); "" keeps the model's own.
func setChatTemplate(tok *tokenizer.Tokenizer, v string) error {
	if v == "" {
		return nil
	}
	src := v
	if b, err := os.ReadFile(v); err == nil {
		src = string(b)
	} else if !strings.Contains(v, "{{") && !strings.Contains(v, "{%") {
		return fmt.Errorf("model.chat_template: %w (give a Jinja template file, or the template itself)", err)
	}
	if err := tok.SetChatTemplate(src); err != nil {
		return fmt.Errorf("model.chat_template: %w", err)
	}
	return nil
}

// baseFiles are the files a trained checkpoint carries beside its weights
// so that it loads as its base does: config.json and, where the base has
// them, the tokenizer's files. A GGUF base has none: they are made from
// its metadata (gguf.Model.ConfigJSON) and its tokenizer
// (tokenizer.Tokenizer.TokenizerJSON and ConfigJSON).
func baseFiles(path string, tok *tokenizer.Tokenizer) (configJSON []byte, extra map[string][]byte, err error) {
	extra = map[string][]byte{}
	if IsGGUF(path) {
		m, err := gguf.OpenModel(path)
		if err != nil {
			return nil, nil, err
		}
		defer m.Close()
		extra["tokenizer.json"] = tok.TokenizerJSON()
		extra["tokenizer_config.json"] = tok.ConfigJSON()
		return m.ConfigJSON(), extra, nil
	}
	if configJSON, err = os.ReadFile(filepath.Join(path, "config.json")); err != nil {
		return nil, nil, err
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"} {
		if b, err := os.ReadFile(filepath.Join(path, name)); err == nil {
			extra[name] = b
		}
	}
	return configJSON, extra, nil
}
