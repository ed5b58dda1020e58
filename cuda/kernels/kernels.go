// Package kernels holds the CUDA C sources of the cuda backend's kernels
// and the PTX that clang compiles them to, both embedded in the binary.
//
// The PTX (NAME.ptx from NAME.cu) is what package cuda loads into a GPU
// with cuModuleLoadData; the driver JIT-compiles it for the GPU it finds.
// The sources, with the compat header (cuda_compat.h) and the emulation
// runtime (emu/), are what package cuda/fakecuda compiles for the host to
// run the same kernels without a GPU.
//
// The committed PTX must be what the sources compile to: go generate
// rebuilds it, and build-ptx.sh --check (and TestPTXUpToDate in package
// cuda) fails when it is stale.
package kernels

//go:generate ./build-ptx.sh

import (
	"embed"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

//go:embed *.ptx
var ptx embed.FS

//go:embed *.cu *.cuh *.h emu/*.h emu/*.cc emu/*.cu build-ptx.sh
var sources embed.FS

// Module is the PTX of one source file.
type Module struct {
	Name    string   // the source's base name, e.g. "selftest"
	PTX     []byte   // NUL-terminated, as cuModuleLoadData wants
	Entries []string // the kernels it defines
}

var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry ([A-Za-z_][A-Za-z0-9_]*)\(`)

// Modules returns the embedded PTX modules, in name order.
func Modules() []Module {
	names, err := fs.Glob(ptx, "*.ptx")
	if err != nil {
		panic(err) // the pattern is valid
	}
	sort.Strings(names)
	mods := make([]Module, 0, len(names))
	for _, n := range names {
		b, err := ptx.ReadFile(n)
		if err != nil {
			panic(err) // embedded
		}
		m := Module{Name: strings.TrimSuffix(n, ".ptx"), PTX: append(b, 0)}
		for _, e := range entryRE.FindAllSubmatch(b, -1) {
			m.Entries = append(m.Entries, string(e[1]))
		}
		mods = append(mods, m)
	}
	return mods
}

// Sources is the kernel sources, the compat header, the emulation runtime
// and build-ptx.sh, as files relative to cuda/kernels.
func Sources() fs.FS { return sources }
