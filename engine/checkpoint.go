package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/config"
)

// ModelDir resolves the checkpoint directory: flag, else model.path, else
// the bundled model, extracted once into the user's cache.
func ModelDir(cfg *config.Config, flag string, log zerolog.Logger) (string, error) {
	dir := flag
	if dir == "" {
		dir = cfg.Model.Path
	}
	if dir == "" {
		d, err := bundled.Dir()
		if err != nil {
			return "", fmt.Errorf("%w; pass --model DIR or set model.path to a Hugging Face checkpoint directory", err)
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

// BaseFingerprint identifies a base checkpoint directory: the bundled
// model by its embedded hash, any other by the SHA-256 of its config, the
// sizes of its weight files, their headers and their first and last MiB
// (reading a multi-GB checkpoint whole at every start would cost seconds).
func BaseFingerprint(dir string) (string, error) {
	if IsBundled(dir) {
		return bundled.Name + "-" + bundled.Hash()[:16], nil
	}
	h := sha256.New()
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
