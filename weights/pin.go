package weights

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/clawrl/clawrl/atomicfile"
)

// PinFile marks a checkpoint directory as pinned: pruning keeps it
// whatever its age. It is not part of the manifest (pinning does not
// change the checkpoint).
const PinFile = "PINNED"

// DirOf is the directory of checkpoint n under root (which Open reads).
func DirOf(root string, n uint64) string { return filepath.Join(root, dirName(n)) }

// Pin marks checkpoint n under root as pinned.
func Pin(root string, n uint64) error {
	dir := filepath.Join(root, dirName(n))
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("weights: pin: no checkpoint of version %d under %s: %w", n, root, err)
	}
	if err := os.WriteFile(filepath.Join(dir, PinFile), []byte("pinned\n"), 0o644); err != nil {
		return fmt.Errorf("weights: pin: %w", err)
	}
	return atomicfile.SyncDir(dir)
}

// Unpin removes the pin of checkpoint n under root.
func Unpin(root string, n uint64) error {
	err := os.Remove(filepath.Join(root, dirName(n), PinFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("weights: unpin: %w", err)
	}
	return nil
}

// Pinned reports whether checkpoint n under root is pinned.
func Pinned(root string, n uint64) bool {
	_, err := os.Stat(filepath.Join(root, dirName(n), PinFile))
	return err == nil
}
