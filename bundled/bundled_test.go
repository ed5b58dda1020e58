package bundled

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestDirExtractsOnce(t *testing.T) {
	root := t.TempDir()
	// Concurrent first uses all get one complete copy.
	dirs := make([]string, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range dirs {
		wg.Go(func() { dirs[i], errs[i] = DirIn(root) })
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Fatalf("DirIn: %q, %v (first %q)", dirs[i], errs[i], dirs[0])
		}
	}
	if filepath.Base(dirs[0]) != Name {
		t.Errorf("directory %s, want one named %s", dirs[0], Name)
	}
	for _, name := range Files {
		want, _ := fs.ReadFile(FS(), name)
		got, err := os.ReadFile(filepath.Join(dirs[0], name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: extracted copy differs (%v)", name, err)
		}
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Errorf("cache root holds %d entries, want 1 (no temporary leftovers)", len(entries))
	}
	// A damaged copy is replaced.
	if err := os.Truncate(filepath.Join(dirs[0], "config.json"), 3); err != nil {
		t.Fatal(err)
	}
	d, err := DirIn(root)
	if err != nil || d != dirs[0] || !complete(d) {
		t.Fatalf("after damage: %q, %v", d, err)
	}
}
