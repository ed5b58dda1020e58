package weights

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
)

var tinySpec = model.RandomSpec{Hidden: 16, Intermediate: 32, Layers: 1, Heads: 2, Vocab: 32, MaxPositions: 64, DType: "float32", Seed: 3}

// sourceFiles writes a tiny random model and returns checkpoint files
// copying its config.json and model.safetensors, plus a small trainer
// state.
func sourceFiles(t *testing.T) []File {
	t.Helper()
	src := t.TempDir()
	if err := model.WriteRandomCheckpoint(src, tinySpec); err != nil {
		t.Fatal(err)
	}
	copyOf := func(path string) func(io.Writer) error {
		return func(w io.Writer) error {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			_, err = w.Write(b)
			return err
		}
	}
	return []File{
		{Name: ConfigFile, Write: copyOf(filepath.Join(src, ConfigFile))},
		{Name: ModelFile, Write: copyOf(filepath.Join(src, ModelFile))},
		{Name: StateTensorsFile, Create: func(path string) error {
			return safetensors.WriteFile(path, []safetensors.WriteTensor{
				{Name: "adam.m.x", DType: safetensors.F32, Shape: []int{2}, Data: safetensors.EncodeFloat32([]float32{1, 2})},
			}, nil)
		}},
		{Name: StateJSONFile, Write: func(w io.Writer) error { _, err := w.Write([]byte(`{"step":3}`)); return err }},
	}
}

func info(n uint64) Info {
	return Info{Version: n, Parent: n - 1, Created: time.Unix(1000, 0), Meta: Meta{Step: int64(n), Loss: 0.5}}
}

func TestSaveOpen(t *testing.T) {
	root := t.TempDir()
	files := sourceFiles(t)
	c, err := Save(root, info(7), files, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Dir() != filepath.Join(root, "v00000007") {
		t.Fatalf("checkpoint dir %s", c.Dir())
	}
	got, err := Open(c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if i := got.Info(); i.Version != 7 || i.Parent != 6 || i.Meta.Step != 7 || !i.Created.Equal(time.Unix(1000, 0)) {
		t.Fatalf("info %+v", i)
	}
	b, err := got.ReadFile(StateJSONFile)
	if err != nil || string(b) != `{"step":3}` {
		t.Fatalf("state json %q, %v", b, err)
	}
	// The checkpoint is a model directory model.Load accepts.
	if _, err := model.LoadConfig(got.Dir()); err != nil {
		t.Fatal(err)
	}
	if _, err := safetensors.OpenDir(got.Dir()); err != nil {
		t.Fatal(err)
	}
	// No temporary directories are left behind.
	ents, _ := os.ReadDir(root)
	if len(ents) != 1 {
		t.Fatalf("root holds %d entries, want 1", len(ents))
	}
}

func TestSaveKeepsLastK(t *testing.T) {
	root := t.TempDir()
	files := sourceFiles(t)
	// An interrupted save leaves a temporary directory; the next Save
	// removes it.
	if err := os.Mkdir(filepath.Join(root, ".tmp-v00000002-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	for n := uint64(1); n <= 5; n++ {
		if _, err := Save(root, info(n), files, 3); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 3 || ns[0] != 5 || ns[2] != 3 {
		t.Fatalf("kept %v, want [5 4 3]", ns)
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}

func TestSaveReplacesSameVersion(t *testing.T) {
	root := t.TempDir()
	files := sourceFiles(t)
	if _, err := Save(root, info(4), files, 0); err != nil {
		t.Fatal(err)
	}
	i := info(4)
	i.Meta.Note = "again"
	if _, err := Save(root, i, files, 0); err != nil {
		t.Fatal(err)
	}
	c, err := Open(filepath.Join(root, "v00000004"))
	if err != nil || c.Info().Meta.Note != "again" {
		t.Fatalf("replaced checkpoint: %v, %v", c, err)
	}
}

func TestSaveWriteError(t *testing.T) {
	root := t.TempDir()
	files := []File{{Name: ConfigFile, Write: func(io.Writer) error { return io.ErrUnexpectedEOF }}}
	if _, err := Save(root, info(1), files, 0); err == nil {
		t.Fatal("Save with a failing file succeeded")
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 0 {
		t.Fatalf("failed save left %d entries", len(ents))
	}
}

// rewriteManifest recomputes the manifest's sizes and checksums, so that a
// test can damage a file in ways the checksum alone would not reveal.
func rewriteManifest(t *testing.T, dir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for i, f := range m.Files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		m.Files[i].Size, m.Files[i].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
	}
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedCheckpointFallsBack damages the newest of two checkpoints in
// each way the issue lists and checks that Open refuses it with a message
// naming the path and the reason, and that OpenLatest falls back to the
// older one.
func TestDamagedCheckpointFallsBack(t *testing.T) {
	modelPath := func(dir string) string { return filepath.Join(dir, ModelFile) }
	for _, tt := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		path   func(dir string) string // the path the error must name
		reason string
	}{
		{"truncated file", func(t *testing.T, dir string) {
			p := modelPath(dir)
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, modelPath, "truncated"},
		{"checksum mismatch", func(t *testing.T, dir string) {
			p := modelPath(dir)
			b, _ := os.ReadFile(p)
			b[len(b)-1] ^= 0x40
			os.WriteFile(p, b, 0o644)
		}, modelPath, "SHA-256"},
		{"missing file", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, StateJSONFile))
		}, func(dir string) string { return filepath.Join(dir, StateJSONFile) }, "missing"},
		{"missing manifest", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ManifestFile))
		}, func(dir string) string { return dir }, "no readable manifest"},
		{"bad header", func(t *testing.T, dir string) {
			p := modelPath(dir)
			b, _ := os.ReadFile(p)
			copy(b[8:], "[")
			os.WriteFile(p, b, 0o644)
			rewriteManifest(t, dir)
		}, modelPath, "header"},
		{"bad header length", func(t *testing.T, dir string) {
			p := modelPath(dir)
			b, _ := os.ReadFile(p)
			b[6] = 0x7f
			os.WriteFile(p, b, 0o644)
			rewriteManifest(t, dir)
		}, modelPath, "header length"},
		{"shape mismatch", func(t *testing.T, dir string) {
			// A config.json that implies another hidden size than the
			// tensors have.
			p := filepath.Join(dir, ConfigFile)
			b, _ := os.ReadFile(p)
			b = bytes.Replace(b, []byte(`"intermediate_size": 32`), []byte(`"intermediate_size": 48`), 1)
			os.WriteFile(p, b, 0o644)
			rewriteManifest(t, dir)
		}, modelPath, "has shape"},
		{"bad state header", func(t *testing.T, dir string) {
			p := filepath.Join(dir, StateTensorsFile)
			os.WriteFile(p, []byte("short"), 0o644)
			rewriteManifest(t, dir)
		}, func(dir string) string { return filepath.Join(dir, StateTensorsFile) }, "too short"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			files := sourceFiles(t)
			for n := uint64(1); n <= 2; n++ {
				if _, err := Save(root, info(n), files, 0); err != nil {
					t.Fatal(err)
				}
			}
			dir := filepath.Join(root, "v00000002")
			tt.damage(t, dir)
			_, err := Open(dir)
			if err == nil {
				t.Fatal("damaged checkpoint opened")
			}
			if msg := err.Error(); !strings.Contains(msg, tt.path(dir)) || !strings.Contains(msg, tt.reason) {
				t.Fatalf("error %q should name %s and say %q", msg, tt.path(dir), tt.reason)
			}
			c, refused, err := OpenLatest(root)
			if err != nil {
				t.Fatal(err)
			}
			if c.Info().Version != 1 || len(refused) != 1 {
				t.Fatalf("OpenLatest gave version %d with %d refused, want 1 and 1", c.Info().Version, len(refused))
			}
		})
	}
}

func TestOpenLatestEmptyAndAllBad(t *testing.T) {
	root := t.TempDir()
	c, refused, err := OpenLatest(filepath.Join(root, "none"))
	if c != nil || refused != nil || err != nil {
		t.Fatalf("missing root: %v %v %v", c, refused, err)
	}
	if _, err := Save(root, info(1), sourceFiles(t), 0); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(root, "v00000001", ModelFile))
	if _, _, err := OpenLatest(root); err == nil || !strings.Contains(err.Error(), "no usable checkpoint") {
		t.Fatalf("all damaged: %v", err)
	}
}

// TestSaveProtectsNewCheckpoint: a run that fell back from damaged newer
// checkpoints saves an older number; pruning keeps the one it just wrote.
func TestSaveProtectsNewCheckpoint(t *testing.T) {
	root := t.TempDir()
	files := sourceFiles(t)
	for _, n := range []uint64{5, 6, 3} {
		if _, err := Save(root, info(n), files, 2); err != nil {
			t.Fatal(err)
		}
	}
	ns, _ := List(root)
	if len(ns) != 2 || ns[0] != 6 || ns[1] != 3 {
		t.Fatalf("kept %v, want [6 3]", ns)
	}
}

func TestPrunedKeepsPinned(t *testing.T) {
	root := t.TempDir()
	files := []File{{Name: "config.json", Write: func(w io.Writer) error { _, err := w.Write([]byte("{}")); return err }}}
	for n := uint64(1); n <= 3; n++ {
		if _, err := Save(root, Info{Version: n}, files, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := Pin(root, 1); err != nil {
		t.Fatal(err)
	}
	if err := Pin(root, 9); err == nil {
		t.Error("pinned a checkpoint that does not exist")
	}
	for n := uint64(4); n <= 6; n++ {
		if _, err := Save(root, Info{Version: n}, files, 2); err != nil {
			t.Fatal(err)
		}
	}
	if ns, _ := List(root); !slices.Equal(ns, []uint64{6, 5, 1}) {
		t.Errorf("after pruning to 2 with v1 pinned: %v, want [6 5 1]", ns)
	}
	if err := Unpin(root, 1); err != nil || Pinned(root, 1) {
		t.Fatal(err)
	}
	if err := Prune(root, 2); err != nil {
		t.Fatal(err)
	}
	if ns, _ := List(root); !slices.Equal(ns, []uint64{6, 5}) {
		t.Errorf("after unpinning: %v", ns)
	}
}

// TestAdaptersOnly: a checkpoint of adapters only saves and opens without
// model.safetensors, keeps its base through Republish (a rollback), and
// is refused when it would not load: a relative base path, a
// model.safetensors beside it, no trainer state, a manifest edited to
// name a relative base.
func TestAdaptersOnly(t *testing.T) {
	without := func(files []File, names ...string) []File {
		return slices.DeleteFunc(slices.Clone(files), func(f File) bool { return slices.Contains(names, f.Name) })
	}
	all := sourceFiles(t)
	base := &AdapterBase{Path: "/models/base.gguf", Quantize: "auto"}
	withBase := func(n uint64, a *AdapterBase) Info {
		i := info(n)
		i.Adapters = a
		return i
	}
	root := t.TempDir()
	c, err := Save(root, withBase(3, base), without(all, ModelFile), 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Open(c.Dir())
	if err != nil || !got.AdaptersOnly() || *got.Manifest.Adapters != *base || !IsAdaptersOnly(c.Dir()) {
		t.Fatalf("open: %v %+v", err, got)
	}
	rb := got.Info()
	rb.Version, rb.Parent = 4, 3
	again, err := Republish(root, got, rb, 0)
	if err != nil || !again.AdaptersOnly() || *again.Manifest.Adapters != *base {
		t.Fatalf("republish: %v %+v", err, again)
	}
	if whole, err := Save(t.TempDir(), info(3), all, 0); err != nil || whole.AdaptersOnly() || IsAdaptersOnly(whole.Dir()) {
		t.Fatalf("a whole checkpoint: %v, adapters only %v", err, whole.AdaptersOnly())
	}

	for _, tc := range []struct {
		name  string
		base  *AdapterBase
		files []File
		want  string
	}{
		{"relative base", &AdapterBase{Path: "base.gguf"}, without(all, ModelFile), "not absolute"},
		{"weights beside", base, all, "no model.safetensors"},
		{"no trainer state", base, without(all, ModelFile, StateTensorsFile), "trainer state"},
	} {
		if _, err := Save(t.TempDir(), withBase(5, tc.base), tc.files, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: save: %v, want %q", tc.name, err, tc.want)
		}
	}

	// A manifest edited by hand is refused on open, naming it.
	mpath := filepath.Join(c.Dir(), ManifestFile)
	raw, _ := os.ReadFile(mpath)
	os.WriteFile(mpath, bytes.Replace(raw, []byte(`"/models/base.gguf"`), []byte(`"base.gguf"`), 1), 0o644)
	if _, err := Open(c.Dir()); err == nil || !strings.Contains(err.Error(), mpath) || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("a relative base in the manifest: %v", err)
	}
}
