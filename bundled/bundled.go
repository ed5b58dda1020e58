// Package bundled holds the small model that clawrl serves when no other
// is configured (model.path empty, no --model): a Llama-architecture
// checkpoint of about 9M parameters with its own vocabulary and chat
// template, trained from scratch on the CPU by `clawrl pretrain` (package
// pretrain) and embedded in the binary. model/TRAINING.md says how it was
// made and how well it does; it is reproduced with
//
//	clawrl pretrain --out bundled/model --seed 1
//
// The engine loads checkpoints from a directory (the weights are mapped
// from the file), so Dir extracts the embedded files once into the user's
// cache, under a name derived from their contents, and returns that
// directory; later calls and later runs reuse it.
package bundled

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/clawrl/clawrl/atomicfile"
)

//go:embed model/config.json model/generation_config.json model/model.safetensors model/tokenizer.json model/tokenizer_config.json
var files embed.FS

// Name is the name of the extracted model directory, which the server
// reports as the model's id.
const Name = "clawrl-small"

// Files are the checkpoint's files, in the order they are extracted.
var Files = []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}

// FS returns the embedded checkpoint files (at the root of the FS).
func FS() fs.FS {
	sub, err := fs.Sub(files, "model")
	if err != nil {
		panic(err) // the directory is embedded
	}
	return sub
}

var hash = sync.OnceValue(func() string {
	h := sha256.New()
	for _, name := range Files {
		b, err := fs.ReadFile(FS(), name)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
})

// Hash identifies the embedded checkpoint: the SHA-256 of its files.
func Hash() string { return hash() }

// Dir returns a directory holding the bundled checkpoint, extracting it
// into the user's cache directory ($XDG_CACHE_HOME, else ~/.cache; the
// system's temporary directory when there is none) if it is not there yet.
func Dir() (string, error) {
	root, err := os.UserCacheDir()
	if err != nil || root == "" {
		root = os.TempDir()
	}
	return DirIn(filepath.Join(root, "clawrl"))
}

// DirIn is Dir with the cache root given: the checkpoint goes to
// root/bundled-<hash>/clawrl-small. Extraction writes into a temporary
// directory beside it, syncs it and renames it into place
// (atomicfile.ReplaceDir), so that a crash or a concurrent process never
// leaves or sees a partial copy.
func DirIn(root string) (string, error) {
	final := filepath.Join(root, "bundled-"+Hash()[:16])
	dir := filepath.Join(final, Name)
	if complete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("bundled model: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".bundled-*")
	if err != nil {
		return "", fmt.Errorf("bundled model: %w", err)
	}
	defer os.RemoveAll(tmp) // after a successful rename, nothing is left there
	if err := extract(filepath.Join(tmp, Name)); err != nil {
		return "", err
	}
	err = atomicfile.ReplaceDir(tmp, final, "")
	if err != nil && !complete(dir) {
		// Not another process that won the race (its copy would be as
		// good), but a stale, incomplete copy (an older layout, a damaged
		// cache): replace it.
		err = atomicfile.ReplaceDir(tmp, final, tmp+".old")
	}
	if !complete(dir) {
		if err != nil {
			return "", fmt.Errorf("bundled model: %w", err)
		}
		return "", errors.New("bundled model: the extracted copy is incomplete")
	}
	return dir, nil
}

// complete reports whether dir holds every file with its embedded size.
func complete(dir string) bool {
	for _, name := range Files {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return false
		}
		want, err := fs.Stat(FS(), name)
		if err != nil || fi.Size() != want.Size() {
			return false
		}
	}
	return true
}

// extract writes the embedded files into dir, each synced (ReplaceDir
// syncs dir's parent).
func extract(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bundled model: %w", err)
	}
	for _, name := range Files {
		if err := copyFile(filepath.Join(dir, name), name); err != nil {
			return fmt.Errorf("bundled model: %w", err)
		}
	}
	return nil
}

func copyFile(dst, name string) error {
	src, err := FS().Open(name)
	if err != nil {
		return err
	}
	defer src.Close()
	return atomicfile.WriteFile(dst, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
}
