package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File is an open GGUF file: its header, and its tensor data in a
// read-only memory mapping. Views returned by its accessors point into the
// mapping: they must not be written to, and must not be used after Close.
// The file must not be truncated while it is open.
type File struct {
	*Header
	path   string
	data   []byte // the whole file: a mapping, or a heap copy if mmap failed
	mapped bool
}

// Open maps path read-only and parses its header (see Parse). Errors name
// the path and what is wrong with the file.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s: not a regular file", path)
	}
	size := st.Size()
	if size != int64(int(size)) {
		return nil, fmt.Errorf("gguf: %s: a file of %d bytes is too large for this platform", path, size)
	}
	gf := &File{path: path}
	if size == 0 {
		gf.data = []byte{}
	} else if data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err == nil {
		gf.data, gf.mapped = data, true
	} else {
		gf.data = make([]byte, size)
		if _, err := io.ReadFull(f, gf.data); err != nil {
			return nil, fmt.Errorf("gguf: %s: reading: %w", path, err)
		}
	}
	h, err := Parse(gf.data)
	if err != nil {
		gf.Close()
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	gf.Header = h
	return gf, nil
}

// Path is the file's path as given to Open.
func (f *File) Path() string { return f.path }

// Mapped reports whether the file is memory-mapped (rather than read into
// memory because mapping failed).
func (f *File) Mapped() bool { return f.mapped }

// Size is the file's size in bytes.
func (f *File) Size() int64 { return int64(len(f.data)) }

func (f *File) lookup(name string) (TensorInfo, error) {
	if f.data == nil {
		return TensorInfo{}, fmt.Errorf("gguf: %s: file is closed", f.path)
	}
	t, ok := f.Tensor(name)
	if !ok {
		return TensorInfo{}, fmt.Errorf("gguf: %s: tensor %q not found", f.path, name)
	}
	return t, nil
}

// Bytes returns the raw bytes of the named tensor as stored (a view).
func (f *File) Bytes(name string) ([]byte, TensorInfo, error) {
	t, err := f.lookup(name)
	if err != nil {
		return nil, TensorInfo{}, err
	}
	lo := uint64(f.DataOffset) + t.Offset
	hi := lo + t.Size
	return f.data[lo:hi:hi], t, nil
}

// littleEndian reports whether the host stores numbers little-endian, so
// that file bytes can be viewed as numbers in place.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Float32 returns the named tensor's values as float32: a view of the file
// for an aligned F32 tensor, otherwise a new slice (F16 and BF16 widened
// exactly, quantized blocks dequantized). A type Dequantize cannot read
// is an error naming the tensor and its type.
func (f *File) Float32(name string) ([]float32, error) {
	b, t, err := f.Bytes(name)
	if err != nil {
		return nil, err
	}
	n := t.Elems()
	if t.Type == F32 && littleEndian && (n == 0 || uintptr(unsafe.Pointer(&b[0]))%4 == 0) {
		if n == 0 {
			return []float32{}, nil
		}
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), nil
	}
	if !t.Type.Readable() {
		return nil, fmt.Errorf("gguf: %s: tensor %q is %s, which clawrl cannot read (it reads %s)", f.path, name, t.Type, readableNames())
	}
	out := make([]float32, n)
	if err := DequantizeParallel(out, b, t.Type); err != nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q: %w", f.path, name, err)
	}
	return out, nil
}

// Uint16 returns the bits of a BF16 or F16 tensor: a view of the file
// when aligned, otherwise a copy.
func (f *File) Uint16(name string) ([]uint16, error) {
	b, t, err := f.Bytes(name)
	if err != nil {
		return nil, err
	}
	if t.Type != BF16 && t.Type != F16 {
		return nil, fmt.Errorf("gguf: %s: tensor %q is %s, not a 16-bit float", f.path, name, t.Type)
	}
	return uint16s(b), nil
}

// uint16s views b as little-endian uint16s, or copies it when it cannot.
func uint16s(b []byte) []uint16 {
	n := len(b) / 2
	if n == 0 {
		return []uint16{}
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]uint16, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out
}

// Close unmaps the file. Views handed out before must not be used after.
func (f *File) Close() error {
	data, mapped := f.data, f.mapped
	f.data, f.mapped = nil, false
	if mapped && len(data) > 0 {
		if err := unix.Munmap(data); err != nil {
			return fmt.Errorf("gguf: %s: unmap: %w", f.path, err)
		}
	}
	return nil
}

// errorf returns an error that names the file.
func (f *File) errorf(format string, args ...any) error {
	return fmt.Errorf("gguf: %s: %s", f.path, fmt.Sprintf(format, args...))
}
