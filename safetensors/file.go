package safetensors

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File is an open safetensors file. Views returned by its accessors point
// into a read-only memory mapping: they must not be written to, and must not
// be used after Close. The file must not be truncated while it is open
// (reading a mapped page past the new end faults); replace checkpoints by
// renaming a new file over the old one, as WriteFile does.
type File struct {
	path   string
	data   []byte // the whole file: a mapping, or a heap copy if mmap failed
	mapped bool
	h      *Header
}

// Open maps path read-only and validates its header. If the file cannot be
// mapped it is read into memory instead.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors: %s: not a regular file", path)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors: %s: file is %d bytes, too short for the 8-byte header length", path, size)
	}
	if size != int64(int(size)) {
		return nil, fmt.Errorf("safetensors: %s: file of %d bytes is too large for this platform", path, size)
	}
	sf := &File{path: path}
	if data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err == nil {
		sf.data, sf.mapped = data, true
	} else {
		sf.data = make([]byte, size)
		if _, err := io.ReadFull(f, sf.data); err != nil {
			return nil, fmt.Errorf("safetensors: %s: reading: %w", path, err)
		}
	}
	h, err := ParseHeader(sf.data)
	if err != nil {
		sf.Close()
		return nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	sf.h = h
	return sf, nil
}

// Path is the file's path as given to Open.
func (f *File) Path() string { return f.path }

// Header is the file's validated header.
func (f *File) Header() *Header { return f.h }

// Metadata is the header's __metadata__ map (nil when absent).
func (f *File) Metadata() map[string]string { return f.h.Metadata }

// Names lists the tensors in sorted order.
func (f *File) Names() []string { return f.h.Names() }

// Info describes the named tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	t, ok := f.h.Tensors[name]
	return t, ok
}

// Mapped reports whether the file is memory-mapped (rather than read into
// memory because mapping failed).
func (f *File) Mapped() bool { return f.mapped }

func (f *File) lookup(name string) (TensorInfo, error) {
	if f.data == nil {
		return TensorInfo{}, fmt.Errorf("safetensors: %s: file is closed", f.path)
	}
	t, ok := f.h.Tensors[name]
	if !ok {
		return TensorInfo{}, fmt.Errorf("safetensors: %s: tensor %q not found", f.path, name)
	}
	return t, nil
}

// Bytes returns the raw little-endian bytes of the named tensor (a view).
func (f *File) Bytes(name string) ([]byte, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	return f.bytes(t), nil
}

func (f *File) bytes(t TensorInfo) []byte {
	lo, hi := f.h.DataStart+t.Begin, f.h.DataStart+t.End
	return f.data[lo:hi:hi]
}

func (f *File) unsupported(t TensorInfo) error {
	return fmt.Errorf("safetensors: %s: tensor %q: %w %s (want F32, BF16 or F16)", f.path, t.Name, ErrUnsupportedDType, t.DType)
}

// littleEndian reports whether the host stores numbers little-endian, so
// that file bytes can be viewed as numbers in place.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Float32 returns the named tensor as float32 values: a view of the file for
// an aligned F32 tensor, otherwise a copy (BF16 and F16 are widened
// exactly).
func (f *File) Float32(name string) ([]float32, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	b := f.bytes(t)
	n := int(t.Len())
	switch t.DType {
	case F32:
		if n == 0 {
			return []float32{}, nil
		}
		if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
			return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), nil
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	case BF16, F16:
		out := make([]float32, n)
		for i := range out {
			h := binary.LittleEndian.Uint16(b[2*i:])
			if t.DType == BF16 {
				out[i] = BF16ToFloat32(h)
			} else {
				out[i] = F16ToFloat32(h)
			}
		}
		return out, nil
	}
	return nil, f.unsupported(t)
}

// Uint16 returns the bits of a BF16 or F16 tensor: a view of the file when
// aligned, otherwise a copy.
func (f *File) Uint16(name string) ([]uint16, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if t.DType != BF16 && t.DType != F16 {
		if !t.DType.Supported() {
			return nil, f.unsupported(t)
		}
		return nil, fmt.Errorf("safetensors: %s: tensor %q is %s, not a 16-bit float", f.path, name, t.DType)
	}
	b := f.bytes(t)
	n := int(t.Len())
	if n == 0 {
		return []uint16{}, nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n), nil
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out, nil
}

// Close unmaps the file. Views handed out before must not be used after.
func (f *File) Close() error {
	data, mapped := f.data, f.mapped
	f.data, f.mapped = nil, false
	if mapped && data != nil {
		if err := unix.Munmap(data); err != nil {
			return fmt.Errorf("safetensors: %s: unmap: %w", f.path, err)
		}
	}
	return nil
}
