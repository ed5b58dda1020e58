package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/clawrl/clawrl/atomicfile"
)

// WriteTensor is one tensor to write. Its bytes come from Data, or, when
// Data is nil, from Stream, which must write exactly the tensor's size in
// little-endian bytes (so that large checkpoints need not sit in memory).
type WriteTensor struct {
	Name   string
	DType  DType
	Shape  []int
	Data   []byte
	Stream func(w io.Writer) error
}

// Size is the tensor's size in bytes in the file (its dtype's size times its
// elements).
func (t *WriteTensor) Size() int64 {
	n := int64(t.DType.Size())
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// WriteFile writes tensors and metadata to path as a safetensors file,
// atomically (see AtomicWriteFile). Tensors are laid out by descending
// element size, then name, so every tensor starts aligned for its dtype;
// the header is padded with spaces to a multiple of 8 bytes.
func WriteFile(path string, tensors []WriteTensor, metadata map[string]string) error {
	ts := make([]*WriteTensor, len(tensors))
	seen := make(map[string]bool, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		switch {
		case t.Name == "" || t.Name == "__metadata__":
			return fmt.Errorf("safetensors: %s: bad tensor name %q", path, t.Name)
		case seen[t.Name]:
			return fmt.Errorf("safetensors: %s: tensor %q given twice", path, t.Name)
		case t.DType.Size() == 0:
			return fmt.Errorf("safetensors: %s: tensor %q: unknown dtype %q", path, t.Name, t.DType)
		case t.Data == nil && t.Stream == nil:
			return fmt.Errorf("safetensors: %s: tensor %q has neither Data nor Stream", path, t.Name)
		case t.Data != nil && int64(len(t.Data)) != t.Size():
			return fmt.Errorf("safetensors: %s: tensor %q: %d bytes of data for shape %s of %s (%d bytes)", path, t.Name, len(t.Data), describe(t.Shape), t.DType, t.Size())
		}
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("safetensors: %s: tensor %q: negative dimension in shape %s", path, t.Name, describe(t.Shape))
			}
		}
		seen[t.Name] = true
		ts[i] = t
	}
	sort.SliceStable(ts, func(i, j int) bool {
		if a, b := ts[i].DType.Size(), ts[j].DType.Size(); a != b {
			return a > b
		}
		return ts[i].Name < ts[j].Name
	})

	header := make(map[string]any, len(ts)+1)
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, t := range ts {
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": shape, "data_offsets": []int64{off, off + t.Size()}}
		off += t.Size()
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("safetensors: %s: encoding header: %w", path, err)
	}
	for (8+len(hj))%8 != 0 {
		hj = append(hj, ' ')
	}

	return AtomicWriteFile(path, func(w io.Writer) error {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(hj)))
		if _, err := w.Write(n[:]); err != nil {
			return err
		}
		if _, err := w.Write(hj); err != nil {
			return err
		}
		for _, t := range ts {
			if t.Data != nil {
				if _, err := w.Write(t.Data); err != nil {
					return err
				}
				continue
			}
			cw := &countWriter{w: w}
			if err := t.Stream(cw); err != nil {
				return fmt.Errorf("tensor %q: %w", t.Name, err)
			}
			if cw.n != t.Size() {
				return fmt.Errorf("tensor %q: wrote %d bytes, shape %s of %s needs %d", t.Name, cw.n, describe(t.Shape), t.DType, t.Size())
			}
		}
		return nil
	})
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

// AtomicWriteFile is atomicfile.WriteFile with mode 0644 and errors
// prefixed "safetensors: ": path either keeps its old contents or has all
// the new ones (temporary file, fsync, rename, fsync of the directory).
func AtomicWriteFile(path string, write func(w io.Writer) error) error {
	if err := atomicfile.WriteFile(path, 0o644, write); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// WriteIndex writes a model.safetensors.index.json that maps each tensor
// name to the shard file (a base name in the same directory) holding it.
func WriteIndex(path string, weightMap map[string]string, totalSize int64) error {
	idx := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": totalSize}, weightMap}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("safetensors: %s: %w", path, err)
	}
	b = append(b, '\n')
	if err := atomicfile.WriteBytes(path, 0o644, b); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// EncodeFloat32 returns the little-endian bytes of v.
func EncodeFloat32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// EncodeUint16 returns the little-endian bytes of v (BF16 or F16 bits).
func EncodeUint16(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}
