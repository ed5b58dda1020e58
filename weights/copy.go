package weights

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Republish writes checkpoint c again under root as version info.Version
// (its files byte for byte, a new manifest): a rollback to c that keeps
// version numbers monotone. keep prunes as Save does.
func Republish(root string, c *Checkpoint, info Info, keep int) (*Checkpoint, error) {
	files := make([]File, 0, len(c.Manifest.Files))
	for _, f := range c.Manifest.Files {
		path := c.Path(f.Name)
		files = append(files, File{Name: f.Name, Write: func(w io.Writer) error {
			src, err := os.Open(path)
			if err != nil {
				return err
			}
			defer src.Close()
			n, err := io.Copy(w, src)
			if err == nil && n != f.Size {
				err = fmt.Errorf("%s: %d bytes, the manifest says %d", path, n, f.Size)
			}
			return err
		}})
	}
	out, err := Save(root, info, files, keep)
	if err != nil {
		return nil, fmt.Errorf("weights: republishing %s: %w", filepath.Base(c.Dir()), err)
	}
	return out, nil
}
