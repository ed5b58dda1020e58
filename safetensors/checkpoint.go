package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Names of the files that hold a Hugging Face checkpoint's weights.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Checkpoint is the set of safetensors files of one checkpoint directory:
// either a single model.safetensors or the shards listed by
// model.safetensors.index.json. Tensors are looked up by name across shards.
type Checkpoint struct {
	dir   string
	desc  string           // the file that lists the tensors, for messages
	files []*File          // open shards
	where map[string]*File // tensor name → shard
}

type indexJSON struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// OpenDir opens the checkpoint in dir: model.safetensors.index.json and its
// shards if the index exists, model.safetensors otherwise.
func OpenDir(dir string) (*Checkpoint, error) {
	idx := filepath.Join(dir, IndexFile)
	if _, err := os.Stat(idx); err == nil {
		return OpenIndex(idx)
	}
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Stat(single); err != nil {
		return nil, fmt.Errorf("safetensors: %s: no %s or %s", dir, SingleFile, IndexFile)
	}
	f, err := Open(single)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{dir: dir, desc: single, files: []*File{f}, where: make(map[string]*File)}
	for name := range f.h.Tensors {
		c.where[name] = f
	}
	return c, nil
}

// OpenIndex opens a sharded checkpoint from its index file. Every shard
// named in the weight map is opened and validated; a tensor the index
// assigns to a shard that does not hold it is an error.
func OpenIndex(path string) (*Checkpoint, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx indexJSON
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors: %s: empty or missing weight_map", path)
	}
	dir := filepath.Dir(path)
	c := &Checkpoint{dir: dir, desc: path, where: make(map[string]*File, len(idx.WeightMap))}
	shards := make(map[string]*File)
	names := make([]string, 0, len(idx.WeightMap))
	for name := range idx.WeightMap {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		shard := idx.WeightMap[name]
		if shard == "" || shard != filepath.Base(shard) || strings.HasPrefix(shard, ".") {
			c.Close()
			return nil, fmt.Errorf("safetensors: %s: tensor %q: shard name %q must be a plain file name in the same directory", path, name, shard)
		}
		f, ok := shards[shard]
		if !ok {
			f, err = Open(filepath.Join(dir, shard))
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("%w (listed in %s)", err, path)
			}
			shards[shard] = f
			c.files = append(c.files, f)
		}
		if _, ok := f.h.Tensors[name]; !ok {
			c.Close()
			return nil, fmt.Errorf("safetensors: %s: tensor %q is listed in %s but the shard does not hold it", f.path, name, path)
		}
		c.where[name] = f
	}
	return c, nil
}

// Dir is the checkpoint directory.
func (c *Checkpoint) Dir() string { return c.dir }

// Names lists all tensors in sorted order.
func (c *Checkpoint) Names() []string {
	names := make([]string, 0, len(c.where))
	for n := range c.where {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Files lists the open shards.
func (c *Checkpoint) Files() []*File { return c.files }

// Find returns the file that holds the named tensor and its description, or
// an error naming the file that lists the checkpoint's tensors.
func (c *Checkpoint) Find(name string) (*File, TensorInfo, error) {
	f, ok := c.where[name]
	if !ok {
		return nil, TensorInfo{}, fmt.Errorf("safetensors: %s: tensor %q not found", c.desc, name)
	}
	return f, f.h.Tensors[name], nil
}

// Float32 reads the named tensor as float32 (see File.Float32).
func (c *Checkpoint) Float32(name string) ([]float32, error) {
	f, _, err := c.Find(name)
	if err != nil {
		return nil, err
	}
	return f.Float32(name)
}

// Uint16 reads the bits of a BF16 or F16 tensor (see File.Uint16).
func (c *Checkpoint) Uint16(name string) ([]uint16, error) {
	f, _, err := c.Find(name)
	if err != nil {
		return nil, err
	}
	return f.Uint16(name)
}

// Close closes every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.files {
		errs = append(errs, f.Close())
	}
	c.files, c.where = nil, nil
	return errors.Join(errs...)
}
