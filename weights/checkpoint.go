package weights

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/clawrl/clawrl/atomicfile"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/safetensors"
)

// Names of the files of a checkpoint directory.
const (
	ConfigFile       = "config.json"
	ModelFile        = safetensors.SingleFile // model.safetensors
	StateTensorsFile = "trainer_state.safetensors"
	StateJSONFile    = "trainer_state.json"
	ManifestFile     = "manifest.json"
)

// manifestFormat is the version of the manifest layout.
const manifestFormat = 1

// Manifest is a checkpoint's table of contents, written last: the version
// it holds and, for every other file, its size and SHA-256.
type Manifest struct {
	Format  int       `json:"format"`
	Version uint64    `json:"version"`
	Parent  uint64    `json:"parent"`
	Created time.Time `json:"created"`
	Meta    Meta      `json:"meta"`
	// Adapters, when set, says the checkpoint holds LoRA adapters only (in
	// its trainer state) over the base model it names, and no
	// model.safetensors.
	Adapters *AdapterBase `json:"adapters_over,omitempty"`
	Files    []FileEntry  `json:"files"`
}

// AdapterBase is the base model of a checkpoint that holds LoRA adapters
// only, as a PEFT adapter directory names its base: a LoRA checkpoint of a
// large model would otherwise carry every matrix merged in F32 (2.4 GB for
// a 0.6B model, whatever the adapters' 50 MB), and take as long to write.
// Loading such a checkpoint as a model loads the base as it was loaded for
// training and applies the adapters (package engine).
type AdapterBase struct {
	// Path is the base checkpoint (a directory or a GGUF file), absolute.
	Path string `json:"path"`
	// Quantize is model.quantize as it applied to the base while training
	// (auto, none, q8_0, q4_0, iq4_nl): the adapters were trained over the base
	// so quantized, and apply to it so loaded.
	Quantize string `json:"quantize,omitempty"`
}

// FileEntry describes one file of a checkpoint.
type FileEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// File is one file to write into a checkpoint. Its bytes come from Write,
// or, when Write is nil, Create makes the file at the path it is given (for
// writers that want a path, such as safetensors.WriteFile); Save then reads
// the file back for its checksum.
type File struct {
	Name   string
	Write  func(w io.Writer) error
	Create func(path string) error
}

// Info identifies the version a checkpoint holds.
type Info struct {
	Version, Parent uint64
	Created         time.Time
	Meta            Meta
	// Adapters, when set, makes the checkpoint one of LoRA adapters only
	// over that base (Manifest.Adapters): the files hold no
	// model.safetensors and must hold the trainer state.
	Adapters *AdapterBase
}

// InfoOf is the Info of a published version.
func InfoOf(v *Version) Info {
	return Info{Version: v.number, Parent: v.parent, Created: v.created, Meta: v.meta}
}

// dirName is the directory of version n under a checkpoint root.
func dirName(n uint64) string { return fmt.Sprintf("v%08d", n) }

// parseDirName reads the version number from a checkpoint directory name.
func parseDirName(name string) (uint64, bool) {
	if len(name) < 2 || name[0] != 'v' {
		return 0, false
	}
	n, err := strconv.ParseUint(name[1:], 10, 64)
	if err != nil || dirName(n) != name {
		return 0, false
	}
	return n, true
}

// Save writes a checkpoint of version info.Version under root (created if
// needed) from files, then deletes all but the newest keep checkpoints
// (keep ≤ 0 keeps all). The files go into a temporary directory, each
// fsynced, followed by manifest.json (sizes and SHA-256 of the others) and
// an fsync of the directory; the directory is then renamed to
// root/vNNNNNNNN and root is fsynced. A checkpoint directory that exists is
// therefore complete; a crash leaves at most a temporary directory, which
// the next Save removes. An existing checkpoint of the same version (one
// refused as damaged, say) is replaced. One process at a time may save
// under a root (Save also removes other saves' temporary directories).
func Save(root string, info Info, files []File, keep int) (*Checkpoint, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("weights: checkpoint: %w", err)
	}
	seen := map[string]bool{ManifestFile: true}
	for _, f := range files {
		if f.Name == "" || f.Name != filepath.Base(f.Name) || strings.HasPrefix(f.Name, ".") || seen[f.Name] {
			return nil, fmt.Errorf("weights: checkpoint: bad or repeated file name %q", f.Name)
		}
		if (f.Write == nil) == (f.Create == nil) {
			return nil, fmt.Errorf("weights: checkpoint: file %q needs exactly one of Write and Create", f.Name)
		}
		seen[f.Name] = true
	}
	name := dirName(info.Version)
	tmp, err := os.MkdirTemp(root, ".tmp-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("weights: checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp) // after a successful rename, nothing is left there
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("weights: checkpoint: %w", err)
	}

	if a := info.Adapters; a != nil {
		if !filepath.IsAbs(a.Path) {
			return nil, fmt.Errorf("weights: checkpoint: the adapters' base model path %q is not absolute", a.Path)
		}
		if seen[ModelFile] || !seen[StateJSONFile] || !seen[StateTensorsFile] {
			return nil, fmt.Errorf("weights: checkpoint: a checkpoint of adapters only holds the trainer state and no %s", ModelFile)
		}
	}
	m := Manifest{Format: manifestFormat, Version: info.Version, Parent: info.Parent, Created: info.Created.UTC(), Meta: info.Meta, Adapters: info.Adapters}
	for _, f := range files {
		var e FileEntry
		var err error
		if f.Write != nil {
			e, err = writeFile(filepath.Join(tmp, f.Name), f.Write)
		} else {
			e, err = createFile(filepath.Join(tmp, f.Name), f.Create)
		}
		if err != nil {
			return nil, fmt.Errorf("weights: checkpoint %s: %w", filepath.Join(root, name), err)
		}
		e.Name = f.Name
		m.Files = append(m.Files, e)
	}
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("weights: checkpoint: manifest: %w", err)
	}
	mj = append(mj, '\n')
	if _, err := writeFile(filepath.Join(tmp, ManifestFile), func(w io.Writer) error { _, err := w.Write(mj); return err }); err != nil {
		return nil, fmt.Errorf("weights: checkpoint %s: %w", filepath.Join(root, name), err)
	}
	// ReplaceDir syncs tmp, renames it to final and syncs root. An old
	// directory of the same version is moved aside first (rename cannot
	// replace a non-empty directory, and the old one must stay whole until
	// the new one is in place), then removed.
	final := filepath.Join(root, name)
	aside := filepath.Join(root, ".old-"+name+"-"+filepath.Base(tmp)[len(".tmp-"+name+"-"):])
	if err := atomicfile.ReplaceDir(tmp, final, aside); err != nil {
		return nil, fmt.Errorf("weights: checkpoint: %w", err)
	}
	if err := prune(root, keep, info.Version); err != nil {
		return nil, err
	}
	return &Checkpoint{dir: final, Manifest: m}, nil
}

// writeFile creates path with the bytes of write (atomicfile.WriteFile:
// fsynced), hashing them on the way.
func writeFile(path string, write func(io.Writer) error) (FileEntry, error) {
	h := sha256.New()
	var n int64
	err := atomicfile.WriteFile(path, 0o644, func(w io.Writer) error {
		cw := &countWriter{w: io.MultiWriter(w, h)}
		err := write(cw)
		n = cw.n
		return err
	})
	if err != nil {
		return FileEntry{}, err
	}
	return FileEntry{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// createFile lets create make path, then fsyncs it and hashes it.
func createFile(path string, create func(string) error) (FileEntry, error) {
	if err := create(path); err != nil {
		return FileEntry{}, fmt.Errorf("%s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return FileEntry{}, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return FileEntry{}, fmt.Errorf("%s: fsync: %w", path, err)
	}
	h := sha256.New()
	n, err := io.Copy(h, bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return FileEntry{}, fmt.Errorf("%s: reading back: %w", path, err)
	}
	return FileEntry{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// List returns the version numbers of the checkpoint directories under
// root, newest first. It does not verify them. A missing root has none.
func List(root string) ([]uint64, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("weights: checkpoints: %w", err)
	}
	var ns []uint64
	for _, e := range ents {
		if n, ok := parseDirName(e.Name()); ok && e.IsDir() {
			ns = append(ns, n)
		}
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] > ns[j] })
	return ns, nil
}

// Prune deletes all but the newest keep checkpoints under root (keep ≤ 0
// deletes none) and pinned ones (Pin), and the temporary directories of
// interrupted saves.
func Prune(root string, keep int) error { return prune(root, keep, 0) }

// prune is Prune that never deletes checkpoint number protect (0: none),
// which counts among the keep: Save protects the checkpoint it just wrote
// even when newer numbers (damaged ones a run fell back from) exist.
func prune(root string, keep int, protect uint64) error {
	ents, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("weights: checkpoints: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-v") || strings.HasPrefix(e.Name(), ".old-v") {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if keep > 0 {
		ns, err := List(root)
		if err != nil {
			return err
		}
		kept := 0
		if protect != 0 && slices.Contains(ns, protect) {
			kept = 1
		}
		for _, n := range ns {
			if n == protect || Pinned(root, n) {
				continue // pinned ones do not count among the keep
			}
			if kept < keep {
				kept++
				continue
			}
			if err := os.RemoveAll(filepath.Join(root, dirName(n))); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("weights: pruning checkpoints: %w", err)
	}
	return nil
}

// Checkpoint is a verified checkpoint directory.
type Checkpoint struct {
	dir      string
	Manifest Manifest
}

// Dir is the checkpoint directory; model.Load(backend, Dir()) loads the
// version's weights.
func (c *Checkpoint) Dir() string { return c.dir }

// Path is the path of one of the checkpoint's files.
func (c *Checkpoint) Path(name string) string { return filepath.Join(c.dir, name) }

// Info is the version the checkpoint holds.
func (c *Checkpoint) Info() Info {
	m := c.Manifest
	return Info{Version: m.Version, Parent: m.Parent, Created: m.Created, Meta: m.Meta, Adapters: m.Adapters}
}

// AdaptersOnly reports whether the checkpoint holds LoRA adapters only,
// over the base Manifest.Adapters names, and no model.safetensors.
func (c *Checkpoint) AdaptersOnly() bool { return c.Manifest.Adapters != nil }

// Has reports whether the checkpoint holds a file of that name.
func (c *Checkpoint) Has(name string) bool {
	for _, f := range c.Manifest.Files {
		if f.Name == name {
			return true
		}
	}
	return false
}

// ReadFile returns the contents of one of the checkpoint's files,
// checking them against the manifest again (the file may have changed
// since Open).
func (c *Checkpoint) ReadFile(name string) ([]byte, error) {
	for _, f := range c.Manifest.Files {
		if f.Name != name {
			continue
		}
		path := c.Path(name)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("weights: checkpoint: %w", err)
		}
		sum := sha256.Sum256(b)
		if int64(len(b)) != f.Size || hex.EncodeToString(sum[:]) != f.SHA256 {
			return nil, fmt.Errorf("weights: checkpoint: %s: contents changed since the checkpoint was verified", path)
		}
		return b, nil
	}
	return nil, fmt.Errorf("weights: checkpoint %s: no file %s in its manifest", c.dir, name)
}

// Open verifies the checkpoint in dir and returns it. It refuses, with an
// error naming the path and the reason: a missing or unreadable manifest;
// a file listed in it that is missing, of another size (truncated) or of
// another SHA-256; a checkpoint without config.json or model.safetensors
// (one of adapters only: without the trainer state); a config.json the
// model package rejects; a safetensors file whose header fails
// validation; and a model.safetensors that lacks a tensor config.json
// implies or holds it in another shape. It does not open the base model
// of a checkpoint of adapters only.
func Open(dir string) (*Checkpoint, error) {
	mpath := filepath.Join(dir, ManifestFile)
	raw, err := os.ReadFile(mpath)
	if err != nil {
		return nil, fmt.Errorf("weights: checkpoint %s: no readable manifest: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("weights: checkpoint: %s: bad manifest: %w", mpath, err)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("weights: checkpoint: %s: manifest format %d, want %d", mpath, m.Format, manifestFormat)
	}
	if n, ok := parseDirName(filepath.Base(dir)); ok && n != m.Version {
		return nil, fmt.Errorf("weights: checkpoint: %s: manifest is for version %d, the directory for version %d", mpath, m.Version, n)
	}
	c := &Checkpoint{dir: dir, Manifest: m}
	for _, f := range m.Files {
		if f.Name != filepath.Base(f.Name) || strings.HasPrefix(f.Name, ".") {
			return nil, fmt.Errorf("weights: checkpoint: %s: bad file name %q", mpath, f.Name)
		}
		if err := verifyFile(c.Path(f.Name), f); err != nil {
			return nil, fmt.Errorf("weights: checkpoint: %w", err)
		}
	}
	need := []string{ConfigFile, ModelFile}
	if a := m.Adapters; a != nil {
		if !filepath.IsAbs(a.Path) {
			return nil, fmt.Errorf("weights: checkpoint: %s: the adapters' base model path %q is not absolute", mpath, a.Path)
		}
		if c.Has(ModelFile) {
			return nil, fmt.Errorf("weights: checkpoint: %s: a checkpoint of adapters only lists %s", mpath, ModelFile)
		}
		need = []string{ConfigFile, StateJSONFile, StateTensorsFile}
	}
	for _, name := range need {
		if !c.Has(name) {
			return nil, fmt.Errorf("weights: checkpoint: %s: manifest lists no %s", mpath, name)
		}
	}
	if m.Adapters != nil {
		if _, err := model.LoadConfig(dir); err != nil {
			return nil, fmt.Errorf("weights: checkpoint: %w", err)
		}
	} else if err := verifyModel(dir); err != nil {
		return nil, fmt.Errorf("weights: checkpoint: %w", err)
	}
	if c.Has(StateTensorsFile) {
		f, err := safetensors.Open(c.Path(StateTensorsFile))
		if err != nil {
			return nil, fmt.Errorf("weights: checkpoint: %w", err)
		}
		f.Close()
	}
	return c, nil
}

// VerifyFile checks the file at path against its manifest entry (size and
// SHA-256), for a reader that uses a checkpoint's file in place long after
// Open verified it.
func VerifyFile(path string, e FileEntry) error { return verifyFile(path, e) }

// verifyFile checks one file's size and SHA-256 against its entry.
func verifyFile(path string, e FileEntry) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: missing (listed in the manifest)", path)
		}
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != e.Size {
		return fmt.Errorf("%s: %d bytes, the manifest says %d (truncated or overwritten)", path, st.Size(), e.Size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return fmt.Errorf("%s: reading: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != e.SHA256 {
		return fmt.Errorf("%s: SHA-256 %s, the manifest says %s (corrupted)", path, got, e.SHA256)
	}
	return nil
}

// verifyModel checks that config.json parses and that model.safetensors
// has a valid header holding every tensor the config implies, in its
// shape.
func verifyModel(dir string) error {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, ModelFile)
	f, err := safetensors.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, spec := range cfg.FileTensorSpecs() {
		info, ok := f.Info(spec.Name)
		if !ok {
			return fmt.Errorf("%s: tensor %q missing (config.json needs it)", path, spec.Name)
		}
		if !slices.Equal(info.Shape, spec.Shape) {
			return fmt.Errorf("%s: tensor %q has shape %v, config.json implies %v", path, spec.Name, info.Shape, spec.Shape)
		}
	}
	return nil
}

// IsAdaptersOnly reports whether dir looks like a checkpoint of LoRA
// adapters only (its manifest names a base model), without verifying it:
// for loaders that must choose how to open a path. Open verifies.
func IsAdaptersOnly(dir string) bool {
	a, _ := AdaptersOf(dir)
	return a != nil
}

// AdaptersOf reads the base model a checkpoint of LoRA adapters only
// names, and its version, from dir's manifest alone, without verifying
// the checkpoint (Open does, hashing every file): nil for a checkpoint
// that holds its weights, or a directory that is not one.
func AdaptersOf(dir string) (*AdapterBase, uint64) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, 0
	}
	var m struct {
		Version  uint64       `json:"version"`
		Adapters *AdapterBase `json:"adapters_over"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return nil, 0
	}
	return m.Adapters, m.Version
}

// OpenLatest returns the newest checkpoint under root that Open accepts,
// with one error for every newer checkpoint it refused (oldest last), so
// the caller can log why. It returns a nil checkpoint and no error when
// root holds no checkpoint at all, and an error when it holds some but
// none passes.
func OpenLatest(root string) (*Checkpoint, []error, error) {
	ns, err := List(root)
	if err != nil {
		return nil, nil, err
	}
	var refused []error
	for _, n := range ns {
		c, err := Open(filepath.Join(root, dirName(n)))
		if err == nil {
			return c, refused, nil
		}
		refused = append(refused, err)
	}
	if len(refused) > 0 {
		return nil, refused, fmt.Errorf("weights: no usable checkpoint under %s: %w", root, errors.Join(refused...))
	}
	return nil, nil, nil
}
